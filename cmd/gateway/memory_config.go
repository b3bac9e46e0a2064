package main

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/edgegw/gateway/hotpath"
	"github.com/edgegw/gateway/proxy"
	"github.com/edgegw/gateway/storage"
)

// memoryFile is the config file's memory: section.
type memoryFile struct {
	CaptureTier   *string        `yaml:"capture_tier"`
	EmbedProvider *string        `yaml:"embed_provider"`
	EmbedModel    *string        `yaml:"embed_model"`
	EmbedDims     *int           `yaml:"embed_dimensions"`
	RecallTimeout *time.Duration `yaml:"recall_timeout"`
	CaptureWait   *time.Duration `yaml:"capture_wait"`
}

// memorySettings configures chat's memory recall, capture and rules.
type memorySettings struct {
	// CaptureTier runs the capture extractor; it must support structured
	// output. Default mira.
	CaptureTier string
	// EmbedProvider and EmbedModel bind the gw-embed tier. Default: the
	// built-in simulator, model gw-embed.
	EmbedProvider, EmbedModel string
	// EmbedDimensions asks the embed tier for vectors of this length (the
	// OpenAI dimensions parameter); 0 takes the model's own.
	EmbedDimensions int
	// RecallTimeout bounds recall and rules before the upstream call.
	// Default 1s.
	RecallTimeout time.Duration
	// CaptureWait bounds capture after the answer. Default 2s.
	CaptureWait time.Duration
}

func defaultMemorySettings() memorySettings {
	return memorySettings{CaptureTier: "mira", EmbedProvider: simProvider, EmbedModel: "gw-embed",
		RecallTimeout: time.Second, CaptureWait: 2 * time.Second}
}

// loadMemory applies the memory: section over the defaults.
func loadMemory(f memoryFile, tiers []hotpath.Tier, providers map[string]providerConfig) (memorySettings, error) {
	m := defaultMemorySettings()
	set(&m.CaptureTier, f.CaptureTier)
	set(&m.EmbedProvider, f.EmbedProvider)
	set(&m.EmbedModel, f.EmbedModel)
	set(&m.EmbedDimensions, f.EmbedDims)
	if m.EmbedDimensions < 0 || m.EmbedDimensions > 8192 {
		return m, fmt.Errorf("config memory.embed_dimensions: must be from 0 to 8192")
	}
	set(&m.RecallTimeout, f.RecallTimeout)
	set(&m.CaptureWait, f.CaptureWait)
	i := tierIndex(tiers, m.CaptureTier)
	switch {
	case i < 0:
		return m, fmt.Errorf("config memory.capture_tier: unknown tier %q (known: kavi, vaani, mira)", m.CaptureTier)
	case !tiers[i].SupportsStructured:
		return m, fmt.Errorf("config memory.capture_tier: %s has no structured output, which the extractor needs", m.CaptureTier)
	}
	if _, ok := providers[m.EmbedProvider]; !ok && m.EmbedProvider != simProvider {
		return m, fmt.Errorf("config memory.embed_provider: unknown provider %q", m.EmbedProvider)
	}
	if m.EmbedModel == "" {
		return m, fmt.Errorf("config memory.embed_model: must be set")
	}
	if m.RecallTimeout <= 0 || m.RecallTimeout > 10*time.Second {
		return m, fmt.Errorf("config memory.recall_timeout: must be above 0 and at most 10s")
	}
	if m.CaptureWait <= 0 || m.CaptureWait > 10*time.Second {
		return m, fmt.Errorf("config memory.capture_wait: must be above 0 and at most 10s")
	}
	return m, nil
}

// buildMemory wires recall, capture and rules: storage as the store, the
// capture tier's upstream as the extractor and the gw-embed binding.
func (a *app) buildMemory(st settings, ups map[string]*proxy.Upstream, db *storage.DB, log *slog.Logger) (*proxy.MemoryConfig, *proxy.Embedder, error) {
	m := st.Memory
	ec := proxy.UpstreamConfig{Model: m.EmbedModel, Retries: -1}
	if m.EmbedProvider == simProvider {
		ln := a.simListener(log)
		ec.BaseURL = "http://simulator.internal/v1"
		ec.Dial = func(string) (net.Conn, error) { return ln.Dial() }
	} else {
		p := st.Providers[m.EmbedProvider]
		ec.BaseURL, ec.MaxConns = p.BaseURL, p.MaxConns
		if p.APIKeyEnv != "" {
			if ec.APIKey = os.Getenv(p.APIKeyEnv); ec.APIKey == "" {
				return nil, nil, fmt.Errorf("config providers.%s.api_key_env: %s is not set", m.EmbedProvider, p.APIKeyEnv)
			}
		}
	}
	emb, err := proxy.NewEmbedder(ec, m.EmbedDimensions)
	if err != nil {
		return nil, nil, fmt.Errorf("config memory: %w", err)
	}
	return &proxy.MemoryConfig{Store: db, Embedder: emb, Extractor: proxy.NewExtractor(ups[m.CaptureTier]),
		RecallTimeout: m.RecallTimeout, CaptureWait: m.CaptureWait, Log: log}, emb, nil
}
