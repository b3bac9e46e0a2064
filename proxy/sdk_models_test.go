package proxy

import (
	"context"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"

	"github.com/edgegw/gateway/hotpath"
)

// withCatalogue serves the model routes as the gateway binary does.
func withCatalogue(t *testing.T) func(*fixtureOptions) {
	cat, err := NewCatalogue(hotpath.DefaultTiers())
	require.NoError(t, err)
	return func(o *fixtureOptions) {
		o.routes = func(rt *Router) {
			a := hotpath.Access{Auth: hotpath.AuthUser, Name: "models_openai"}
			rt.HandleEitherVendor(fasthttp.MethodGet, "/v1/models", a, cat.OpenAI)
			a.Name = "model_openai"
			rt.HandleEitherVendor(fasthttp.MethodGet, "/v1/models/{id}", a, cat.Model)
		}
	}
}

// Both ecosystems' SDKs list the models and retrieve one, each in its own
// shape; an unknown id is a 404 in the caller's envelope.
func TestModelsForBothSDKs(t *testing.T) {
	f := newChatFixture(t, withCatalogue(t))
	ctx := context.Background()

	oc := openaiClient(f)
	page, err := oc.Models.List(ctx)
	require.NoError(t, err)
	var ids []string
	for _, m := range page.Data {
		ids = append(ids, m.ID)
		require.Equal(t, "model", string(m.Object))
	}
	require.ElementsMatch(t, []string{"kavi", "vaani", "mira"}, ids)
	m, err := oc.Models.Get(ctx, "vaani")
	require.NoError(t, err)
	require.Equal(t, "vaani", m.ID)
	require.Positive(t, m.Created)
	_, err = oc.Models.Get(ctx, "gpt-4o")
	var oerr *openai.Error
	require.ErrorAs(t, err, &oerr)
	require.Equal(t, 404, oerr.StatusCode)
	require.Equal(t, "not_found", oerr.Code)

	ac := anthropicClient(f, f.key)
	apage, err := ac.Models.List(ctx, anthropic.ModelListParams{})
	require.NoError(t, err)
	ids = ids[:0]
	for _, m := range apage.Data {
		ids = append(ids, m.ID)
		require.Equal(t, "model", string(m.Type))
		require.NotEmpty(t, m.DisplayName)
		require.False(t, m.CreatedAt.IsZero())
	}
	require.ElementsMatch(t, []string{"kavi", "vaani", "mira"}, ids)
	require.False(t, apage.HasMore)
	am, err := ac.Models.Get(ctx, "mira", anthropic.ModelGetParams{})
	require.NoError(t, err)
	require.Equal(t, "mira", am.ID)
	require.Equal(t, int64(65536), am.MaxInputTokens, "the tier's window")
	require.Equal(t, int64(2048), am.MaxTokens, "the tier's cap on an answer")
	_, err = ac.Models.Get(ctx, "claude-x", anthropic.ModelGetParams{})
	var aerr *anthropic.Error
	require.ErrorAs(t, err, &aerr)
	require.Equal(t, 404, aerr.StatusCode)
	require.Equal(t, "not_found_error", string(aerr.Type()))
}
