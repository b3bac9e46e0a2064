package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"
	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/bench/frameorder"
)

// startSimProcess runs `gateway sim` as its own process on a free port and
// returns its base URL.
func startSimProcess(t *testing.T, bin string) string {
	t.Helper()
	return "http://" + startChild(t, bin, nil, []string{"simulator listening"}, "sim", "--sim-addr", "127.0.0.1:0") + "/v1"
}

// startAgainstSimProcess starts the gateway in-process with every tier bound
// to a simulator running as a separate process, through the config file.
func startAgainstSimProcess(t *testing.T) (*testApp, tenant) {
	t.Helper()
	simURL := startSimProcess(t, buildGateway(t))
	cfgPath := filepath.Join(t.TempDir(), "gateway.yaml")
	require.NoError(t, os.WriteFile(cfgPath, []byte(`
providers:
  simproc:
    base_url: `+simURL+`
tiers:
  kavi:  {provider: simproc, upstream_model: sim-large, reasons: true}
  vaani: {provider: simproc, upstream_model: sim-medium, reasons: true}
  mira:  {provider: simproc, upstream_model: sim-small, reasons: false}
`), 0o600))
	ta := startTestApp(t, func(c *serveConfig) { c.ConfigPath = cfgPath })
	return ta, newTenant(t, ta.dbURL, "sdk@example.com")
}

// The official OpenAI Go SDK, pointed at /v1, chats, streams and calls tools
// through the gateway in front of a simulator process.
func TestOpenAISDK(t *testing.T) {
	ta, tn := startAgainstSimProcess(t)
	client := openai.NewClient(option.WithBaseURL("http://"+ta.Addr()+"/v1/"), option.WithAPIKey(tn.key),
		option.WithMaxRetries(0))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	t.Run("chat", func(t *testing.T) {
		res, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model:    "mira",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hello [[sim:tokens=6]]")},
		})
		require.NoError(t, err)
		require.Equal(t, "mira", res.Model)
		require.Len(t, res.Choices, 1)
		require.NotEmpty(t, res.Choices[0].Message.Content)
		require.Equal(t, "stop", res.Choices[0].FinishReason)
		require.EqualValues(t, 6, res.Usage.CompletionTokens)
		require.Positive(t, res.Usage.PromptTokens)
		require.NotContains(t, res.RawJSON(), "sim-small", "the upstream model never shows")
	})

	t.Run("stream", func(t *testing.T) {
		stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
			Model:         "vaani",
			Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Stream [[sim:tokens=12]]")},
			StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
		})
		acc := openai.ChatCompletionAccumulator{}
		chunks := 0
		for stream.Next() {
			require.True(t, acc.AddChunk(stream.Current()), "every chunk is accepted by the SDK's accumulator")
			chunks++
		}
		require.NoError(t, stream.Err())
		require.GreaterOrEqual(t, chunks, 12+3)
		require.NotEmpty(t, acc.Choices[0].Message.Content)
		require.Equal(t, "stop", acc.Choices[0].FinishReason)
		require.EqualValues(t, 12, acc.Usage.CompletionTokens)
	})

	t.Run("tools", func(t *testing.T) {
		params := openai.ChatCompletionNewParams{
			Model: "kavi",
			Tools: []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
				Name:        "get_weather",
				Description: openai.String("Weather in a city"),
				Parameters: shared.FunctionParameters{
					"type":       "object",
					"properties": map[string]any{"city": map[string]any{"type": "string"}},
					"required":   []string{"city"},
				},
			})},
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Weather in Pune? [[sim:tool=get_weather]]")},
		}
		stream := client.Chat.Completions.NewStreaming(ctx, params)
		acc := openai.ChatCompletionAccumulator{}
		for stream.Next() {
			acc.AddChunk(stream.Current())
		}
		require.NoError(t, stream.Err())
		msg := acc.Choices[0].Message
		require.Equal(t, "tool_calls", acc.Choices[0].FinishReason)
		require.Len(t, msg.ToolCalls, 1)
		call := msg.ToolCalls[0]
		require.Equal(t, "get_weather", call.Function.Name)
		var args map[string]any
		require.NoError(t, json.Unmarshal([]byte(call.Function.Arguments), &args))
		require.Contains(t, args, "city")

		// The assistant turn and the tool result replay unchanged; the model answers.
		params.Messages = append(params.Messages, msg.ToParam(), openai.ToolMessage("31C and sunny", call.ID))
		res, err := client.Chat.Completions.New(ctx, params)
		require.NoError(t, err)
		require.Equal(t, "stop", res.Choices[0].FinishReason)
		require.NotEmpty(t, res.Choices[0].Message.Content)
	})

	t.Run("errors", func(t *testing.T) {
		_, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model:    "gpt-4o",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
		})
		var apiErr *openai.Error
		require.True(t, errors.As(err, &apiErr), "%v", err)
		require.Equal(t, 400, apiErr.StatusCode)
		require.Equal(t, "invalid_request", apiErr.Code)
		require.Equal(t, "invalid_request_error", apiErr.Type)

		bad := openai.NewClient(option.WithBaseURL("http://"+ta.Addr()+"/v1/"), option.WithAPIKey("gw_live_nope"), option.WithMaxRetries(0))
		_, err = bad.Models.List(ctx)
		require.True(t, errors.As(err, &apiErr))
		require.Equal(t, 401, apiErr.StatusCode)
	})

	t.Run("models", func(t *testing.T) {
		page, err := client.Models.List(ctx)
		require.NoError(t, err)
		var ids []string
		for _, m := range page.Data {
			ids = append(ids, m.ID)
		}
		require.ElementsMatch(t, []string{"kavi", "vaani", "mira"}, ids)
	})
}

// Every wire streams through a real listener against the simulator process.
func TestThreeWiresAgainstSimulatorProcess(t *testing.T) {
	ta, tn := startAgainstSimProcess(t)
	wires := map[string]frameorder.Wire{"/api/v1/chat": frameorder.V1, "/api/v2/chat": frameorder.V2, "/v1/chat/completions": frameorder.OpenAI}
	for _, path := range []string{"/api/v1/chat", "/api/v2/chat", "/v1/chat/completions"} {
		r := ta.call(t, "POST", path, tn.key, map[string]any{"model": "kavi", "stream": true,
			"messages": []map[string]any{{"role": "user", "content": "x [[sim:reasoning=2]] [[sim:tokens=3]]"}}})
		require.Equal(t, 200, r.status, path)
		out := frameorder.CheckStream(wires[path], r.raw)
		require.True(t, out.OK(), "%s: %s", path, out.Violation)
		require.Equal(t, "text/event-stream", r.header.Get("Content-Type"))
		require.NotContains(t, string(r.raw), "sim-large")
		if path == "/api/v2/chat" {
			require.Contains(t, string(r.raw), "event: reasoning")
			require.Contains(t, string(r.raw), "event: finish")
		} else {
			require.Contains(t, string(r.raw), "data: [DONE]")
			require.NotContains(t, string(r.raw), "reasoning_content")
		}
	}
}
