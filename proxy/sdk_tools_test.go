package proxy

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"
	"github.com/stretchr/testify/require"
)

// sdkWeatherTool is the tool the SDK tests declare.
var sdkWeatherTool = openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
	Name:        "get_weather",
	Description: openai.String("Weather in a city"),
	Parameters: shared.FunctionParameters{
		"type":       "object",
		"properties": map[string]any{"city": map[string]any{"type": "string"}},
		"required":   []string{"city"},
	},
})

// TestOpenAISDKToolChoice drives the OpenAI Go SDK's four tool_choice
// forms and a runTools-style loop through the gateway to a recording strict
// upstream: each form reaches the upstream as the JSON the SDK sent, the
// forced forms make the model call the tool, and the tool result goes back
// and is answered.
func TestOpenAISDKToolChoice(t *testing.T) {
	up := recordingSim(t)
	f := newChatFixture(t, func(o *fixtureOptions) { o.dial = up.dial })
	client := openai.NewClient(option.WithBaseURL("http://gw/v1/"), option.WithAPIKey(f.key),
		option.WithHTTPClient(f.client), option.WithMaxRetries(0))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	lastToolChoice := func(t *testing.T) string {
		t.Helper()
		up.mu.Lock()
		body := up.bodies[len(up.bodies)-1]
		up.mu.Unlock()
		strictOpenAIDecode(t, body)
		var m map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(body, &m))
		return string(m["tool_choice"])
	}
	forms := []struct {
		name   string
		choice openai.ChatCompletionToolChoiceOptionUnionParam
		want   string // tool_choice upstream
		calls  bool   // the model must call get_weather
	}{
		{"auto", openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("auto")}, `"auto"`, false},
		{"none", openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("none")}, `"none"`, false},
		{"required", openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("required")}, `"required"`, true},
		{"named", openai.ToolChoiceOptionFunctionToolChoice(openai.ChatCompletionNamedToolChoiceFunctionParam{Name: "get_weather"}),
			`{"function":{"name":"get_weather"},"type":"function"}`, true},
	}
	for _, form := range forms {
		for _, model := range []string{"mira", "vaani"} {
			t.Run(form.name+" "+model, func(t *testing.T) {
				params := openai.ChatCompletionNewParams{
					Model:      model,
					Tools:      []openai.ChatCompletionToolUnionParam{sdkWeatherTool},
					ToolChoice: form.choice,
					Messages:   []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Weather in Pune?")},
				}
				res, err := client.Chat.Completions.New(ctx, params)
				require.NoError(t, err)
				require.JSONEq(t, form.want, lastToolChoice(t))
				msg := res.Choices[0].Message
				if !form.calls {
					require.Empty(t, msg.ToolCalls)
					require.Equal(t, "stop", res.Choices[0].FinishReason)
					return
				}
				require.Equal(t, "tool_calls", res.Choices[0].FinishReason)
				require.Len(t, msg.ToolCalls, 1)
				require.Equal(t, "get_weather", msg.ToolCalls[0].Function.Name)

				// The same request streamed.
				stream := client.Chat.Completions.NewStreaming(ctx, params)
				acc := openai.ChatCompletionAccumulator{}
				for stream.Next() {
					require.True(t, acc.AddChunk(stream.Current()))
				}
				require.NoError(t, stream.Err())
				require.JSONEq(t, form.want, lastToolChoice(t))
				require.Equal(t, "tool_calls", acc.Choices[0].FinishReason)
				require.Equal(t, "get_weather", acc.Choices[0].Message.ToolCalls[0].Function.Name)
			})
		}
	}

	t.Run("runTools loop", func(t *testing.T) {
		runToolsLoop(t, ctx, client, "vaani", lastToolChoice)
	})
}

// runToolsLoop is what the SDKs' runTools helpers do: send the
// conversation with tools and tool_choice auto; while the model calls
// tools, append its message and each tool's result and send again; stop at
// its text answer. check, when set, inspects each upstream request's
// tool_choice.
func runToolsLoop(t *testing.T, ctx context.Context, client openai.Client, model string, check func(*testing.T) string) {
	t.Helper()
	params := openai.ChatCompletionNewParams{
		Model:      model,
		Tools:      []openai.ChatCompletionToolUnionParam{sdkWeatherTool},
		ToolChoice: openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("auto")},
		Messages:   []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Weather in Pune? [[sim:tool=get_weather]]")},
	}
	rounds := 0
	for ; rounds < 4; rounds++ {
		res, err := client.Chat.Completions.New(ctx, params)
		require.NoError(t, err)
		if check != nil {
			require.JSONEq(t, `"auto"`, check(t))
		}
		msg := res.Choices[0].Message
		if len(msg.ToolCalls) == 0 {
			require.Equal(t, "stop", res.Choices[0].FinishReason)
			require.NotEmpty(t, msg.Content)
			break
		}
		require.Equal(t, "tool_calls", res.Choices[0].FinishReason)
		params.Messages = append(params.Messages, msg.ToParam())
		for _, call := range msg.ToolCalls {
			var args map[string]any
			require.NoError(t, json.Unmarshal([]byte(call.Function.Arguments), &args))
			require.Contains(t, args, "city")
			params.Messages = append(params.Messages, openai.ToolMessage(`{"c":31,"sky":"sunny"}`, call.ID))
		}
	}
	require.Equal(t, 1, rounds, "one tool round, then the answer")
}
