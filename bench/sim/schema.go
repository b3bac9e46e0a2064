package sim

import (
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/bytedance/sonic"

	"github.com/edgegw/gateway/codec"
)

// Bounds on what one schema can make the simulator do, whatever it asks
// for: recursion through nested and $ref'd schemas, the length of one
// string, the bytes of one instance (past it every further value is null,
// so an instance stays within maxSchemaOutput plus one const or enum value
// copied from the schema) and the work spent walking the schema (steps
// counted per schema visited and per keyword or name copied; past the
// budget every further value is null).
const (
	maxSchemaDepth  = 24
	maxSchemaString = 4096
	maxSchemaOutput = 64 << 10
	maxSchemaSteps  = 1 << 20
	maxSchemaItems  = 64
)

// decodeSchema decodes a raw JSON Schema; an empty one is the schema {}.
func decodeSchema(raw []byte) (any, error) {
	if len(strings.TrimSpace(string(raw))) == 0 {
		return map[string]any{}, nil
	}
	var v any
	if err := sonic.Unmarshal(raw, &v); err != nil {
		return nil, err
	}
	return v, nil
}

// schemaGen writes JSON instances of one schema.
type schemaGen struct {
	root  any
	steps int // work spent so far, against maxSchemaSteps
}

// spend counts n steps of work and reports whether the budget still holds.
func (g *schemaGen) spend(n int) bool {
	g.steps += n
	return g.steps <= maxSchemaSteps
}

// clampCount is a schema's count keyword v as an int from 0 to hi: NaN,
// negative and fractional values round toward 0, huge ones to hi.
func clampCount(v float64, hi int) int {
	switch {
	case !(v > 0):
		return 0
	case v >= float64(hi):
		return hi
	}
	return int(v)
}

// appendValid appends a minimal instance valid for the schema: an object
// holds its required properties only (in the order "required" lists them),
// an array holds minItems items (at least one when maxItems allows), an
// enum or const gives its first value, anyOf and oneOf their first branch,
// allOf its branches merged, numbers the value nearest 0 within the
// bounds, strings a word padded or cut to the length bounds, or a fixed
// value for the formats date-time, date, time, email, uri and uuid. A
// "pattern" is not honoured.
func (g *schemaGen) appendValid(dst []byte) []byte {
	return g.value(dst, g.root, 0, 0)
}

// appendInvalid appends an instance the schema refuses: for an object, the
// valid object without its first required property, or else with its first
// property (by name) of the wrong type; for an enum or const, a value not
// listed; otherwise a value of a type the schema (or each of its anyOf and
// oneOf branches) does not take. A schema that accepts everything gets the
// string "invalid", which it accepts.
func (g *schemaGen) appendInvalid(dst []byte) []byte {
	s, _ := g.resolve(g.root, 0).(map[string]any)
	_, hasConst := s["const"]
	if _, hasEnum := s["enum"]; hasEnum || hasConst {
		return append(dst, `{"invalid":true}`...)
	}
	if schemaType(s) == "object" {
		props, _ := s["properties"].(map[string]any)
		if req := g.requiredNames(s); len(req) > 0 {
			dst = append(dst, '{')
			for i, name := range req[1:] {
				if i > 0 {
					dst = append(dst, ',')
				}
				dst = codec.AppendJSONString(dst, name)
				dst = append(dst, ':')
				dst = g.value(dst, propSchema(s, props, name), 1, 0)
			}
			return append(dst, '}')
		}
		if len(props) > 0 {
			name := sortedKeys(props)[0]
			ps, _ := g.resolve(props[name], 1).(map[string]any)
			dst = append(dst, '{')
			dst = codec.AppendJSONString(dst, name)
			dst = append(dst, ':')
			dst = wrongType(dst, g.types(ps))
			return append(dst, '}')
		}
	}
	return wrongType(dst, g.types(s))
}

// types is the set of JSON types s takes, through its anyOf and oneOf
// branches; empty when it takes any.
func (g *schemaGen) types(s map[string]any) map[string]bool {
	set := map[string]bool{}
	add := func(m map[string]any) bool {
		switch t := m["type"].(type) {
		case string:
			set[t] = true
		case []any:
			for _, v := range t {
				if name, ok := v.(string); ok {
					set[name] = true
				}
			}
		default:
			if t := schemaType(m); t != "" {
				set[t] = true
			} else {
				return false
			}
		}
		return true
	}
	for _, k := range []string{"anyOf", "oneOf"} {
		if branches, ok := s[k].([]any); ok {
			for _, b := range branches {
				m, _ := g.resolve(b, 1).(map[string]any)
				if !add(m) {
					return map[string]bool{}
				}
			}
			return set
		}
	}
	add(s)
	return set
}

// wrongType appends a value of a type not in types.
func wrongType(dst []byte, types map[string]bool) []byte {
	switch {
	case len(types) == 0 || !types["string"]:
		return append(dst, `"invalid"`...)
	case !types["integer"] && !types["number"]:
		return append(dst, "12345"...)
	case !types["object"]:
		return append(dst, `{"invalid":true}`...)
	case !types["array"]:
		return append(dst, `["invalid"]`...)
	case !types["boolean"]:
		return append(dst, "false"...)
	}
	return append(dst, "null"...)
}

