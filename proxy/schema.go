package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/big"
	"slices"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/edgegw/gateway/codec"
)

// schemaURL is the address a response_format schema is compiled under. It
// is never fetched: every reference outside the schema itself is refused.
const (
	schemaBase = "https://response-format.invalid/"
	schemaURL  = schemaBase + "schema.json"
)

// compiledSchema is a response_format json_schema, checked against the
// gateway's bounds and keyword allow-list and compiled (draft 2020-12), ready
// to check the model's output. It is safe for concurrent use.
type compiledSchema struct {
	sch *jsonschema.Schema
	// declared holds every property name the schema names under properties
	// or required: the only object keys of an output that an error message
	// may show. Other keys came from the model and are shown as "*".
	declared map[string]struct{}
}

// schemaPrinter renders the compiler's explanations of a malformed schema.
var schemaPrinter = message.NewPrinter(language.English)

// supportedKeyword reports whether k is a keyword a response_format schema
// may use. Anything else, such as $dynamicRef, if/then/else,
// unevaluatedProperties, dependentSchemas or contentEncoding, is refused:
// constrained decoding cannot honour it.
func supportedKeyword(k string) bool {
	switch k {
	case "type", "properties", "required", "items", "enum", "const",
		"additionalProperties", "description", "title", "$schema", "$id", "$comment", "anyOf", "oneOf",
		"allOf", "$ref", "$defs", "definitions", "minimum", "maximum",
		"exclusiveMinimum", "exclusiveMaximum", "minLength", "maxLength",
		"pattern", "minItems", "maxItems", "uniqueItems", "format", "default",
		"nullable", "multipleOf", "prefixItems", "minProperties",
		"maxProperties", "patternProperties", "propertyNames", "examples":
		return true
	}
	return false
}

// compileSchema checks and compiles the schema of a response_format
// json_schema: at most 32 KiB, a JSON object nested at most 16 deep, using
// only supported keywords, with references only inside itself, and valid
// under draft 2020-12. Any failure is 400 invalid_schema saying what is
// wrong.
func compileSchema(raw []byte) (*compiledSchema, *codec.Error) {
	raw = trimJSONSpace(raw)
	if len(raw) > maxResponseSchemaBytes {
		return nil, schemaRefusal("exceeds the bound of "+strconv.Itoa(maxResponseSchemaBytes)+" bytes.", "bytes", maxResponseSchemaBytes)
	}
	if !json.Valid(raw) {
		return nil, schemaRefusal("is not valid JSON.", "", 0)
	}
	if raw[0] != '{' {
		return nil, schemaRefusal("must be a JSON Schema object.", "", 0)
	}
	if jsonShape(raw, maxResponseSchemaDepth, len(raw)) == shapeTooDeep {
		return nil, schemaRefusal("nesting exceeds the bound of depth "+strconv.Itoa(maxResponseSchemaDepth)+".", "depth", maxResponseSchemaDepth)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, schemaRefusal("is not valid JSON.", "", 0)
	}
	s := &compiledSchema{declared: map[string]struct{}{}}
	if e := s.walk(doc, ""); e != nil {
		return nil, e
	}
	if f := lintSchema(doc); f != nil {
		return nil, schemaRefusal(f.msg, f.bound, f.limit)
	}

	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(refusingLoader{})
	if err := c.AddResource(schemaURL, doc); err != nil {
		return nil, schemaRefusal("cannot be compiled.", "", 0)
	}
	sch, err := c.Compile(schemaURL)
	if err != nil {
		return nil, schemaRefusal(describeCompileError(err), "", 0)
	}
	s.sch = sch
	return s, nil
}

func schemaRefusal(msg, bound string, limit int64) *codec.Error {
	e := &codec.Error{Code: codec.CodeInvalidSchema, Message: "response_format.json_schema.schema: " + msg}
	if bound != "" {
		e.Detail = codec.Detail{Bound: bound, Limit: limit, HasLimit: true}
	}
	return e
}

// walk refuses unsupported keywords anywhere a schema may appear and
// collects the declared property names. ptr is the JSON pointer of v in the
// schema document. Values that are not schemas where one is expected are
// left to the compiler, which explains them against the metaschema.
func (s *compiledSchema) walk(v any, ptr string) *codec.Error {
	obj, ok := v.(map[string]any)
	if !ok {
		return nil // a boolean schema, or a malformed one the compiler reports
	}
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	slices.Sort(keys) // the first unsupported keyword reported is stable
	for _, k := range keys {
		if !supportedKeyword(k) {
			return schemaRefusal("keyword "+strconv.Quote(k)+" at "+pointerOrRoot(ptr)+" is not supported.", "", 0)
		}
	}
	for _, k := range keys {
		at := ptr + "/" + escapePointer(k)
		switch val := obj[k].(type) {
		case map[string]any:
			switch k {
			case "properties", "patternProperties", "$defs", "definitions":
				names := make([]string, 0, len(val))
				for name := range val {
					names = append(names, name)
				}
				slices.Sort(names)
				for _, name := range names {
					if k == "properties" {
						s.declared[name] = struct{}{}
					}
					if e := s.walk(val[name], at+"/"+escapePointer(name)); e != nil {
						return e
					}
				}
			case "items", "additionalProperties", "propertyNames":
				if e := s.walk(val, at); e != nil {
					return e
				}
			}
		case []any:
			switch k {
			case "anyOf", "oneOf", "allOf", "prefixItems", "items":
				for i, sub := range val {
					if e := s.walk(sub, at+"/"+strconv.Itoa(i)); e != nil {
						return e
					}
				}
			case "required":
				for _, name := range val {
					if n, ok := name.(string); ok {
						s.declared[n] = struct{}{}
					}
				}
			}
		}
	}
	return nil
}

