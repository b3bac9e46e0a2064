package codec

import (
	"reflect"

	"github.com/bytedance/sonic/decoder"
)

// Pretouch compiles sonic's decoders for the request bodies the chat wires
// decode, so that the first request of each kind after a start does not
// compile them itself. Compiling ChatRequest alone takes tens of
// milliseconds and about 30,000 allocations, and every request that arrives
// meanwhile waits behind it. On architectures without sonic's JIT it does
// nothing.
func Pretouch() error {
	return decoder.PretouchMany(pretouchTypes)
}

var pretouchTypes = []reflect.Type{
	reflect.TypeFor[ChatRequest](),
	reflect.TypeFor[MessagesRequest](),
	reflect.TypeFor[[]AnthropicBlock](),
	reflect.TypeFor[ResponsesRequest](),
	reflect.TypeFor[[]ResponsesItem](),
	reflect.TypeFor[[]ResponsesPart](),
}
