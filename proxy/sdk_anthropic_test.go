package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/hotpath/meter"
)

// anthropicClient is the official Anthropic SDK pointed at the fixture,
// with its own retries off so that each call is one request.
func anthropicClient(f *chatFixture, key string) anthropic.Client {
	return anthropic.NewClient(option.WithBaseURL("http://gw/"), option.WithAPIKey(key),
		option.WithHTTPClient(f.client), option.WithMaxRetries(0))
}

var sdkAnthropicWeather = anthropic.ToolUnionParam{OfTool: &anthropic.ToolParam{
	Name:        "get_weather",
	Description: anthropic.String("Weather for a city"),
	InputSchema: anthropic.ToolInputSchemaParam{
		Properties: map[string]any{"city": map[string]any{"type": "string"}},
		Required:   []string{"city"},
	},
}}

func userText(s string) anthropic.MessageParam {
	return anthropic.NewUserMessage(anthropic.NewTextBlock(s))
}

// The Anthropic SDK's messages.create: a text answer, end_turn, and usage
// whose input tokens count_tokens predicts for the same body.
func TestAnthropicSDKMessage(t *testing.T) {
	f := newChatFixture(t)
	ctx := context.Background()
	client := anthropicClient(f, f.key)
	params := anthropic.MessageNewParams{
		Model:     "mira",
		MaxTokens: 64,
		System:    []anthropic.TextBlockParam{{Text: "Be brief."}},
		Messages:  []anthropic.MessageParam{userText("Say hello [[sim:tokens=5]]")},
	}
	msg, err := client.Messages.New(ctx, params)
	require.NoError(t, err)
	require.Equal(t, "mira", string(msg.Model))
	require.Equal(t, anthropic.StopReasonEndTurn, msg.StopReason)
	require.Len(t, msg.Content, 1)
	require.Equal(t, "text", msg.Content[0].Type)
	require.NotEmpty(t, msg.Content[0].Text)
	require.Equal(t, int64(5), msg.Usage.OutputTokens)
	require.Positive(t, msg.Usage.InputTokens)

	count, err := client.Messages.CountTokens(ctx, anthropic.MessageCountTokensParams{
		Model: params.Model, System: anthropic.MessageCountTokensParamsSystemUnion{OfTextBlockArray: params.System},
		Messages: params.Messages,
	})
	require.NoError(t, err)
	require.Equal(t, msg.Usage.InputTokens, count.InputTokens, "count_tokens predicts the billed input")

	// max_tokens cuts the answer: max_tokens is the stop reason.
	params.MaxTokens = 2
	params.Messages = []anthropic.MessageParam{userText("Long [[sim:tokens=10]]")}
	msg, err = client.Messages.New(ctx, params)
	require.NoError(t, err)
	require.Equal(t, anthropic.StopReasonMaxTokens, msg.StopReason)
	require.Equal(t, int64(2), msg.Usage.OutputTokens)
}

// The SDK's stream accumulator rebuilds from the events a message shaped
// and billed like the one the non-streaming call returns, thinking
// included when it was asked for.
func TestAnthropicSDKStreamAccumulates(t *testing.T) {
	f := newChatFixture(t)
	ctx := context.Background()
	client := anthropicClient(f, f.key)
	params := anthropic.MessageNewParams{
		Model:     "kavi",
		MaxTokens: 4096,
		Thinking:  anthropic.ThinkingConfigParamOfEnabled(2048),
		Messages:  []anthropic.MessageParam{userText("Think [[sim:reasoning=3]] [[sim:tokens=4]]")},
	}
	stream := client.Messages.NewStreaming(ctx, params)
	var acc anthropic.Message
	events := 0
	for stream.Next() {
		require.NoError(t, acc.Accumulate(stream.Current()))
		events++
	}
	require.NoError(t, stream.Err())
	require.NoError(t, stream.Close())

	whole, err := client.Messages.New(ctx, params)
	require.NoError(t, err)
	require.Equal(t, anthropic.StopReasonEndTurn, acc.StopReason)
	require.Len(t, acc.Content, 2)
	require.Equal(t, "thinking", acc.Content[0].Type)
	require.NotEmpty(t, acc.Content[0].Thinking)
	require.Equal(t, "text", acc.Content[1].Type)
	require.NotEmpty(t, acc.Content[1].Text)
	require.Len(t, whole.Content, 2)
	require.Equal(t, "thinking", whole.Content[0].Type)
	require.Equal(t, "text", whole.Content[1].Type)
	require.Equal(t, whole.Usage.InputTokens, acc.Usage.InputTokens)
	require.Equal(t, whole.Usage.OutputTokens, acc.Usage.OutputTokens)

	// Without thinking asked for, no thinking block is shown.
	params.Thinking = anthropic.ThinkingConfigParamUnion{}
	stream = client.Messages.NewStreaming(ctx, params)
	acc = anthropic.Message{}
	for stream.Next() {
		require.NoError(t, acc.Accumulate(stream.Current()))
	}
	require.NoError(t, stream.Err())
	require.Len(t, acc.Content, 1)
	require.Equal(t, "text", acc.Content[0].Type)

	// A stream that breaks after it opened ends with an error event, which
	// the SDK reports.
	params.Messages = []anthropic.MessageParam{userText("x [[sim:tokens=6]] [[sim:drop_after=2]]")}
	stream = client.Messages.NewStreaming(ctx, params)
	for stream.Next() {
	}
	var apierr *anthropic.Error
	require.ErrorAs(t, stream.Err(), &apierr)
}

