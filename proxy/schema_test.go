package proxy

import (
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/codec"
)

func mustCompile(t testing.TB, schema string) *compiledSchema {
	t.Helper()
	s, cerr := compileSchema([]byte(schema))
	require.Nil(t, cerr, "schema: %s", schema)
	return s
}

const answerSchema = `{
	"type": "object",
	"properties": {
		"answer": {"type": "string", "pattern": "^[A-Z]", "minLength": 2},
		"score": {"type": "number", "minimum": 0, "maximum": 10},
		"tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}, "maxItems": 2},
		"kind": {"const": "x"},
		"note": {"anyOf": [{"type": "string"}, {"type": "null"}]},
		"extra": {"type": "object", "additionalProperties": {"type": "integer"}},
		"item": {"$ref": "#/$defs/item"}
	},
	"required": ["answer", "score"],
	"additionalProperties": false,
	"$defs": {"item": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}}
}`

func TestCompiledSchemaCheck(t *testing.T) {
	s := mustCompile(t, answerSchema)
	for _, tc := range []struct {
		name   string
		output string
		msg    string   // "" when the output satisfies the schema
		secret []string // output text the message must not contain
	}{
		{name: "satisfied", output: `{"answer":"Yes","score":7.5,"tags":["a"],"kind":"x","note":null,"extra":{"k":1},"item":{"id":3}}`},
		{name: "satisfied with surrounding space", output: " \n{\"answer\":\"Ok\",\"score\":0}\n "},
		{name: "not JSON", output: `{"answer":"Yes",`, msg: "(the output is not valid JSON)"},
		{name: "two values", output: `{"answer":"Yes","score":1} {}`, msg: "(the output is not valid JSON)"},
		{name: "empty", output: ``, msg: "(the output is not valid JSON)"},
		{name: "missing property", output: `{"answer":"Yes"}`, msg: "(at the top level: missing property 'score')"},
		{name: "wrong type", output: `{"answer":"Yes","score":"very high"}`,
			msg: "(at /score: got string, want number)", secret: []string{"very high"}},
		{name: "below minimum", output: `{"answer":"Yes","score":-12345}`,
			msg: "(at /score: number is below minimum 0)", secret: []string{"12345"}},
		{name: "above maximum", output: `{"answer":"Yes","score":99.5}`,
			msg: "(at /score: number is above maximum 10)", secret: []string{"99.5"}},
		{name: "enum", output: `{"answer":"Yes","score":1,"tags":["a","classified"]}`,
			msg: "(at /tags/1: value is not one of the enum values)", secret: []string{"classified"}},
		{name: "too many items", output: `{"answer":"Yes","score":1,"tags":["a","b","a"]}`,
			msg: "(at /tags: 3 items, above maxItems 2)"},
		{name: "pattern", output: `{"answer":"lowercase secret","score":1}`,
			msg: `(at /answer: string does not match pattern "^[A-Z]")`, secret: []string{"lowercase secret"}},
		{name: "min length", output: `{"answer":"Q","score":1}`,
			msg: "(at /answer: string length 1 is below minLength 2)"},
		{name: "const", output: `{"answer":"Yes","score":1,"kind":"hidden-y"}`,
			msg: "(at /kind: value is not the const value)", secret: []string{"hidden-y"}},
		{name: "anyOf", output: `{"answer":"Yes","score":1,"note":12345}`,
			msg: "(at /note: value matches none of the anyOf schemas)", secret: []string{"12345"}},
		{name: "additional property", output: `{"answer":"Yes","score":1,"ssn-078-05-1120":true}`,
			msg: "(at the top level: 1 additional property not allowed)", secret: []string{"078-05-1120"}},
		{name: "undeclared key in a path", output: `{"answer":"Yes","score":1,"extra":{"alice@example.com":"x"}}`,
			msg: "(at /extra/*: got string, want integer)", secret: []string{"alice@example.com"}},
		{name: "through $ref", output: `{"answer":"Yes","score":1,"item":{"id":"seven"}}`,
			msg: "(at /item/id: got string, want integer)", secret: []string{"seven"}},
		{name: "not an object", output: `["Yes", 1]`, msg: "(at the top level: got array, want object)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cerr := s.Check([]byte(tc.output))
			if tc.msg == "" {
				require.Nil(t, cerr)
				return
			}
			require.NotNil(t, cerr)
			require.Equal(t, codec.CodeStructuredOutputUnsatisfied, cerr.Code)
			require.Equal(t, 422, cerr.Status())
			require.Equal(t, "The model's output did not satisfy the json_schema "+tc.msg+".", cerr.Message)
			for _, secret := range tc.secret {
				require.NotContains(t, cerr.Message, secret)
			}
		})
	}
}

