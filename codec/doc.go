// Package codec holds the gateway's wire formats: error envelopes, JSON string
// quoting, Gateway-Version dates, request ids and bearer credentials.
//
// Everything here is a pure byte transform: no I/O, no goroutines, and no
// import of fasthttp or any other HTTP package, so the package can be tested
// and fuzzed on its own. Encoders follow the AppendX(dst, ...) []byte
// convention: dst may be nil, and they allocate nothing when dst has enough
// spare capacity. Parsers and validators never allocate; ParseBearer returns
// a sub-slice of its input.
package codec
