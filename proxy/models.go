package proxy

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/bytedance/sonic"
	"github.com/valyala/fasthttp"

	"github.com/edgegw/gateway/codec"
	"github.com/edgegw/gateway/hotpath"
)

// Catalogue serves GET /api/v1/models, GET /v1/models and
// GET /v1/models/{id}. Every body is rendered once from the tier table, so
// a listing costs one copy.
type Catalogue struct {
	native    []byte
	openai    []byte
	anthropic []byte
	// One model's body, by tier name, in each shape.
	openaiByID, anthropicByID map[string][]byte
}

// anthropicModel is a model as Anthropic's Models API shows it, with the
// window and the answer's cap the SDKs' ModelInfo carries.
type anthropicModel struct {
	Type           string `json:"type"`
	ID             string `json:"id"`
	DisplayName    string `json:"display_name"`
	CreatedAt      string `json:"created_at"`
	MaxInputTokens int    `json:"max_input_tokens"`
	MaxTokens      int    `json:"max_tokens"`
}

// anthropicList is Anthropic's page of models: all of them, on one page.
type anthropicList struct {
	Data    []anthropicModel `json:"data"`
	HasMore bool             `json:"has_more"`
	FirstID *string          `json:"first_id"`
	LastID  *string          `json:"last_id"`
}

type catalogueEntry struct {
	Object          string           `json:"object"`
	ID              string           `json:"id"`
	Label           string           `json:"label"`
	Profile         string           `json:"profile"`
	Created         int64            `json:"created"`
	OwnedBy         string           `json:"owned_by"`
	ContextWindow   int              `json:"context_window"`
	MaxOutput       int              `json:"max_output"`
	LatencyTargetMs int              `json:"latency_target_ms"`
	Reasoning       catalogueEffort  `json:"reasoning"`
	SupportsTools   bool             `json:"supports_tools"`
	SupportsVision  bool             `json:"supports_vision"`
	Structured      bool             `json:"supports_structured_output"`
	Pricing         cataloguePricing `json:"pricing"`
}

type catalogueEffort struct {
	DefaultEffort hotpath.Effort `json:"default_effort"`
	Graded        bool           `json:"graded"`
}

// cataloguePricing gives prices in USD per PerTokens tokens (one million):
// the figures people read on a price list, exact decimals.
type cataloguePricing struct {
	Currency      string      `json:"currency"`
	InputUnit     json.Number `json:"input_unit"`
	OutputUnit    json.Number `json:"output_unit"`
	CacheReadUnit json.Number `json:"cache_read_unit"`
	PerTokens     int         `json:"per_tokens"`
}

type openAIModel struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

type list[T any] struct {
	Object string `json:"object"`
	Data   []T    `json:"data"`
}

func usd(micros int64) json.Number { return json.Number(hotpath.AppendMicroUSD(nil, micros)) }

// NewCatalogue renders the catalogue of tiers. The upstream model behind a
// tier is not part of hotpath.Tier, so it cannot appear here.
func NewCatalogue(tiers []hotpath.Tier) (*Catalogue, error) {
	native := list[catalogueEntry]{Object: "list", Data: []catalogueEntry{}}
	openai := list[openAIModel]{Object: "list", Data: []openAIModel{}}
	anthropic := anthropicList{Data: []anthropicModel{}}
	c := &Catalogue{openaiByID: map[string][]byte{}, anthropicByID: map[string][]byte{}}
	for _, t := range tiers {
		native.Data = append(native.Data, catalogueEntry{
			Object: "model", ID: t.Name, Label: t.Label, Profile: t.Profile, Created: t.Created, OwnedBy: t.OwnedBy,
			ContextWindow: t.ContextWindow, MaxOutput: t.MaxOutput, LatencyTargetMs: t.LatencyTargetMs,
			Reasoning:     catalogueEffort{DefaultEffort: t.DefaultEffort, Graded: t.Graded},
			SupportsTools: t.SupportsTools, SupportsVision: t.SupportsVision, Structured: t.SupportsStructured,
			Pricing: cataloguePricing{Currency: "USD", InputUnit: usd(t.Prices.InputPerM),
				OutputUnit: usd(t.Prices.OutputPerM), CacheReadUnit: usd(t.Prices.CacheReadPerM), PerTokens: 1_000_000},
		})
		om := openAIModel{ID: t.Name, Object: "model", Created: t.Created, OwnedBy: t.OwnedBy}
		am := anthropicModel{Type: "model", ID: t.Name, DisplayName: t.Label,
			CreatedAt: time.Unix(t.Created, 0).UTC().Format(time.RFC3339), MaxInputTokens: t.ContextWindow, MaxTokens: t.MaxOutput}
		openai.Data = append(openai.Data, om)
		anthropic.Data = append(anthropic.Data, am)
		var err error
		if c.openaiByID[t.Name], err = sonic.Marshal(om); err != nil {
			return nil, fmt.Errorf("cannot render model %s: %w", t.Name, err)
		}
		if c.anthropicByID[t.Name], err = sonic.Marshal(am); err != nil {
			return nil, fmt.Errorf("cannot render model %s: %w", t.Name, err)
		}
	}
	if n := len(anthropic.Data); n > 0 {
		anthropic.FirstID, anthropic.LastID = &anthropic.Data[0].ID, &anthropic.Data[n-1].ID
	}
	var err error
	if c.anthropic, err = sonic.Marshal(anthropic); err != nil {
		return nil, fmt.Errorf("cannot render model list: %w", err)
	}
	if c.native, err = sonic.Marshal(native); err != nil {
		return nil, fmt.Errorf("cannot render model catalogue: %w", err)
	}
	if c.openai, err = sonic.Marshal(openai); err != nil {
		return nil, fmt.Errorf("cannot render model list: %w", err)
	}
	return c, nil
}

// Native serves GET /api/v1/models.
func (cat *Catalogue) Native(ctx *fasthttp.RequestCtx, _ *hotpath.Call) error {
	ctx.SetContentType("application/json")
	ctx.SetBody(cat.native)
	return nil
}

// OpenAI serves GET /v1/models: in Anthropic's shape when the request
// carries anthropic-version (Anthropic's SDKs send it on every call), in
// OpenAI's otherwise.
func (cat *Catalogue) OpenAI(ctx *fasthttp.RequestCtx, _ *hotpath.Call) error {
	ctx.SetContentType("application/json")
	if fromAnthropic(ctx) {
		ctx.SetBody(cat.anthropic)
		return nil
	}
	ctx.SetBody(cat.openai)
	return nil
}

// errModelNotFound answers GET /v1/models/{id} for an id that is no tier.
var errModelNotFound = &codec.Error{Code: codec.CodeNotFound, Message: "No model with this id; GET /v1/models lists them."}

// Model serves GET /v1/models/{id}, one model in the shape of the list.
func (cat *Catalogue) Model(ctx *fasthttp.RequestCtx, _ *hotpath.Call) error {
	id, _ := ctx.UserValue("id").(string)
	byID := cat.openaiByID
	if fromAnthropic(ctx) {
		byID = cat.anthropicByID
	}
	body, ok := byID[id]
	if !ok {
		return errModelNotFound
	}
	ctx.SetContentType("application/json")
	ctx.SetBody(body)
	return nil
}

// HeaderAnthropicVersion is the header Anthropic's clients send on every
// request.
const HeaderAnthropicVersion = "Anthropic-Version"

func fromAnthropic(ctx *fasthttp.RequestCtx) bool {
	return len(ctx.Request.Header.Peek(HeaderAnthropicVersion)) > 0
}