func TestCompiledSchemaRecursion(t *testing.T) {
	t.Run("tree through $ref to the root", func(t *testing.T) {
		s := mustCompile(t, `{"type":"object","properties":{"name":{"type":"string"},"children":{"type":"array","items":{"$ref":"#"}}},"required":["name"]}`)
		require.Nil(t, s.Check([]byte(`{"name":"r","children":[{"name":"c","children":[]}]}`)))
		cerr := s.Check([]byte(`{"name":"r","children":[{"name":"c","children":[{}]}]}`))
		require.NotNil(t, cerr)
		require.Contains(t, cerr.Message, "(at /children/0/children/0: missing property 'name')")
	})
	t.Run("reference cycle refused", func(t *testing.T) {
		// It would fail on every output, billed; it is refused up front.
		for _, schema := range []string{
			`{"$defs":{"a":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"}`,
			`{"$ref":"#"}`,
			`{"type":"object","required":["a"],"properties":{"a":{"$ref":"#"}}}`,
			`{"type":"array","minItems":1,"items":{"$ref":"#"}}`,
			`{"$defs":{"a":{"allOf":[{"$ref":"#/$defs/b"}]},"b":{"anyOf":[{"$ref":"#/$defs/a"}]}},"type":"object","properties":{"x":{"$ref":"#/$defs/a"}}}`,
		} {
			_, cerr := compileSchema([]byte(schema))
			require.NotNil(t, cerr, schema)
			require.Equal(t, codec.CodeInvalidSchema, cerr.Code)
			require.Contains(t, cerr.Message, "refers back to itself without end", schema)
		}
	})
	t.Run("optional recursion accepted", func(t *testing.T) {
		mustCompile(t, `{"type":"object","properties":{"next":{"anyOf":[{"$ref":"#"},{"type":"null"}]}},"required":["next"]}`)
		mustCompile(t, `{"type":"array","items":{"$ref":"#"}}`)
	})
}