// The tool loop Anthropic's docs show: the model calls a tool, the client
// sends the result back as a tool_result block, the model answers — on the
// plain and the streaming call.
func TestAnthropicSDKToolRoundTrip(t *testing.T) {
	f := newChatFixture(t)
	ctx := context.Background()
	client := anthropicClient(f, f.key)
	for _, stream := range []bool{false, true} {
		params := anthropic.MessageNewParams{
			Model:      "vaani",
			MaxTokens:  256,
			Tools:      []anthropic.ToolUnionParam{sdkAnthropicWeather},
			ToolChoice: anthropic.ToolChoiceUnionParam{OfAuto: &anthropic.ToolChoiceAutoParam{}},
			Messages:   []anthropic.MessageParam{userText("Weather in Pune? [[sim:tool=get_weather]]")},
		}
		rounds := 0
		for ; rounds < 4; rounds++ {
			var msg *anthropic.Message
			if stream {
				s := client.Messages.NewStreaming(ctx, params)
				acc := anthropic.Message{}
				for s.Next() {
					require.NoError(t, acc.Accumulate(s.Current()))
				}
				require.NoError(t, s.Err())
				msg = &acc
			} else {
				var err error
				msg, err = client.Messages.New(ctx, params)
				require.NoError(t, err)
			}
			if msg.StopReason != anthropic.StopReasonToolUse {
				require.Equal(t, anthropic.StopReasonEndTurn, msg.StopReason)
				require.NotEmpty(t, msg.Content)
				require.Equal(t, "text", msg.Content[len(msg.Content)-1].Type)
				break
			}
			params.Messages = append(params.Messages, msg.ToParam())
			var results []anthropic.ContentBlockParamUnion
			for _, b := range msg.Content {
				if b.Type != "tool_use" {
					continue
				}
				require.Equal(t, "get_weather", b.Name)
				var input map[string]any
				require.NoError(t, json.Unmarshal(b.Input, &input))
				require.Contains(t, input, "city")
				results = append(results, anthropic.NewToolResultBlock(b.ID, `{"c":31,"sky":"sunny"}`, false))
			}
			require.NotEmpty(t, results, "tool_use stop without a tool_use block")
			params.Messages = append(params.Messages, anthropic.NewUserMessage(results...))
		}
		require.Equal(t, 1, rounds, "one tool round, then the answer (stream %v)", stream)
	}
}

// Every error class reaches the SDK as Anthropic's type and status.
func TestAnthropicSDKErrorClasses(t *testing.T) {
	l := newLimits(t, meter.NewMemoryCounters(meter.NoSeeder{}), testPlan(func(p *meter.Plan) { p.RequestsPerMinute = 1000 }))
	p := uncapped()
	p.Models = []string{"mira", "vaani"}
	f := newChatFixture(t, withLimits(l, nil, p))
	ctx := context.Background()
	client := anthropicClient(f, f.key)
	ask := func(model, text string) anthropic.MessageNewParams {
		return anthropic.MessageNewParams{Model: anthropic.Model(model), MaxTokens: 32, Messages: []anthropic.MessageParam{userText(text)}}
	}
	cases := []struct {
		name   string
		client anthropic.Client
		params anthropic.MessageNewParams
		status int
		typ    string
	}{
		{"authentication", anthropicClient(f, "gw_live_not-a-key"), ask("mira", "hi"), 401, "authentication_error"},
		{"invalid_request", client, func() anthropic.MessageNewParams {
			p := ask("mira", "hi")
			p.Thinking = anthropic.ThinkingConfigParamOfEnabled(100) // below Anthropic's least budget
			return p
		}(), 400, "invalid_request_error"},
		{"unknown_model", client, ask("claude-x", "hi"), 400, "invalid_request_error"},
		{"permission", client, ask("kavi", "hi"), 403, "permission_error"},
		{"overloaded", client, ask("mira", "x [[sim:fault=rate_limited]]"), 529, "overloaded_error"},
		{"timeout", client, ask("mira", "x [[sim:fault=hang]]"), 504, "timeout_error"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := c.client.Messages.New(ctx, c.params)
			var apierr *anthropic.Error
			require.ErrorAs(t, err, &apierr)
			require.Equal(t, c.status, apierr.StatusCode)
			require.Equal(t, c.typ, string(apierr.Type()))
			require.NotEmpty(t, apierr.Message)
		})
	}

	// rate_limit_error: a window of one request.
	l1 := newLimits(t, meter.NewMemoryCounters(meter.NoSeeder{}), testPlan(func(p *meter.Plan) { p.RequestsPerMinute = 1 }))
	f1 := newChatFixture(t, withLimits(l1, nil, uncapped()))
	c1 := anthropicClient(f1, f1.key)
	_, err := c1.Messages.New(ctx, ask("mira", "hi [[sim:tokens=2]]"))
	require.NoError(t, err)
	_, err = c1.Messages.New(ctx, ask("mira", "hi [[sim:tokens=2]]"))
	var apierr *anthropic.Error
	require.True(t, errors.As(err, &apierr), "%v", err)
	require.Equal(t, 429, apierr.StatusCode)
	require.Equal(t, "rate_limit_error", string(apierr.Type()))
}

