package hotpath

import (
	"time"

	"github.com/edgegw/gateway/codec"
)

// TurnResult is the outcome of one non-streaming chat turn run inside the
// gateway (proxy.Chat.Complete) rather than for an HTTP client: what the
// chat pipeline answered, without a wire around it.
type TurnResult struct {
	// Err is the pipeline's refusal or failure; nil when the model
	// answered. A structured_output_unsatisfied answer carries the reply
	// too, and is billed.
	Err *codec.Error
	// Content is the reply's text; empty when the model only called tools.
	Content string
	// ToolCalls is the reply's OpenAI tool_calls array; nil when none.
	ToolCalls []byte
	Finish    string
	// Tier is the tier that served the turn; empty when none was chosen.
	Tier                      string
	InputTokens, OutputTokens int64
	CostPico                  int64
	Billed                    bool
	Latency                   time.Duration
}
