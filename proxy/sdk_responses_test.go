package proxy

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/stretchr/testify/require"
)

// openaiClient is the official OpenAI SDK pointed at the fixture, with its
// own retries off.
func openaiClient(f *chatFixture) openai.Client {
	return openai.NewClient(option.WithBaseURL("http://gw/v1/"), option.WithAPIKey(f.key),
		option.WithHTTPClient(f.client), option.WithMaxRetries(0))
}

// The OpenAI SDK's responses.create: a completed response whose output
// text and usage read as the SDK expects; max_output_tokens makes it
// incomplete.
func TestResponsesSDKCreate(t *testing.T) {
	f := newChatFixture(t)
	ctx := context.Background()
	client := openaiClient(f)
	resp, err := client.Responses.New(ctx, responses.ResponseNewParams{
		Model:        "mira",
		Instructions: openai.String("Be brief."),
		Input:        responses.ResponseNewParamsInputUnion{OfString: openai.String("Say hello [[sim:tokens=5]]")},
	})
	require.NoError(t, err)
	require.Equal(t, responses.ResponseStatusCompleted, resp.Status)
	require.True(t, strings.HasPrefix(resp.ID, "resp_"), resp.ID)
	require.Equal(t, "response", string(resp.Object))
	require.NotEmpty(t, resp.OutputText())
	require.Equal(t, int64(5), resp.Usage.OutputTokens)
	require.Positive(t, resp.Usage.InputTokens)
	require.Equal(t, resp.Usage.InputTokens+resp.Usage.OutputTokens, resp.Usage.TotalTokens)
	// The request's fields the SDK's Response type requires come back, as
	// OpenAI's do.
	require.Equal(t, "Be brief.", resp.Instructions.OfString)
	require.Equal(t, "auto", string(resp.ToolChoice.OfToolChoiceMode))
	require.NotNil(t, resp.Tools, "tools is [] without tools, never missing")
	require.Empty(t, resp.Tools)
	require.Empty(t, resp.Metadata)
	for _, field := range []string{"instructions", "metadata", "temperature", "tool_choice", "tools", "top_p"} {
		require.True(t, fieldPresent(resp.RawJSON(), field), field)
	}

	resp, err = client.Responses.New(ctx, responses.ResponseNewParams{
		Model:           "mira",
		MaxOutputTokens: openai.Int(2),
		Input:           responses.ResponseNewParamsInputUnion{OfString: openai.String("Long [[sim:tokens=10]]")},
	})
	require.NoError(t, err)
	require.Equal(t, responses.ResponseStatusIncomplete, resp.Status)
	require.Equal(t, "max_output_tokens", resp.IncompleteDetails.Reason)

	// Reasoning tokens are reported on a reasoning tier.
	resp, err = client.Responses.New(ctx, responses.ResponseNewParams{
		Model:     "kavi",
		Reasoning: openai.ReasoningParam{Effort: openai.ReasoningEffortLow},
		Input:     responses.ResponseNewParamsInputUnion{OfString: openai.String("Think [[sim:reasoning=3]] [[sim:tokens=2]]")},
	})
	require.NoError(t, err)
	require.Equal(t, int64(3), resp.Usage.OutputTokensDetails.ReasoningTokens)
	require.Equal(t, int64(5), resp.Usage.OutputTokens)
}

// The SDK streams the named events in order with increasing sequence
// numbers, and its event accumulator rebuilds the completed response.
func TestResponsesSDKStreamAccumulates(t *testing.T) {
	f := newChatFixture(t)
	ctx := context.Background()
	client := openaiClient(f)
	stream := client.Responses.NewStreaming(ctx, responses.ResponseNewParams{
		Model: "mira",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Say hello [[sim:tokens=6]]")},
	})
	var (
		acc    responses.ResponseAccumulator
		names  []string
		deltas strings.Builder
		seq    int64 = -1
	)
	for stream.Next() {
		ev := stream.Current()
		require.Greater(t, ev.SequenceNumber, seq, "sequence numbers increase")
		seq = ev.SequenceNumber
		names = append(names, ev.Type)
		if ev.Type == "response.output_text.delta" {
			deltas.WriteString(ev.Delta)
		}
		var server responses.ResponsesServerEventUnion
		require.NoError(t, json.Unmarshal([]byte(ev.RawJSON()), &server))
		require.NoError(t, acc.AddEvent(server))
	}
	require.NoError(t, stream.Err())
	require.Equal(t, []string{"response.created", "response.in_progress", "response.output_item.added",
		"response.content_part.added"}, names[:4])
	require.Equal(t, []string{"response.output_text.done", "response.content_part.done", "response.output_item.done",
		"response.completed"}, names[len(names)-4:])
	for _, n := range names[4 : len(names)-4] {
		require.Equal(t, "response.output_text.delta", n)
	}
	final, err := acc.ReconstructedResponse()
	require.NoError(t, err)
	require.Equal(t, responses.ResponseStatusCompleted, final.Status)
	require.Equal(t, deltas.String(), final.OutputText())
	require.Equal(t, int64(6), final.Usage.OutputTokens)
	require.Equal(t, "response.completed", acc.Snapshot().TerminalEvent)

	// A stream that breaks after it opened ends with response.failed.
	stream = client.Responses.NewStreaming(ctx, responses.ResponseNewParams{
		Model: "mira",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("x [[sim:tokens=6]] [[sim:drop_after=2]]")},
	})
	last := ""
	for stream.Next() {
		last = stream.Current().Type
	}
	require.Equal(t, "response.failed", last)
}