// The key is accepted in x-api-key (what the SDK sends) and in
// Authorization: Bearer; anthropic-version is accepted.
func TestAnthropicKeyHeaders(t *testing.T) {
	f := newChatFixture(t)
	body := `{"model":"mira","max_tokens":8,"messages":[{"role":"user","content":"hi [[sim:tokens=2]]"}]}`
	r := f.post(t, "/v1/messages", body, "anthropic-version", "2023-06-01")
	require.Equal(t, 200, r.status, "%s", r.body)
	r = f.post(t, "/v1/messages", body, "Authorization", "", "x-api-key", f.key, "anthropic-version", "2023-06-01")
	require.Equal(t, 200, r.status, "%s", r.body)
	r = f.post(t, "/v1/messages", body, "Authorization", "", "x-api-key", "gw_live_wrong")
	require.Equal(t, 401, r.status)
	require.JSONEq(t, `{"type":"error","error":{"type":"authentication_error","message":"A valid API key is required."},"request_id":"req-golden"}`, string(r.body))
	// A Bearer key on the OpenAI routes stays the only way in there.
	r = f.post(t, "/v1/chat/completions", `{"model":"mira","messages":[{"role":"user","content":"hi"}]}`, "Authorization", "", "x-api-key", f.key)
	require.Equal(t, 401, r.status)
	require.Empty(t, r.header.Get("Request-Id"), "the OpenAI wire carries X-Request-Id only")

	// Anthropic's SDKs read the request id from request-id: every answer
	// on the wire carries it, streams and refusals included.
	stream := `{"model":"mira","max_tokens":8,"stream":true,"messages":[{"role":"user","content":"hi [[sim:tokens=2]]"}]}`
	for _, tc := range []struct {
		path, body string
		status     int
	}{
		{"/v1/messages", body, 200},
		{"/v1/messages", stream, 200},
		{"/v1/messages", `{"model":"mira"}`, 400},
		{"/v1/messages/count_tokens", body, 200},
		{"/v1/messages/nope", body, 404},
	} {
		r = f.post(t, tc.path, tc.body, "anthropic-version", "2023-06-01")
		require.Equal(t, tc.status, r.status, "%s: %s", tc.path, r.body)
		require.Equal(t, "req-golden", r.header.Get("Request-Id"), "%s %d", tc.path, tc.status)
		require.Equal(t, "req-golden", r.header.Get("X-Request-Id"))
	}
}