func TestCompileSchema(t *testing.T) {
	for _, tc := range []struct {
		name   string
		schema string
		msg    string // "" when it compiles
	}{
		{name: "boolean subschemas", schema: `{"type":"object","properties":{"a":true,"b":false}}`},
		{name: "every listed keyword", schema: `{"type":"object","title":"t","description":"d","nullable":false,"default":{},"examples":[{}],
			"properties":{"s":{"type":"string","minLength":1,"maxLength":9,"pattern":"^a","format":"date"},
				"n":{"type":"integer","minimum":0,"maximum":9,"exclusiveMinimum":-1,"exclusiveMaximum":10,"multipleOf":1},
				"a":{"type":"array","items":{"enum":[1,2]},"prefixItems":[{"const":1}],"minItems":1,"maxItems":3,"uniqueItems":true},
				"o":{"type":"object","patternProperties":{"^x":{"type":"string"}},"propertyNames":{"maxLength":5},"minProperties":1,"maxProperties":4},
				"u":{"anyOf":[{"type":"string"}],"oneOf":[{"type":"string"}],"allOf":[{"$ref":"#/definitions/d"}]}},
			"required":["s"],"additionalProperties":false,"definitions":{"d":{}},"$defs":{"e":{}}}`},
		{name: "a boolean schema", schema: `true`, msg: "must be a JSON Schema object"},
		{name: "invalid JSON", schema: `{"type":`, msg: "is not valid JSON"},
		{name: "keyword named in a property name is fine", schema: `{"properties":{"if":{"type":"string"},"$dynamicRef":{}}}`},
		{name: "unsupported keyword reports its place", schema: `{"properties":{"a/b":{"items":{"unevaluatedItems":false}}}}`,
			msg: `keyword "unevaluatedItems" at /properties/a~1b/items is not supported`},
		{name: "first unsupported keyword in order", schema: `{"then":{},"if":{}}`, msg: `keyword "if"`},
		{name: "metaschema failure", schema: `{"type":"text"}`, msg: "at /type: value must be one of"},
		{name: "exactly 32 KiB", schema: `{"description":"` + strings.Repeat("x", 32<<10-18) + `"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, cerr := compileSchema([]byte(tc.schema))
			if tc.msg == "" {
				require.Nil(t, cerr)
				require.NotNil(t, s)
				return
			}
			require.Nil(t, s)
			require.NotNil(t, cerr)
			require.Equal(t, codec.CodeInvalidSchema, cerr.Code)
			require.Equal(t, 400, cerr.Status())
			require.Contains(t, cerr.Message, "response_format.json_schema.schema: ")
			require.Contains(t, cerr.Message, tc.msg)
		})
	}
}

func TestCheckJSONObject(t *testing.T) {
	for _, tc := range []struct {
		name   string
		output string
		ok     bool
	}{
		{name: "object", output: `{"a":[1,2]}`, ok: true},
		{name: "empty object with space", output: " {} \n", ok: true},
		{name: "array", output: `[{}]`},
		{name: "string", output: `"{}"`},
		{name: "null", output: `null`},
		{name: "empty", output: ``},
		{name: "truncated", output: `{"a":`},
		{name: "two objects", output: `{} {}`},
		{name: "prose around it", output: `Here: {"a":1}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cerr := checkJSONObject([]byte(tc.output))
			if tc.ok {
				require.Nil(t, cerr)
				return
			}
			require.NotNil(t, cerr)
			require.Equal(t, codec.CodeStructuredOutputUnsatisfied, cerr.Code)
			require.Equal(t, 422, cerr.Status())
		})
	}
}

func TestCompiledSchemaConcurrentChecks(t *testing.T) {
	s := mustCompile(t, answerSchema)
	var wg sync.WaitGroup
	var wrong atomic.Int32
	for g := range 8 {
		wg.Go(func() {
			for i := range 50 {
				good := (g+i)%2 == 0
				out := `{"answer":"Yes"}`
				if good {
					out = `{"answer":"Yes","score":3}`
				}
				if (s.Check([]byte(out)) == nil) != good {
					wrong.Add(1)
				}
			}
		})
	}
	wg.Wait()
	require.Zero(t, wrong.Load())
}

func BenchmarkCompileSchema(b *testing.B) {
	raw := []byte(answerSchema)
	b.ReportAllocs()
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		if _, cerr := compileSchema(raw); cerr != nil {
			b.Fatal(cerr)
		}
	}
}

func BenchmarkCompiledSchemaCheck(b *testing.B) {
	s := mustCompile(b, answerSchema)
	out := []byte(`{"answer":"Yes","score":7.5,"tags":["a"],"kind":"x","note":null,"extra":{"k":1},"item":{"id":3}}`)
	b.ReportAllocs()
	b.SetBytes(int64(len(out)))
	for b.Loop() {
		if cerr := s.Check(out); cerr != nil {
			b.Fatal(cerr)
		}
	}
}

func TestSchemaAcceptsGeneratorMetadata(t *testing.T) {
	s, cerr := compileSchema([]byte(`{"$schema":"https://json-schema.org/draft/2020-12/schema","$id":"urn:example:x","$comment":"made by a generator","type":"object","properties":{"a":{"type":"integer"}},"required":["a"]}`))
	require.Nil(t, cerr)
	require.Nil(t, s.Check([]byte(`{"a":1}`)))
	require.NotNil(t, s.Check([]byte(`{"a":"x"}`)))
}
