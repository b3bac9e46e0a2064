package proxy

import (
	"bytes"
	"encoding/json"
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// Bounds on the count keywords of a schema (minLength, minItems,
// minProperties and their max counterparts). No tier writes more than
// maxSchemaMinCount characters, items or properties, so a larger minimum
// cannot be satisfied; a maximum must still fit a 32-bit integer, which is
// what the validator counts in.
const (
	maxSchemaMinCount = 1 << 20
	maxSchemaMaxCount = math.MaxInt32
)

// schemaFlaw is what lintSchema found wrong: a message in terms of the
// schema, and the bound exceeded when one was.
type schemaFlaw struct {
	msg   string
	bound string
	limit int64
}

// needsLint reports whether raw holds anything lintSchema checks: a $ref or
// a count keyword. Schemas without them skip the decoding.
func needsLint(raw []byte) bool {
	for _, k := range lintTriggers {
		if bytes.Contains(raw, k) {
			return true
		}
	}
	return false
}

var lintTriggers = [][]byte{[]byte(`"$ref"`), []byte(`Length"`), []byte(`Items"`), []byte(`Properties"`)}

// lintSchema checks a decoded schema (numbers as json.Number) for what the
// validator cannot check in bounded time or no output can satisfy: count
// keywords too large, and references that recur without end. A reference
// recurs without end when every value the schema accepts would have to hold
// itself: the way back passes only through $ref, allOf, every branch of an
// anyOf or oneOf, required properties and items an array must have. A
// recursive schema whose recursion is optional (a tree whose children may be
// empty, a list whose next may be null) is fine. The work is linear in the
// schema.
func lintSchema(doc any) *schemaFlaw {
	l := schemaLinter{ptrs: map[string]int{}}
	l.visit(doc, "")
	if l.flaw != nil {
		return l.flaw
	}
	if len(l.refs) == 0 {
		return nil
	}
	for _, r := range l.refs {
		if t, ok := l.ptrs[r.target]; ok {
			l.require(r.from, t)
		}
	}
	l.settle()
	for id := range l.nodes {
		n := &l.nodes[id]
		if !n.group && !n.productive && n.hasRef {
			return &schemaFlaw{msg: "$ref at " + pointerOrRoot(n.ptr) +
				" refers back to itself without end: no finite value satisfies it (a recursive reference must pass through an optional property, an optional array item or an alternative)."}
		}
	}
	return nil
}

type lintNode struct {
	ptr        string
	need       int   // requirements not yet known to be satisfiable
	dependents []int // nodes that require this one
	group      bool  // an anyOf or oneOf: satisfiable when one branch is
	productive bool
	hasRef     bool
}

type lintRef struct {
	from   int
	target string
}

type schemaLinter struct {
	nodes []lintNode
	ptrs  map[string]int
	refs  []lintRef
	flaw  *schemaFlaw
}

func (l *schemaLinter) add(ptr string, group bool) int {
	l.nodes = append(l.nodes, lintNode{ptr: ptr, group: group})
	if !group {
		l.ptrs[ptr] = len(l.nodes) - 1
	}
	return len(l.nodes) - 1
}

// require records that node from can be satisfied only if node to can.
func (l *schemaLinter) require(from, to int) {
	if from < 0 || to < 0 {
		return
	}
	l.nodes[from].need++
	l.nodes[to].dependents = append(l.nodes[to].dependents, from)
}

// either records that group g is satisfiable when branch is.
func (l *schemaLinter) either(g, branch int) {
	if branch < 0 {
		l.nodes[g].need = 0 // a boolean or malformed branch: not a recursion
		return
	}
	l.nodes[branch].dependents = append(l.nodes[branch].dependents, g)
}

// settle marks every node whose requirements can all be met, from the
// leaves up: each node and edge is visited once.
func (l *schemaLinter) settle() {
	var queue []int
	for id := range l.nodes {
		if l.nodes[id].need == 0 {
			l.nodes[id].productive = true
			queue = append(queue, id)
		}
	}
	for len(queue) > 0 {
		id := queue[len(queue)-1]
		queue = queue[:len(queue)-1]
		for _, d := range l.nodes[id].dependents {
			n := &l.nodes[d]
			if n.productive {
				continue
			}
			if n.group {
				n.need = 0
			} else {
				n.need--
			}
			if n.need == 0 {
				n.productive = true
				queue = append(queue, d)
			}
		}
	}
}

// visit registers the schema v at ptr and everything under it, and checks
// its count keywords; it returns v's node, or -1 when v is not an object.
func (l *schemaLinter) visit(v any, ptr string) int {
	obj, ok := v.(map[string]any)
	if !ok || l.flaw != nil {
		return -1
	}
	id := l.add(ptr, false)
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	minItems := 0.0
	if n, ok := obj["minItems"].(json.Number); ok {
		minItems, _ = strconv.ParseFloat(string(n), 64)
	}
	required := map[string]bool{}
	if r, ok := obj["required"].([]any); ok {
		for _, name := range r {
			if s, ok := name.(string); ok {
				required[s] = true
			}
		}
	}
	for _, k := range keys {
		at := ptr + "/" + escapePointer(k)
		switch val := obj[k].(type) {
		case json.Number:
			l.checkCount(k, val, ptr)
		case string:
			if k == "$ref" {
				l.nodes[id].hasRef = true
				if target, ok := localPointer(val); ok {
					l.refs = append(l.refs, lintRef{from: id, target: target})
				}
			}
		case map[string]any:
			switch k {
			case "properties", "patternProperties", "$defs", "definitions", "dependentSchemas":
				names := make([]string, 0, len(val))
				for name := range val {
					names = append(names, name)
				}
				slices.Sort(names)
				for _, name := range names {
					c := l.visit(val[name], at+"/"+escapePointer(name))
					if k == "properties" && required[name] {
						l.require(id, c)
					}
				}
			case "items":
				if c := l.visit(val, at); minItems > 0 {
					if _, hasPrefix := obj["prefixItems"]; !hasPrefix {
						l.require(id, c)
					}
				}
			case "additionalProperties", "propertyNames", "not", "contains", "if", "then", "else",
				"unevaluatedItems", "unevaluatedProperties", "additionalItems":
				l.visit(val, at)
			}
		case []any:
			switch k {
			case "allOf":
				for i, sub := range val {
					l.require(id, l.visit(sub, at+"/"+strconv.Itoa(i)))
				}
			case "anyOf", "oneOf":
				g := l.add("", true)
				l.nodes[g].need = 1
				for i, sub := range val {
					l.either(g, l.visit(sub, at+"/"+strconv.Itoa(i)))
				}
				if len(val) == 0 {
					l.nodes[g].need = 0
				}
				l.require(id, g)
			case "prefixItems", "items":
				for i, sub := range val {
					c := l.visit(sub, at+"/"+strconv.Itoa(i))
					if k == "prefixItems" && float64(i) < minItems {
						l.require(id, c)
					}
				}
			}
		}
		if l.flaw != nil {
			return id
		}
	}
	return id
}

// checkCount refuses a count keyword whose value no output can meet or the
// validator cannot hold. Values that are not non-negative integers are left
// to the metaschema check, which explains them.
func (l *schemaLinter) checkCount(k string, n json.Number, ptr string) {
	limit := int64(0)
	switch k {
	case "minLength", "minItems", "minProperties":
		limit = maxSchemaMinCount
	case "maxLength", "maxItems", "maxProperties":
		limit = maxSchemaMaxCount
	default:
		return
	}
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil && !math.IsInf(f, 0) || f < 0 || f != math.Trunc(f) {
		return
	}
	if f > float64(limit) {
		why := "is more than any tier can write"
		if limit == maxSchemaMaxCount {
			why = "does not fit a 32-bit integer"
		}
		l.flaw = &schemaFlaw{msg: k + " at " + pointerOrRoot(ptr) + ": " + string(n) + " " + why + "; at most " +
			strconv.FormatInt(limit, 10) + ".", bound: k, limit: limit}
	}
}

// localPointer turns a reference inside the document ("#" or "#/a/b",
// percent-encoded as a URI fragment) into the JSON pointer it names.
func localPointer(ref string) (string, bool) {
	frag, ok := strings.CutPrefix(ref, "#")
	if !ok || frag != "" && frag[0] != '/' {
		return "", false
	}
	if p, err := url.PathUnescape(frag); err == nil {
		frag = p
	}
	return frag, true
}
