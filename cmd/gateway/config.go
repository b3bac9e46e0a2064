package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/edgegw/gateway/hotpath"
)

// fileConfig is the --config file: the structured settings that do not fit
// in flags. Every field is optional; tiers start from the advertised
// catalogue and the file overrides what it names.
type fileConfig struct {
	Tiers map[string]tierConfig `yaml:"tiers"`
}

type tierConfig struct {
	Label           *string        `yaml:"label"`
	Profile         *string        `yaml:"profile"`
	ContextWindow   *int           `yaml:"context_window"`
	MaxOutput       *int           `yaml:"max_output"`
	LatencyTargetMs *int           `yaml:"latency_target_ms"`
	Deadline        *time.Duration `yaml:"deadline"`
	SupportsTools   *bool          `yaml:"supports_tools"`
	SupportsVision  *bool          `yaml:"supports_vision"`
	Reasoning       *struct {
		DefaultEffort *string `yaml:"default_effort"`
		Graded        *bool   `yaml:"graded"`
	} `yaml:"reasoning"`
	Prices *struct {
		Input     *usd `yaml:"input"`
		Output    *usd `yaml:"output"`
		CacheRead *usd `yaml:"cache_read"`
	} `yaml:"prices"`
}

// usd is a dollar amount read from its literal text, so "0.76" is exactly
// 760000 micro-USD and never passes through a float.
type usd int64

func (u *usd) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: want a dollar amount", n.Line)
	}
	v, err := hotpath.ParseMicroUSD(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	*u = usd(v)
	return nil
}

// loadTiers returns the tier table: the defaults, overridden by the file at
// path when path is set. Errors name the offending field.
func loadTiers(path string) ([]hotpath.Tier, error) {
	tiers := hotpath.DefaultTiers()
	if path != "" {
		raw, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		var fc fileConfig
		dec := yaml.NewDecoder(bytes.NewReader(raw))
		dec.KnownFields(true)
		if err := dec.Decode(&fc); err != nil && !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("config %s: %w", path, err)
		}
		for name, tc := range fc.Tiers {
			i := tierIndex(tiers, name)
			if i < 0 {
				return nil, fmt.Errorf("config tiers.%s: unknown tier (known: kavi, vaani, mira)", name)
			}
			tc.apply(&tiers[i])
		}
	}
	for i := range tiers {
		if err := tiers[i].Validate(); err != nil {
			return nil, fmt.Errorf("config tiers.%s.%w", tiers[i].Name, err)
		}
	}
	return tiers, nil
}

func tierIndex(tiers []hotpath.Tier, name string) int {
	for i := range tiers {
		if tiers[i].Name == name {
			return i
		}
	}
	return -1
}

func (tc tierConfig) apply(t *hotpath.Tier) {
	set(&t.Label, tc.Label)
	set(&t.Profile, tc.Profile)
	set(&t.ContextWindow, tc.ContextWindow)
	set(&t.MaxOutput, tc.MaxOutput)
	set(&t.LatencyTargetMs, tc.LatencyTargetMs)
	set(&t.Deadline, tc.Deadline)
	set(&t.SupportsTools, tc.SupportsTools)
	set(&t.SupportsVision, tc.SupportsVision)
	if r := tc.Reasoning; r != nil {
		if r.DefaultEffort != nil {
			t.DefaultEffort = hotpath.Effort(*r.DefaultEffort)
		}
		set(&t.Graded, r.Graded)
	}
	if p := tc.Prices; p != nil {
		set(&t.Prices.InputPerM, (*int64)(p.Input))
		set(&t.Prices.OutputPerM, (*int64)(p.Output))
		set(&t.Prices.CacheReadPerM, (*int64)(p.CacheRead))
	}
}

func set[T any](dst *T, v *T) {
	if v != nil {
		*dst = *v
	}
}
