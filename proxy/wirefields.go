package proxy

import (
	"errors"
	"regexp"
	"strings"

	"github.com/edgegw/gateway/codec"
)

// The Anthropic and Responses wires are validated as the chat request they
// become, so a refusal's message names chat fields. These name the
// fields as the client sent them instead. Message indexes are left as
// they are: a tool result becomes a message of its own, so they do not
// map one to one.
var (
	toolFieldRE = regexp.MustCompile(`tools\[(\d+)\]\.function\.`)

	anthropicFields = strings.NewReplacer(
		errToolChoiceTools.Message, `tool_choice: "any" needs at least one tool in tools.`,
		"tool_choice.function.name", "tool_choice.name",
		"function.parameters", "input_schema",
	)
	responsesFields = strings.NewReplacer(
		errToolChoice.Message, `tool_choice: must be "none", "auto", "required" or {"type":"function","name":...}.`,
		"tool_choice.function.name", "tool_choice.name",
		"response_format.json_schema.schema", "text.format.schema",
		"response_format.json_schema.name", "text.format.name",
		"response_format.json_schema", "text.format",
		"response_format.type", "text.format.type",
		"response_format", "text.format",
	)
)

// inOwnTerms rewrites err's message in the wire's field names; other wires'
// errors, and errors that name no chat-only field, come back unchanged.
func (w chatWire) inOwnTerms(err error) error {
	var r *strings.Replacer
	switch w {
	case chatAnthropic:
		r = anthropicFields
	case chatResponses:
		r = responsesFields
	default:
		return err
	}
	var cerr *codec.Error
	if !errors.As(err, &cerr) {
		return err
	}
	msg := toolFieldRE.ReplaceAllString(r.Replace(cerr.Message), "tools[$1].")
	if msg == cerr.Message {
		return err
	}
	out := *cerr
	out.Message = msg
	return &out
}