// resolve follows $ref, and merges allOf, until s is a plain schema.
func (g *schemaGen) resolve(s any, depth int) any {
	if depth > maxSchemaDepth {
		return nil
	}
	for range maxSchemaDepth {
		if !g.spend(1) {
			return nil
		}
		m, ok := s.(map[string]any)
		if !ok {
			return s
		}
		if ref, ok := m["$ref"].(string); ok {
			s = g.pointer(ref)
			continue
		}
		if all, ok := m["allOf"].([]any); ok && len(all) > 0 {
			s = g.mergeAll(m, all, depth)
			continue
		}
		return m
	}
	return nil
}

// pointer resolves a local reference "#/a/b" against the root schema.
func (g *schemaGen) pointer(ref string) any {
	if ref == "#" {
		return g.root
	}
	path, ok := strings.CutPrefix(ref, "#/")
	if !ok {
		return nil
	}
	cur := g.root
	for part := range strings.SplitSeq(path, "/") {
		part = strings.ReplaceAll(strings.ReplaceAll(part, "~1", "/"), "~0", "~")
		switch c := cur.(type) {
		case map[string]any:
			cur = c[part]
		case []any:
			i, err := strconv.Atoi(part)
			if err != nil || i < 0 || i >= len(c) {
				return nil
			}
			cur = c[i]
		default:
			return nil
		}
	}
	return cur
}

// mergeAll merges the allOf branches into m: properties and required are
// united, other keywords keep their first value.
func (g *schemaGen) mergeAll(m map[string]any, all []any, depth int) map[string]any {
	out := map[string]any{}
	props := map[string]any{}
	var req []any
	add := func(s map[string]any) {
		if !g.spend(len(s)) {
			return
		}
		for k, v := range s {
			switch k {
			case "allOf":
			case "properties":
				if p, ok := v.(map[string]any); ok && g.spend(len(p)) {
					for name, ps := range p {
						if _, dup := props[name]; !dup {
							props[name] = ps
						}
					}
				}
			case "required":
				if r, ok := v.([]any); ok && g.spend(len(r)) {
					req = append(req, r...)
				}
			default:
				if _, dup := out[k]; !dup {
					out[k] = v
				}
			}
		}
	}
	add(m)
	for _, b := range all {
		if bm, ok := g.resolve(b, depth+1).(map[string]any); ok {
			add(bm)
		}
	}
	if len(props) > 0 {
		out["properties"] = props
	}
	if len(req) > 0 {
		seen := map[string]bool{}
		var uniq []any
		for _, r := range req {
			if s, ok := r.(string); ok && !seen[s] {
				seen[s] = true
				uniq = append(uniq, s)
			}
		}
		out["required"] = uniq
	}
	return out
}

// value appends a valid instance of s. variant tells items of one array
// apart, so that uniqueItems holds.
func (g *schemaGen) value(dst []byte, s any, depth, variant int) []byte {
	if depth > maxSchemaDepth || len(dst) > maxSchemaOutput || !g.spend(1) {
		return append(dst, "null"...)
	}
	m, ok := g.resolve(s, depth).(map[string]any)
	if !ok {
		return append(dst, "null"...) // true, false or a dangling $ref
	}
	if c, ok := m["const"]; ok {
		return appendAny(dst, c)
	}
	if e, ok := m["enum"].([]any); ok && len(e) > 0 {
		return appendAny(dst, e[variant%len(e)])
	}
	for _, k := range []string{"anyOf", "oneOf"} {
		if b, ok := m[k].([]any); ok && len(b) > 0 {
			return g.value(dst, b[0], depth+1, variant)
		}
	}
	switch schemaType(m) {
	case "object":
		return g.object(dst, m, depth)
	case "array":
		return g.array(dst, m, depth)
	case "integer":
		return strconv.AppendFloat(dst, number(m, float64(variant), true), 'f', 0, 64)
	case "number":
		return strconv.AppendFloat(dst, number(m, float64(variant), false), 'g', -1, 64)
	case "boolean":
		return append(dst, "true"...)
	case "null":
		return append(dst, "null"...)
	default:
		return codec.AppendJSONString(dst, str(m, variant))
	}
}

func (g *schemaGen) object(dst []byte, m map[string]any, depth int) []byte {
	props, _ := m["properties"].(map[string]any)
	dst = append(dst, '{')
	for i, name := range g.requiredNames(m) {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = codec.AppendJSONString(dst, name)
		dst = append(dst, ':')
		dst = g.value(dst, propSchema(m, props, name), depth+1, 0)
	}
	return append(dst, '}')
}

// propSchema is the schema of property name: its own, else
// additionalProperties when that is a schema, else {}.
func propSchema(m, props map[string]any, name string) any {
	if ps, ok := props[name]; ok {
		return ps
	}
	if ap, ok := m["additionalProperties"].(map[string]any); ok {
		return ap
	}
	return map[string]any{}
}

