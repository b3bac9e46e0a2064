// Package codec holds the gateway's wire formats: error envelopes, JSON string
// quoting, Gateway-Version dates, request ids and bearer credentials, and the
// chat frames and bodies of each wire, usage and cost objects included.
//
// The codec formats money; it never computes it. A Bill arrives with its
// amount already worked out (hotpath/meter's Cost) and is written as exact
// decimals.
//
// Everything here is a pure byte transform: no I/O, no goroutines, and no
// import of fasthttp or any other HTTP package, so the package can be tested
// and fuzzed on its own. Encoders follow the AppendX(dst, ...) []byte
// convention: dst may be nil, and they allocate nothing when dst has enough
// spare capacity. Parsers and validators never allocate; ParseBearer returns
// a sub-slice of its input.
package codec
