package proxy

import (
	"errors"
	"reflect"

	"github.com/bytedance/sonic/decoder"
	"github.com/bytedance/sonic/encoder"

	"github.com/edgegw/gateway/codec"
)

// Pretouch compiles the JSON codecs of the request path ahead of its first
// request: the chat wires' bodies (codec.Pretouch), the body sent upstream,
// the specialised routes' body and content parts. A server that calls it
// before it accepts serves its first requests as fast as its later ones;
// without it the first of each kind compiles them, and the requests that
// arrive meanwhile queue behind it.
func Pretouch() error {
	return errors.Join(codec.Pretouch(),
		decoder.PretouchMany([]reflect.Type{reflect.TypeFor[auxRequest](), reflect.TypeFor[[]contentPart]()}),
		encoder.Pretouch(reflect.TypeFor[*upstreamRequest]()))
}