// The item a budget cut is incomplete, and a response's items read the
// same streamed or not: an empty answer has its one empty message item in
// both, and every item's status in the stream's output_item.done events is
// the status the terminal event reports.
func TestResponsesItemsAgreeStreamedOrNot(t *testing.T) {
	f := newChatFixture(t)
	ctx := context.Background()
	client := openaiClient(f)
	type item struct{ Type, Status, Text string }
	items := func(out []responses.ResponseOutputItemUnion) []item {
		var got []item
		for _, o := range out {
			it := item{Type: o.Type, Status: o.Status}
			if o.Type == "message" {
				for _, c := range o.AsMessage().Content {
					it.Text += c.Text
				}
			}
			got = append(got, it)
		}
		return got
	}
	cases := []struct {
		name   string
		params responses.ResponseNewParams
		status responses.ResponseStatus
		want   []item
	}{
		{"an empty answer", responses.ResponseNewParams{Model: "mira",
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Nothing [[sim:tokens=0]]")}},
			responses.ResponseStatusCompleted, []item{{"message", "completed", ""}}},
		{"text cut by the budget", responses.ResponseNewParams{Model: "mira", MaxOutputTokens: openai.Int(2),
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Long [[sim:tokens=10]]")}},
			responses.ResponseStatusIncomplete, nil},
		{"reasoning cut by the budget", responses.ResponseNewParams{Model: "kavi", MaxOutputTokens: openai.Int(3),
			Reasoning: openai.ReasoningParam{Effort: openai.ReasoningEffortLow},
			Input:     responses.ResponseNewParamsInputUnion{OfString: openai.String("Think [[sim:reasoning=10]] [[sim:tokens=2]]")}},
			responses.ResponseStatusIncomplete, []item{{"message", "incomplete", ""}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp, err := client.Responses.New(ctx, c.params)
			require.NoError(t, err)
			require.Equal(t, c.status, resp.Status)
			plain := items(resp.Output)
			if c.want != nil {
				require.Equal(t, c.want, plain)
			} else {
				require.Len(t, plain, 1)
				require.Equal(t, "incomplete", plain[0].Status, "the cut item")
				require.NotEmpty(t, plain[0].Text)
			}

			s := client.Responses.NewStreaming(ctx, c.params)
			var done []string
			var final *responses.Response
			for s.Next() {
				switch ev := s.Current(); ev.Type {
				case "response.output_item.done":
					done = append(done, ev.Item.Status)
				case "response.completed", "response.incomplete":
					r := ev.Response
					final = &r
				}
			}
			require.NoError(t, s.Err())
			require.NotNil(t, final)
			require.Equal(t, c.status, final.Status)
			streamed := items(final.Output)
			require.Len(t, streamed, len(plain))
			for i := range plain {
				require.Equal(t, plain[i].Type, streamed[i].Type)
				require.Equal(t, plain[i].Status, streamed[i].Status)
				require.Equal(t, plain[i].Status, done[i], "output_item.done says what the terminal event says")
			}
		})
	}
}

var sdkResponsesWeather = responses.ToolUnionParam{OfFunction: &responses.FunctionToolParam{
	Name:        "get_weather",
	Description: openai.String("Weather for a city"),
	Parameters: map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}},
		"required": []string{"city"}},
}}

// The function-calling loop of OpenAI's docs: the model calls a function,
// the client sends the call and its output back as input items, the model
// answers — plain and streaming.
func TestResponsesSDKFunctionRoundTrip(t *testing.T) {
	f := newChatFixture(t)
	ctx := context.Background()
	client := openaiClient(f)
	for _, stream := range []bool{false, true} {
		input := responses.ResponseInputParam{responses.ResponseInputItemParamOfMessage("Weather in Pune? [[sim:tool=get_weather]]", responses.EasyInputMessageRoleUser)}
		rounds := 0
		for ; rounds < 4; rounds++ {
			params := responses.ResponseNewParams{
				Model: "vaani", Tools: []responses.ToolUnionParam{sdkResponsesWeather},
				ToolChoice: responses.ResponseNewParamsToolChoiceUnion{OfToolChoiceMode: openai.Opt(responses.ToolChoiceOptionsAuto)},
				Input:      responses.ResponseNewParamsInputUnion{OfInputItemList: input},
			}
			var resp *responses.Response
			if stream {
				s := client.Responses.NewStreaming(ctx, params)
				for s.Next() {
					if ev := s.Current(); ev.Type == "response.completed" {
						r := ev.Response
						resp = &r
					}
				}
				require.NoError(t, s.Err())
				require.NotNil(t, resp, "no response.completed")
			} else {
				var err error
				resp, err = client.Responses.New(ctx, params)
				require.NoError(t, err)
			}
			require.Len(t, resp.Tools, 1, "the declared tools come back")
			require.Equal(t, "get_weather", resp.Tools[0].Name)
			var calls []responses.ResponseFunctionToolCall
			for _, item := range resp.Output {
				if item.Type == "function_call" {
					calls = append(calls, item.AsFunctionCall())
				}
			}
			if len(calls) == 0 {
				require.NotEmpty(t, resp.OutputText())
				break
			}
			for _, c := range calls {
				require.Equal(t, "get_weather", c.Name)
				var args map[string]any
				require.NoError(t, json.Unmarshal([]byte(c.Arguments), &args))
				require.Contains(t, args, "city")
				input = append(input, responses.ResponseInputItemParamOfFunctionCall(c.Arguments, c.CallID, c.Name))
				out := responses.ResponseInputItemParamOfFunctionCallOutput(`{"c":31,"sky":"sunny"}`)
				out.OfFunctionCallOutput.CallID = openai.String(c.CallID)
				input = append(input, out)
			}
		}
		require.Equal(t, 1, rounds, "one tool round, then the answer (stream %v)", stream)
	}
}