// refusingLoader refuses to load anything: a schema may only refer inside
// itself (and to the standard metaschemas, which are built in).
type refusingLoader struct{}

var errExternalRef = errors.New("only references inside the schema are supported")

func (refusingLoader) Load(string) (any, error) { return nil, errExternalRef }

// describeCompileError turns a compiler error into one line that names the
// place in the schema and what is wrong there.
func describeCompileError(err error) string {
	var (
		sve *jsonschema.SchemaValidationError
		lue *jsonschema.LoadURLError
		ire *jsonschema.InvalidRegexError
		jpe *jsonschema.JSONPointerNotFoundError
		ane *jsonschema.AnchorNotFoundError
	)
	switch {
	case errors.As(err, &sve):
		var ve *jsonschema.ValidationError
		if errors.As(sve.Err, &ve) {
			leaf := deepestFirstCause(ve)
			return "at " + pointerOrRoot(jsonPointer(leaf.InstanceLocation)) + ": " + leaf.ErrorKind.LocalizedString(schemaPrinter) + "."
		}
	case errors.As(err, &lue):
		return "$ref " + strconv.Quote(localRef(lue.URL)) + ": only references inside the schema are supported."
	case errors.As(err, &ire):
		return "pattern " + strconv.Quote(ire.Regex) + " at " + strconv.Quote(localRef(ire.URL)) + " is not a valid RE2 regular expression."
	case errors.As(err, &jpe):
		return "$ref " + strconv.Quote(localRef(jpe.URL)) + " points at nothing in the schema."
	case errors.As(err, &ane):
		return "$ref " + strconv.Quote(localRef(ane.Reference)) + " points at nothing in the schema."
	}
	return "cannot be compiled: " + strings.ReplaceAll(err.Error(), schemaBase, "") + "."
}

// localRef shows a reference relative to the schema itself.
func localRef(u string) string {
	if rest, ok := strings.CutPrefix(u, schemaURL); ok {
		if rest == "" {
			return "#"
		}
		return rest
	}
	if rest, ok := strings.CutPrefix(u, schemaBase); ok {
		return rest
	}
	return u
}

// Check reports whether output, the model's reply, is JSON that satisfies
// the schema. Otherwise it is 422 structured_output_unsatisfied with a
// message that names where and which rule failed, in terms of the schema:
// it never quotes the output's values, and it shows an object key of the
// output only when the schema declares that name.
func (s *compiledSchema) Check(output []byte) *codec.Error {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(output))
	if err != nil {
		return errOutputNotJSON
	}
	err = s.sch.Validate(v)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return unsatisfied("")
	}
	leaf := firstCause(ve)
	return unsatisfied("at " + s.outputPointer(v, leaf.InstanceLocation) + ": " + describeFailure(leaf.ErrorKind))
}

var (
	errOutputNotJSON   = unsatisfied("the output is not valid JSON")
	errOutputNotObject = &codec.Error{Code: codec.CodeStructuredOutputUnsatisfied,
		Message: "The model's output is not a JSON object, as response_format json_object requires."}
)

func unsatisfied(why string) *codec.Error {
	msg := "The model's output did not satisfy the json_schema."
	if why != "" {
		msg = "The model's output did not satisfy the json_schema (" + why + ")."
	}
	return &codec.Error{Code: codec.CodeStructuredOutputUnsatisfied, Message: msg}
}

// checkJSONObject reports whether output, the model's reply, is a single
// JSON object, as response_format json_object asks; otherwise it is 422
// structured_output_unsatisfied.
func checkJSONObject(output []byte) *codec.Error {
	b := trimJSONSpace(output)
	if len(b) == 0 || b[0] != '{' || !json.Valid(b) {
		return errOutputNotObject
	}
	return nil
}

// firstCause descends from a validation error to the failure that explains
// it: through wrappers (the whole schema, a group, a $ref, allOf) along the
// first cause, stopping at anyOf and oneOf, whose branches each failed in
// their own way.
func firstCause(ve *jsonschema.ValidationError) *jsonschema.ValidationError {
	for len(ve.Causes) > 0 {
		switch ve.ErrorKind.(type) {
		case *kind.Schema, *kind.Group, *kind.Reference, *kind.AllOf:
			ve = ve.Causes[0]
		default:
			return ve
		}
	}
	return ve
}

