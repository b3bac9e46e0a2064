package proxy

import (
	"bytes"

	"github.com/valyala/fasthttp"

	"github.com/edgegw/gateway/codec"
)

// errContentEncoding refuses a request body in an encoding the gateway does
// not decode. It reads bodies exactly as sent: a compressed body would
// otherwise be read as garbage, or go upstream as it came.
var errContentEncoding = codec.NewError(codec.CodeUnsupportedMediaType,
	"Content-Encoding: request bodies are read as sent; send the body uncompressed (identity).")

// checkContentEncoding refuses any Content-Encoding but identity.
func checkContentEncoding(ctx *fasthttp.RequestCtx) *codec.Error {
	ce := bytes.TrimSpace(ctx.Request.Header.ContentEncoding())
	if len(ce) == 0 || bytes.EqualFold(ce, []byte("identity")) {
		return nil
	}
	return errContentEncoding
}