// text.format json_schema: the output satisfies the schema, and output
// that does not is refused as on chat.
func TestResponsesSDKStructuredOutput(t *testing.T) {
	f := newChatFixture(t)
	ctx := context.Background()
	client := openaiClient(f)
	format := responses.ResponseTextConfigParam{Format: responses.ResponseFormatTextConfigUnionParam{
		OfJSONSchema: &responses.ResponseFormatTextJSONSchemaConfigParam{Name: "city", Strict: openai.Bool(true),
			Schema: map[string]any{"type": "object", "additionalProperties": false, "required": []string{"city", "pop"},
				"properties": map[string]any{"city": map[string]any{"type": "string"}, "pop": map[string]any{"type": "integer"}}}}}}
	resp, err := client.Responses.New(ctx, responses.ResponseNewParams{
		Model: "vaani", Text: format,
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("x [[sim:json]]")},
	})
	require.NoError(t, err)
	var out struct {
		City *string `json:"city"`
		Pop  *int    `json:"pop"`
	}
	require.NoError(t, json.Unmarshal([]byte(resp.OutputText()), &out))
	require.NotNil(t, out.City)
	require.NotNil(t, out.Pop)

	_, err = client.Responses.New(ctx, responses.ResponseNewParams{
		Model: "vaani", Text: format,
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("x [[sim:json_invalid]]")},
	})
	var apierr *openai.Error
	require.ErrorAs(t, err, &apierr)
	require.Equal(t, 422, apierr.StatusCode)
	require.Equal(t, "structured_output_unsatisfied", apierr.Code)
}

// What a stateless gateway cannot do is refused with OpenAI's error shape.
func TestResponsesRefusals(t *testing.T) {
	f := newChatFixture(t)
	cases := []struct{ name, body, msg string }{
		{"store", `{"model":"mira","store":true,"input":"hi"}`, "store: true is not supported"},
		{"previous_response_id", `{"model":"mira","previous_response_id":"resp_1","input":"hi"}`, "previous_response_id: not supported"},
		{"prompt", `{"model":"mira","prompt":{"id":"pmpt_abc","version":"2"},"input":"hi"}`, "prompt: not supported; this gateway does not store prompt templates. Send instructions and input instead."},
		{"hosted_tool", `{"model":"vaani","tools":[{"type":"web_search"}],"input":"hi"}`, `tools[0].type: only function tools`},
		{"no_input", `{"model":"mira"}`, "input: required"},
		{"bad_item", `{"model":"mira","input":[{"type":"computer_call_output","call_id":"c"}]}`, `input[0].type: "computer_call_output" is not supported`},
		{"bad_effort", `{"model":"kavi","reasoning":{"effort":"max"},"input":"hi"}`, "reasoning.effort: must be one of"},
		{"bad_budget", `{"model":"mira","max_output_tokens":0,"input":"hi"}`, "max_output_tokens: must be at least 1"},
		{"unknown_model", `{"model":"gpt-5","input":"hi"}`, "model: must be one of"},
		{"not_json", `{"model":`, "not valid JSON"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := f.post(t, "/v1/responses", c.body)
			require.Equal(t, 400, r.status, "%s", r.body)
			var env struct {
				Error struct {
					Message string  `json:"message"`
					Type    string  `json:"type"`
					Param   *string `json:"param"`
					Code    string  `json:"code"`
				} `json:"error"`
			}
			require.NoError(t, json.Unmarshal(r.body, &env), "%s", r.body)
			require.Equal(t, "invalid_request_error", env.Error.Type)
			require.Contains(t, env.Error.Message, c.msg)
		})
	}
}

// fieldPresent reports whether the JSON object raw has a member named field.
func fieldPresent(raw, field string) bool {
	var m map[string]json.RawMessage
	if json.Unmarshal([]byte(raw), &m) != nil {
		return false
	}
	_, ok := m[field]
	return ok
}
