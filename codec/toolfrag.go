package codec

// ToolFragment is one element of an upstream tool_calls array, as spans
// into it (valid while the array is). ID, Name and Arguments are raw JSON
// string literals, quotes included, or nil when absent or null.
type ToolFragment struct {
	// Index is the fragment's index member, or its position in the array
	// when it has none (a non-streaming message's tool_calls).
	Index     int64
	ID        []byte
	Name      []byte
	Arguments []byte
}

// ToolFragments walks the fragments of a tool_calls array without
// allocating:
//
//	var it codec.ToolFragments
//	it.Reset(raw)
//	for it.Next(&frag) { ... }
//	if it.Err() != nil { ... }
type ToolFragments struct {
	it  arrayIter
	pos int64
	err error
}

// Reset starts a walk over raw, which must be a JSON array.
func (f *ToolFragments) Reset(raw []byte) {
	*f = ToolFragments{}
	if !f.it.start(raw, 0) {
		f.err = f.it.err
	}
}

// Next fills frag with the next fragment and reports whether there was one.
// Members other than index, id and function (name, arguments) are skipped.
func (f *ToolFragments) Next(frag *ToolFragment) bool {
	if f.err != nil || !f.it.next() {
		if f.err == nil {
			f.err = f.it.err
		}
		return false
	}
	*frag = ToolFragment{Index: f.pos}
	f.pos++
	var obj objectIter
	if !obj.start(f.it.b, f.it.pos) {
		f.err = ErrMalformedChunk
		return false
	}
	for key, ok := obj.next(); ok; key, ok = obj.next() {
		switch string(key) {
		case "index":
			v, good := obj.value()
			if !good {
				break
			}
			if n, isInt := parseInt(v); isInt {
				frag.Index = n
			}
		case "id":
			frag.ID = stringOrNil(&obj)
		case "function":
			var fn objectIter
			if !fn.start(obj.b, obj.pos) {
				obj.skip()
				continue
			}
			for k, ok := fn.next(); ok; k, ok = fn.next() {
				switch string(k) {
				case "name":
					frag.Name = stringOrNil(&fn)
				case "arguments":
					frag.Arguments = stringOrNil(&fn)
				default:
					fn.skip()
				}
			}
			if fn.err != nil {
				f.err = fn.err
				return false
			}
			obj.pos = fn.pos
		default:
			obj.skip()
		}
	}
	if obj.err != nil {
		f.err = obj.err
		return false
	}
	f.it.pos = obj.pos
	return true
}

// Err is the syntax error that ended the walk, or nil.
func (f *ToolFragments) Err() error { return f.err }

// stringOrNil consumes the current member's value and returns it when it is
// a string literal.
func stringOrNil(it *objectIter) []byte {
	v, ok := it.value()
	if !ok || len(v) == 0 || v[0] != '"' {
		return nil
	}
	return v
}
