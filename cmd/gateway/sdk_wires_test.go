package main

import (
	"context"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/stretchr/testify/require"
)

// Both vendors' SDKs on the embedded default, as a new user points them at
// `make run`: Anthropic's messages, count_tokens and models with its own
// key header, and OpenAI's responses.create and models.retrieve. Each
// request's ledger row names its wire.
func TestVendorSDKsEmbedded(t *testing.T) {
	ta := startTestApp(t)
	tn := newTenant(t, ta.dbURL, "wires@example.com")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	ac := anthropic.NewClient(aoption.WithBaseURL("http://"+ta.Addr()+"/"), aoption.WithAPIKey(tn.key), aoption.WithMaxRetries(0))
	params := anthropic.MessageNewParams{Model: "mira", MaxTokens: 64,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Hello [[sim:tokens=4]]"))}}
	msg, err := ac.Messages.New(ctx, params, aoption.WithHeader("X-Request-Id", "wires-anthropic"))
	require.NoError(t, err)
	require.Equal(t, anthropic.StopReasonEndTurn, msg.StopReason)
	require.Equal(t, int64(4), msg.Usage.OutputTokens)
	count, err := ac.Messages.CountTokens(ctx, anthropic.MessageCountTokensParams{Model: params.Model, Messages: params.Messages})
	require.NoError(t, err)
	require.Equal(t, msg.Usage.InputTokens, count.InputTokens)
	models, err := ac.Models.List(ctx, anthropic.ModelListParams{})
	require.NoError(t, err)
	require.Len(t, models.Data, 3)

	oc := openai.NewClient(option.WithBaseURL("http://"+ta.Addr()+"/v1/"), option.WithAPIKey(tn.key), option.WithMaxRetries(0))
	res, err := oc.Responses.New(ctx, responses.ResponseNewParams{Model: "mira",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Hello [[sim:tokens=4]]")}},
		option.WithHeader("X-Request-Id", "wires-responses"))
	require.NoError(t, err)
	require.Equal(t, responses.ResponseStatusCompleted, res.Status)
	require.NotEmpty(t, res.OutputText())
	m, err := oc.Models.Get(ctx, "kavi")
	require.NoError(t, err)
	require.Equal(t, "kavi", m.ID)

	for id, route := range map[string]string{"wires-anthropic": "messages_anthropic", "wires-responses": "responses_openai"} {
		var log resp
		require.Eventually(t, func() bool {
			log = ta.call(t, "GET", "/api/v1/logs/"+id, tn.key, nil)
			return log.status == 200
		}, 5*time.Second, 20*time.Millisecond)
		require.Equal(t, route, log.body["route"], id)
		require.Equal(t, "mira", log.body["model"])
		require.Equal(t, true, log.body["billed"])
		require.Equal(t, float64(4), log.body["usage"].(map[string]any)["output_tokens"])
	}
}