func (g *schemaGen) array(dst []byte, m map[string]any, depth int) []byte {
	// One item shows the items' shape; past half the depth bound an array
	// holds what minItems demands and no more, so that a recursive schema
	// (a tree whose nodes list their children) ends in empty lists instead
	// of running into the bound, where no instance is valid.
	n := 1
	if depth > maxSchemaDepth/2 {
		n = 0
	}
	if v, ok := m["minItems"].(float64); ok {
		n = max(n, clampCount(v, maxSchemaItems))
	}
	if v, ok := m["maxItems"].(float64); ok {
		n = min(n, clampCount(v, maxSchemaItems))
	}
	prefix, _ := m["prefixItems"].([]any)
	n = max(n, len(prefix))
	n = min(n, maxSchemaItems)
	dst = append(dst, '[')
	for i := range n {
		if i > 0 {
			dst = append(dst, ',')
		}
		var item any = map[string]any{}
		if i < len(prefix) {
			item = prefix[i]
		} else if it, ok := m["items"]; ok {
			item = it
		}
		dst = g.value(dst, item, depth+1, i)
	}
	return append(dst, ']')
}

// schemaType is the schema's type: the first non-null one when it lists
// several, else inferred from its keywords; "" when anything goes.
func schemaType(m map[string]any) string {
	switch t := m["type"].(type) {
	case string:
		return t
	case []any:
		for _, v := range t {
			if s, ok := v.(string); ok && s != "null" {
				return s
			}
		}
		if len(t) > 0 {
			return "null"
		}
	}
	for _, k := range []string{"properties", "required", "additionalProperties"} {
		if _, ok := m[k]; ok {
			return "object"
		}
	}
	for _, k := range []string{"items", "prefixItems", "minItems"} {
		if _, ok := m[k]; ok {
			return "array"
		}
	}
	return ""
}

// requiredNames lists the required property names once each, in order.
func (g *schemaGen) requiredNames(m map[string]any) []string {
	r, _ := m["required"].([]any)
	if !g.spend(len(r)) {
		return nil
	}
	names := make([]string, 0, len(r))
	seen := make(map[string]struct{}, len(r))
	for _, v := range r {
		if s, ok := v.(string); ok {
			if _, dup := seen[s]; !dup {
				seen[s] = struct{}{}
				names = append(names, s)
			}
		}
	}
	return names
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// number is the value nearest v within the schema's bounds, a multiple of
// multipleOf when one is given.
func number(m map[string]any, v float64, integer bool) float64 {
	lo, hi := math.Inf(-1), math.Inf(1)
	if x, ok := m["minimum"].(float64); ok {
		lo = x
	}
	if x, ok := m["maximum"].(float64); ok {
		hi = x
	}
	step := 0.0
	if integer {
		step = 1
	}
	if x, ok := m["exclusiveMinimum"].(float64); ok {
		lo = max(lo, x+max(step, 1e-6*max(1, math.Abs(x))))
	}
	if x, ok := m["exclusiveMaximum"].(float64); ok {
		hi = min(hi, x-max(step, 1e-6*max(1, math.Abs(x))))
	}
	if integer {
		lo, hi = math.Ceil(lo), math.Floor(hi)
	}
	v = max(lo, min(v, hi))
	if mo, ok := m["multipleOf"].(float64); ok && mo > 0 {
		v = math.Ceil(v/mo) * mo
		if v > hi {
			v -= mo
		}
	}
	if math.IsInf(v, 0) || math.IsNaN(v) {
		return 0 // bounds no float can meet: the instance is wrong, not huge
	}
	return v
}

// str is a string of the schema's format and length bounds.
func str(m map[string]any, variant int) string {
	switch m["format"] {
	case "date-time":
		return "2026-01-0" + strconv.Itoa(1+variant%9) + "T00:00:00Z"
	case "date":
		return "2026-01-0" + strconv.Itoa(1+variant%9)
	case "time":
		return "12:00:0" + strconv.Itoa(variant%10) + "Z"
	case "email":
		return "user" + strconv.Itoa(variant) + "@example.com"
	case "uri", "url":
		return "https://example.com/" + strconv.Itoa(variant)
	case "uuid":
		return "00000000-0000-4000-8000-" + strings.Repeat("0", 12-len(strconv.Itoa(variant))) + strconv.Itoa(variant)
	}
	s := "sample"
	if variant > 0 {
		s += strconv.Itoa(variant)
	}
	if v, ok := m["minLength"].(float64); ok && len(s) < clampCount(v, maxSchemaString) {
		s += strings.Repeat("x", clampCount(v, maxSchemaString)-len(s))
	}
	if v, ok := m["maxLength"].(float64); ok && len(s) > clampCount(v, maxSchemaString) {
		s = s[:clampCount(v, maxSchemaString)]
	}
	return s
}

// appendAny appends a decoded JSON value; objects get their keys sorted.
func appendAny(dst []byte, v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		return append(dst, "null"...)
	}
	return append(dst, b...)
}
