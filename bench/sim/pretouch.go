package sim

import (
	"reflect"

	"github.com/bytedance/sonic/decoder"
)

// Pretouch compiles the JSON decoders of the simulator's request bodies
// ahead of its first request (see proxy.Pretouch).
func Pretouch() error {
	return decoder.PretouchMany([]reflect.Type{
		reflect.TypeFor[chatRequest](),
		reflect.TypeFor[[]contentPart](),
		reflect.TypeFor[embeddingsRequest](),
		reflect.TypeFor[rerankRequest](),
	})
}
