package main

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

// The OpenAI Go SDK's tool_choice forms and a runTools-style loop on the
// embedded default (every tier on the in-process simulator, which refuses
// what OpenAI's API refuses): a tool_choice the gateway mangled on its way
// upstream would be refused there and fail here.
func TestOpenAISDKToolChoiceEmbedded(t *testing.T) {
	ta := startTestApp(t)
	tn := newTenant(t, ta.dbURL, "tools@example.com")
	client := openai.NewClient(option.WithBaseURL("http://"+ta.Addr()+"/v1/"), option.WithAPIKey(tn.key),
		option.WithMaxRetries(0))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	weather := openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
		Name: "get_weather",
		Parameters: shared.FunctionParameters{
			"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}, "required": []string{"city"},
		},
	})
	for _, form := range []struct {
		name   string
		choice openai.ChatCompletionToolChoiceOptionUnionParam
		calls  bool
	}{
		{"auto", openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("auto")}, false},
		{"none", openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("none")}, false},
		{"required", openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("required")}, true},
		{"named", openai.ToolChoiceOptionFunctionToolChoice(openai.ChatCompletionNamedToolChoiceFunctionParam{Name: "get_weather"}), true},
	} {
		t.Run(form.name, func(t *testing.T) {
			res, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
				Model: "mira", Tools: []openai.ChatCompletionToolUnionParam{weather}, ToolChoice: form.choice,
				Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Weather in Pune?")},
			})
			require.NoError(t, err)
			if form.calls {
				require.Equal(t, "tool_calls", res.Choices[0].FinishReason)
				require.Equal(t, "get_weather", res.Choices[0].Message.ToolCalls[0].Function.Name)
			} else {
				require.Equal(t, "stop", res.Choices[0].FinishReason)
			}
		})
	}

	t.Run("runTools loop", func(t *testing.T) {
		params := openai.ChatCompletionNewParams{
			Model: "vaani", Tools: []openai.ChatCompletionToolUnionParam{weather},
			ToolChoice: openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("auto")},
			Messages:   []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Weather in Pune? [[sim:tool=get_weather]]")},
		}
		res, err := client.Chat.Completions.New(ctx, params)
		require.NoError(t, err)
		msg := res.Choices[0].Message
		require.Len(t, msg.ToolCalls, 1)
		var args map[string]any
		require.NoError(t, json.Unmarshal([]byte(msg.ToolCalls[0].Function.Arguments), &args))
		params.Messages = append(params.Messages, msg.ToParam(), openai.ToolMessage("31C and sunny", msg.ToolCalls[0].ID))
		res, err = client.Chat.Completions.New(ctx, params)
		require.NoError(t, err)
		require.Equal(t, "stop", res.Choices[0].FinishReason)
		require.NotEmpty(t, res.Choices[0].Message.Content)
	})
}
