package main

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/edgegw/gateway/hotpath"
	"github.com/edgegw/gateway/proxy"
	"github.com/edgegw/gateway/storage"
)

// memoryFile is the config file's memory: section.
type memoryFile struct {
	CaptureTier   *string        `yaml:"capture_tier"`
	EmbedDims     *int           `yaml:"embed_dimensions"`
	RecallTimeout *time.Duration `yaml:"recall_timeout"`
	CaptureWait   *time.Duration `yaml:"capture_wait"`
}

// memorySettings configures chat's memory recall, capture and rules.
type memorySettings struct {
	// CaptureTier runs the capture extractor; it must support structured
	// output. Default mira.
	CaptureTier string
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
	return memorySettings{CaptureTier: "mira", RecallTimeout: time.Second, CaptureWait: 2 * time.Second}
}

// loadMemory applies the memory: section over the defaults.
func loadMemory(f memoryFile, tiers []hotpath.Tier) (memorySettings, error) {
	m := defaultMemorySettings()
	set(&m.CaptureTier, f.CaptureTier)
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
	if m.RecallTimeout <= 0 || m.RecallTimeout > 10*time.Second {
		return m, fmt.Errorf("config memory.recall_timeout: must be above 0 and at most 10s")
	}
	if m.CaptureWait <= 0 || m.CaptureWait > 10*time.Second {
		return m, fmt.Errorf("config memory.capture_wait: must be above 0 and at most 10s")
	}
	return m, nil
}

// buildMemory wires recall, capture and rules: storage as the store, the
// capture tier's upstream as the extractor, and the gw-embed auxiliary
// tier (aux_tiers.gw-embed binds it) as the embedder.
func buildMemory(st settings, ups map[string]*proxy.Upstream, db *storage.DB, log *slog.Logger) (*proxy.MemoryConfig, *proxy.Embedder) {
	m := st.Memory
	emb := proxy.NewEmbedder(ups[hotpath.TierEmbed], m.EmbedDimensions)
	return &proxy.MemoryConfig{Store: db, Embedder: emb, Extractor: proxy.NewExtractor(ups[m.CaptureTier]),
		RecallTimeout: m.RecallTimeout, CaptureWait: m.CaptureWait, Log: log}, emb
}