// deepestFirstCause follows first causes all the way down. It explains a
// schema that fails its metaschema: there the alternatives of an anyOf are
// the metaschema's, and the first usually names what the keyword accepts.
func deepestFirstCause(ve *jsonschema.ValidationError) *jsonschema.ValidationError {
	for len(ve.Causes) > 0 {
		ve = ve.Causes[0]
	}
	return ve
}

// describeFailure explains a failed keyword without the output's values:
// numbers and names in it come from the schema; counts and indexes describe
// the output's shape.
func describeFailure(k jsonschema.ErrorKind) string {
	switch k := k.(type) {
	case *kind.Type:
		return "got " + k.Got + ", want " + strings.Join(k.Want, " or ")
	case *kind.Required:
		return "missing " + plural(len(k.Missing), "property", "properties") + " " + quoteNames(k.Missing)
	case *kind.AdditionalProperties:
		return strconv.Itoa(len(k.Properties)) + " additional " + plural(len(k.Properties), "property", "properties") + " not allowed"
	case *kind.Enum:
		return "value is not one of the enum values"
	case *kind.Const:
		return "value is not the const value"
	case *kind.Pattern:
		return "string does not match pattern " + strconv.Quote(k.Want)
	case *kind.Format:
		return "string is not a valid " + k.Want
	case *kind.MinLength:
		return "string length " + strconv.Itoa(k.Got) + " is below minLength " + strconv.Itoa(k.Want)
	case *kind.MaxLength:
		return "string length " + strconv.Itoa(k.Got) + " is above maxLength " + strconv.Itoa(k.Want)
	case *kind.MinItems:
		return strconv.Itoa(k.Got) + " items, below minItems " + strconv.Itoa(k.Want)
	case *kind.MaxItems:
		return strconv.Itoa(k.Got) + " items, above maxItems " + strconv.Itoa(k.Want)
	case *kind.MinProperties:
		return strconv.Itoa(k.Got) + " properties, below minProperties " + strconv.Itoa(k.Want)
	case *kind.MaxProperties:
		return strconv.Itoa(k.Got) + " properties, above maxProperties " + strconv.Itoa(k.Want)
	case *kind.UniqueItems:
		return "items at " + strconv.Itoa(k.Duplicates[0]) + " and " + strconv.Itoa(k.Duplicates[1]) + " are equal"
	case *kind.Minimum:
		return "number is below minimum " + ratString(k.Want)
	case *kind.Maximum:
		return "number is above maximum " + ratString(k.Want)
	case *kind.ExclusiveMinimum:
		return "number is not above exclusiveMinimum " + ratString(k.Want)
	case *kind.ExclusiveMaximum:
		return "number is not below exclusiveMaximum " + ratString(k.Want)
	case *kind.MultipleOf:
		return "number is not a multiple of " + ratString(k.Want)
	case *kind.PropertyNames:
		return "a property name does not satisfy propertyNames"
	case *kind.AnyOf:
		return "value matches none of the anyOf schemas"
	case *kind.OneOf:
		if len(k.Subschemas) == 0 {
			return "value matches none of the oneOf schemas"
		}
		return "value matches more than one of the oneOf schemas"
	case *kind.FalseSchema:
		return "value is not allowed here"
	}
	if kw := k.KeywordPath(); len(kw) > 0 {
		return "value fails " + strings.Join(kw, "/")
	}
	return "value is not valid here"
}

// outputPointer renders the JSON pointer of a place in the output, walking
// the decoded output alongside: array indexes and declared property names
// are shown, any other object key as "*".
func (s *compiledSchema) outputPointer(v any, loc []string) string {
	if len(loc) == 0 {
		return "the top level"
	}
	var b strings.Builder
	for _, tok := range loc {
		b.WriteByte('/')
		switch x := v.(type) {
		case []any:
			b.WriteString(tok)
			if i, err := strconv.Atoi(tok); err == nil && i >= 0 && i < len(x) {
				v = x[i]
			} else {
				v = nil
			}
		case map[string]any:
			if _, ok := s.declared[tok]; ok {
				b.WriteString(escapePointer(tok))
			} else {
				b.WriteByte('*')
			}
			v = x[tok]
		default:
			b.WriteByte('*')
			v = nil
		}
	}
	return b.String()
}

func jsonPointer(tokens []string) string {
	var b strings.Builder
	for _, t := range tokens {
		b.WriteByte('/')
		b.WriteString(escapePointer(t))
	}
	return b.String()
}

func pointerOrRoot(ptr string) string {
	if ptr == "" {
		return "the top level"
	}
	return ptr
}

func escapePointer(s string) string {
	if !strings.ContainsAny(s, "~/") {
		return s
	}
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func quoteNames(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = "'" + n + "'"
	}
	return strings.Join(q, ", ")
}

func ratString(r *big.Rat) string {
	if r == nil {
		return "?"
	}
	if r.IsInt() {
		return r.Num().String()
	}
	f, _ := r.Float64()
	return strconv.FormatFloat(f, 'g', -1, 64)
}