// Parallel calls whose fragments the upstream interleaves still arrive as
// sequential tool_use blocks, each with its own whole input, on the
// Anthropic and the Responses wire.
func TestParallelToolCallsStaySeparate(t *testing.T) {
	f := newChatFixture(t)
	ctx := context.Background()
	body := `{"model":"kavi","reasoning_effort":"none","tools":[` + weatherTool + `,` + timeTool + `],"messages":[{"role":"user","content":"Both [[sim:tool=get_weather,get_time]]"}]}`
	r := f.post(t, "/v1/messages", toAnthropic(t, body, true))
	require.Equal(t, 200, r.status)
	client := anthropicClient(f, f.key)
	stream := client.Messages.NewStreaming(ctx, anthropic.MessageNewParams{
		Model: "kavi", MaxTokens: 256, Thinking: anthropic.ThinkingConfigParamUnion{OfDisabled: &anthropic.ThinkingConfigDisabledParam{}},
		Tools: []anthropic.ToolUnionParam{sdkAnthropicWeather, {OfTool: &anthropic.ToolParam{Name: "get_time",
			InputSchema: anthropic.ToolInputSchemaParam{Properties: map[string]any{"zone": map[string]any{"type": "string"}}, Required: []string{"zone"}}}}},
		Messages: []anthropic.MessageParam{userText("Both [[sim:tool=get_weather,get_time]]")},
	})
	var acc anthropic.Message
	for stream.Next() {
		require.NoError(t, acc.Accumulate(stream.Current()))
	}
	require.NoError(t, stream.Err())
	require.Len(t, acc.Content, 2)
	for i, key := range []string{"city", "zone"} {
		var input map[string]any
		require.NoError(t, json.Unmarshal(acc.Content[i].Input, &input), "%s", acc.Content[i].Input)
		require.Len(t, input, 1)
		require.Contains(t, input, key)
	}

	r = f.post(t, "/v1/responses", toResponses(t, body, true))
	require.Equal(t, 200, r.status)
	var calls []map[string]any
	for _, line := range bytes.Split(r.body, []byte("\n")) {
		data, ok := bytes.CutPrefix(line, []byte("data: "))
		if !ok || !bytes.Contains(data, []byte(`"response.output_item.done"`)) {
			continue
		}
		var ev struct {
			Item map[string]any `json:"item"`
		}
		require.NoError(t, json.Unmarshal(data, &ev))
		calls = append(calls, ev.Item)
	}
	require.Len(t, calls, 2)
	for i, key := range []string{"city", "zone"} {
		var args map[string]any
		require.NoError(t, json.Unmarshal([]byte(calls[i]["arguments"].(string)), &args))
		require.Len(t, args, 1)
		require.Contains(t, args, key)
	}
}

// A body over the size bound is Anthropic's request_too_large, and every
// answer on the wire carries the gateway's request id and version headers.
func TestAnthropicTooLargeAndHeaders(t *testing.T) {
	f := newChatFixture(t, func(o *fixtureOptions) { o.server.MaxBodySize = 4 << 10 })
	ctx := context.Background()
	client := anthropicClient(f, f.key)
	_, err := client.Messages.New(ctx, anthropic.MessageNewParams{Model: "mira", MaxTokens: 8,
		Messages: []anthropic.MessageParam{userText(strings.Repeat("word ", 2000))}})
	var apierr *anthropic.Error
	require.ErrorAs(t, err, &apierr)
	require.Equal(t, 413, apierr.StatusCode)
	require.Equal(t, "request_too_large", string(apierr.Type()))

	for _, path := range []string{"/v1/messages", "/v1/responses"} {
		body := `{"model":"mira","max_tokens":8,"messages":[{"role":"user","content":"hi [[sim:tokens=2]]"}]}`
		if path == "/v1/responses" {
			body = `{"model":"mira","input":"hi [[sim:tokens=2]]"}`
		}
		for _, stream := range []bool{false, true} {
			b := body
			if stream {
				b = strings.Replace(b, `{"model"`, `{"stream":true,"model"`, 1)
			}
			r := f.post(t, path, b)
			require.Equal(t, 200, r.status, "%s", r.body)
			require.Equal(t, "req-golden", r.header.Get("X-Request-Id"), path)
			require.NotEmpty(t, r.header.Get("Gateway-Version"), path)
		}
	}
}

// Structured output through the SDK: output_config.format is a strict
// json_schema response format, so the reply's text is JSON that satisfies
// the schema; a format without a schema is refused, not ignored.
func TestAnthropicSDKStructuredOutput(t *testing.T) {
	f := newChatFixture(t)
	ctx := context.Background()
	client := anthropicClient(f, f.key)
	schema := map[string]any{"type": "object", "additionalProperties": false, "required": []any{"city", "days"},
		"properties": map[string]any{"city": map[string]any{"type": "string"}, "days": map[string]any{"type": "integer"}}}
	msg, err := client.Messages.New(ctx, anthropic.MessageNewParams{Model: "mira", MaxTokens: 256,
		Messages:     []anthropic.MessageParam{userText("Plan a trip [[sim:json]]")},
		OutputConfig: anthropic.OutputConfigParam{Format: anthropic.JSONOutputFormatParam{Schema: schema}}})
	require.NoError(t, err)
	require.Len(t, msg.Content, 1)
	var got map[string]any
	require.NoError(t, json.Unmarshal([]byte(msg.Content[0].Text), &got), "%q", msg.Content[0].Text)
	require.IsType(t, "", got["city"])
	require.IsType(t, 0.0, got["days"])
	require.Len(t, got, 2)

	r := f.post(t, "/v1/messages", `{"model":"mira","max_tokens":64,"messages":[{"role":"user","content":"hi"}],`+
		`"output_config":{"format":{"type":"json_schema"}}}`, "x-api-key", f.key)
	require.Equal(t, 400, r.status, "%s", r.body)
	require.Contains(t, string(r.body), "output_config.format.schema")
}
