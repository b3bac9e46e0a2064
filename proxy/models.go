package proxy

import (
	"encoding/json"
	"fmt"

	"github.com/bytedance/sonic"
	"github.com/valyala/fasthttp"

	"github.com/edgegw/gateway/hotpath"
)

// Catalogue serves GET /api/v1/models and GET /v1/models. Both bodies are
// rendered once from the tier table, so a listing costs one copy.
type Catalogue struct {
	native []byte
	openai []byte
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
	for _, t := range tiers {
		native.Data = append(native.Data, catalogueEntry{
			Object: "model", ID: t.Name, Label: t.Label, Profile: t.Profile, Created: t.Created, OwnedBy: t.OwnedBy,
			ContextWindow: t.ContextWindow, MaxOutput: t.MaxOutput, LatencyTargetMs: t.LatencyTargetMs,
			Reasoning:     catalogueEffort{DefaultEffort: t.DefaultEffort, Graded: t.Graded},
			SupportsTools: t.SupportsTools, SupportsVision: t.SupportsVision,
			Pricing: cataloguePricing{Currency: "USD", InputUnit: usd(t.Prices.InputPerM),
				OutputUnit: usd(t.Prices.OutputPerM), CacheReadUnit: usd(t.Prices.CacheReadPerM), PerTokens: 1_000_000},
		})
		openai.Data = append(openai.Data, openAIModel{ID: t.Name, Object: "model", Created: t.Created, OwnedBy: t.OwnedBy})
	}
	c := &Catalogue{}
	var err error
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

// OpenAI serves GET /v1/models.
func (cat *Catalogue) OpenAI(ctx *fasthttp.RequestCtx, _ *hotpath.Call) error {
	ctx.SetContentType("application/json")
	ctx.SetBody(cat.openai)
	return nil
}
