package main

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/edgegw/gateway/control/outbox"
	"github.com/edgegw/gateway/hotpath"
	"github.com/edgegw/gateway/hotpath/meter"
	"github.com/edgegw/gateway/proxy"
)

// fileConfig is the --config file: the structured settings that do not fit
// in flags. Every field is optional; tiers start from the advertised
// catalogue and the file overrides what it names.
type fileConfig struct {
	Tiers     map[string]tierConfig     `yaml:"tiers"`
	Providers map[string]providerConfig `yaml:"providers"`
	// Plans and DefaultPlan are read by plans_config.go.
	Plans       map[string]planConfig `yaml:"plans"`
	DefaultPlan string                `yaml:"default_plan"`
	// SignIn is read by signin_config.go.
	SignIn signInFile `yaml:"sign_in"`
	// SMTP and PublicBaseURL are read by smtp_config.go.
	SMTP          smtpFile `yaml:"smtp"`
	PublicBaseURL string   `yaml:"public_base_url"`
	// Memory is read by memory_config.go.
	Memory memoryFile `yaml:"memory"`
	// AuxTiers overrides the auxiliary tiers (gw-embed, gw-rerank,
	// gw-guard): prices, deadline, context_window, max_output and the
	// upstream binding, with the same keys as tiers.
	AuxTiers map[string]tierConfig `yaml:"aux_tiers"`
	// Aux configures the specialised routes.
	Aux struct {
		// RerankShape is the rerank upstream's wire: cohere (default; also
		// Jina) or tei.
		RerankShape string `yaml:"rerank_shape"`
		// GuardConcurrency bounds the guard calls of one moderation
		// request. Default 8.
		GuardConcurrency int `yaml:"guard_concurrency"`
		// EmbedMaxDimensions is the largest dimensions the embed model
		// makes. Default 4096.
		EmbedMaxDimensions int `yaml:"embed_max_dimensions"`
	} `yaml:"aux"`
	// Files is read by files_config.go.
	Files filesFile `yaml:"files"`
	// Status is read by status_config.go.
	Status statusFile `yaml:"status"`
}

// providerConfig is an OpenAI-compatible endpoint. Its API key is read
// from the environment variable it names, never from the file.
type providerConfig struct {
	BaseURL   string `yaml:"base_url"`
	APIKeyEnv string `yaml:"api_key_env"`
	MaxConns  int    `yaml:"max_conns"`
}

// simProvider is the built-in name of the in-process simulator.
const simProvider = "sim"

type tierConfig struct {
	Label           *string        `yaml:"label"`
	Profile         *string        `yaml:"profile"`
	ContextWindow   *int           `yaml:"context_window"`
	MaxOutput       *int           `yaml:"max_output"`
	LatencyTargetMs *int           `yaml:"latency_target_ms"`
	Deadline        *time.Duration `yaml:"deadline"`
	SupportsTools   *bool          `yaml:"supports_tools"`
	SupportsVision  *bool          `yaml:"supports_vision"`
	Structured      *bool          `yaml:"structured_output"`
	Reasoning       *struct {
		DefaultEffort *string `yaml:"default_effort"`
		Graded        *bool   `yaml:"graded"`
	} `yaml:"reasoning"`
	Prices *struct {
		Input     *usd `yaml:"input"`
		Output    *usd `yaml:"output"`
		CacheRead *usd `yaml:"cache_read"`
	} `yaml:"prices"`

	// Upstream binding: never shown to clients.
	Provider          *string        `yaml:"provider"`
	UpstreamModel     *string        `yaml:"upstream_model"`
	SystemPrompt      *string        `yaml:"system_prompt"`
	Reasons           *bool          `yaml:"reasons"`
	StreamIdleTimeout *time.Duration `yaml:"stream_idle_timeout"`
	Retries           *int           `yaml:"retries"`
	PoolWeight        *int64         `yaml:"pool_weight"`
	// ModerationGate turns on the tier's input moderation gate
	// (docs/specialised.md).
	ModerationGate *struct {
		Categories     []string `yaml:"categories"`
		OnGuardFailure string   `yaml:"on_guard_failure"` // closed (default) or open
	} `yaml:"moderation_gate"`
}

// binding is where a tier's calls go.
type binding struct {
	Provider          string
	UpstreamModel     string
	SystemPrompt      string
	Reasons           bool
	StreamIdleTimeout time.Duration
	// Retries is nil when the file does not say: the upstream default.
	Retries *int
}

// settings is everything the config file decides.
type settings struct {
	Tiers     []hotpath.Tier
	Bindings  map[string]binding
	Providers map[string]providerConfig
	// Plans and DefaultPlan configure limits (plans_config.go); how each
	// tier meters is in Tiers (pool_weight).
	Plans       []meter.Plan
	DefaultPlan string
	// SignIn configures device login and native OAuth (signin_config.go).
	SignIn signInSettings
	// SMTP delivers invitation messages; PublicBaseURL builds their
	// accept links (smtp_config.go).
	SMTP          outbox.Config
	PublicBaseURL string
	// Memory configures chat's memory and rules (memory_config.go).
	Memory memorySettings
	// AuxTiers are the auxiliary tiers; their bindings are in Bindings.
	AuxTiers []hotpath.Tier
	// RerankShape, GuardConcurrency and EmbedMaxDimensions configure the
	// specialised routes.
	RerankShape        string
	GuardConcurrency   int
	EmbedMaxDimensions int
	// Gates are the chat tiers' input moderation gates.
	Gates map[string]proxy.GateConfig
	// Files configures uploads, their store and chat's caps
	// (files_config.go).
	Files filesSettings
	// Status configures the probes of GET /api/status (status_config.go).
	Status statusSettings
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
	s, err := loadSettings(path)
	return s.Tiers, err
}

// loadSettings reads the config file (when path is set) over the defaults:
// the advertised catalogue, every tier on the in-process simulator.
func loadSettings(path string) (settings, error) {
	tiers := hotpath.DefaultTiers()
	st := settings{Bindings: map[string]binding{}, Providers: map[string]providerConfig{}, Memory: defaultMemorySettings()}
	for _, t := range tiers {
		st.Bindings[t.Name] = binding{Provider: simProvider, UpstreamModel: "sim-" + t.Name, Reasons: t.Graded}
	}
	aux := hotpath.DefaultAuxTiers()
	st.Bindings[hotpath.TierEmbed] = binding{Provider: simProvider, UpstreamModel: "sim-embed"}
	st.Bindings[hotpath.TierRerank] = binding{Provider: simProvider, UpstreamModel: "sim-rerank"}
	st.Bindings[hotpath.TierGuard] = binding{Provider: simProvider, UpstreamModel: "guard-sim"}
	st.defaultPlans()
	var err error
	if st.Files, err = loadFiles(filesFile{}); err != nil {
		return st, err
	}
	var fc fileConfig
	if path != "" {
		raw, err := os.ReadFile(path)
		if err != nil {
			return st, fmt.Errorf("config: %w", err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(raw))
		dec.KnownFields(true)
		if err := dec.Decode(&fc); err != nil && !errors.Is(err, io.EOF) {
			return st, fmt.Errorf("config %s: %w", path, namePaths(err, raw))
		}
		// Only the first document is decoded: settings after a --- would
		// be dropped without a word.
		for {
			var doc yaml.Node
			if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				return st, fmt.Errorf("config %s: %w", path, err)
			}
			if !emptyDocument(&doc) {
				return st, fmt.Errorf("config %s: line %d: a second YAML document (after ---); put every setting in one", path, doc.Line)
			}
		}
		for name, pc := range fc.Providers {
			if name == simProvider {
				return st, fmt.Errorf("config providers.%s: the name is reserved for the built-in simulator", name)
			}
			if pc.BaseURL == "" {
				return st, fmt.Errorf("config providers.%s.base_url: must be set", name)
			}
			if pc.MaxConns < 0 {
				return st, fmt.Errorf("config providers.%s.max_conns: must not be negative", name)
			}
			st.Providers[name] = pc
		}
		for name, tc := range fc.Tiers {
			i := tierIndex(tiers, name)
			if i < 0 {
				return st, fmt.Errorf("config tiers.%s: unknown tier (known: kavi, vaani, mira)", name)
			}
			tc.apply(&tiers[i])
			b := st.Bindings[name]
			if err := tc.bind(&b, st.Providers); err != nil {
				return st, fmt.Errorf("config tiers.%s.%w", name, err)
			}
			st.Bindings[name] = b
			if g := tc.ModerationGate; g != nil {
				gc := proxy.GateConfig{Categories: g.Categories}
				switch g.OnGuardFailure {
				case "", "closed":
				case "open":
					gc.FailOpen = true
				default:
					return st, fmt.Errorf("config tiers.%s.moderation_gate.on_guard_failure: %q is not open or closed", name, g.OnGuardFailure)
				}
				if err := gc.Validate(); err != nil {
					return st, fmt.Errorf("config tiers.%s.moderation_gate.%w", name, err)
				}
				if st.Gates == nil {
					st.Gates = map[string]proxy.GateConfig{}
				}
				st.Gates[name] = gc
			}
			if tc.PoolWeight != nil {
				if *tc.PoolWeight < 0 {
					return st, fmt.Errorf("config tiers.%s.pool_weight: must not be negative", name)
				}
				tiers[i].PoolWeight = *tc.PoolWeight
			}
		}
		for name, tc := range fc.AuxTiers {
			i := tierIndex(aux, name)
			if i < 0 {
				return st, fmt.Errorf("config aux_tiers.%s: unknown auxiliary tier (known: gw-embed, gw-rerank, gw-guard)", name)
			}
			if tc.PoolWeight != nil || tc.SystemPrompt != nil || tc.Reasons != nil || tc.Reasoning != nil {
				return st, fmt.Errorf("config aux_tiers.%s: pool_weight, system_prompt, reasons and reasoning do not apply to an auxiliary tier", name)
			}
			tc.apply(&aux[i])
			b := st.Bindings[name]
			if err := tc.bind(&b, st.Providers); err != nil {
				return st, fmt.Errorf("config aux_tiers.%s.%w", name, err)
			}
			st.Bindings[name] = b
		}
		st.RerankShape, st.GuardConcurrency = fc.Aux.RerankShape, fc.Aux.GuardConcurrency
		st.EmbedMaxDimensions = fc.Aux.EmbedMaxDimensions
		if err := st.applyPlans(fc); err != nil {
			return st, err
		}
		if st.SignIn, err = loadSignIn(fc.SignIn); err != nil {
			return st, err
		}
		if st.SMTP, st.PublicBaseURL, err = loadMail(fc, st.SignIn.PublicURL); err != nil {
			return st, err
		}
		if st.Files, err = loadFiles(fc.Files); err != nil {
			return st, err
		}
		if st.Memory, err = loadMemory(fc.Memory, tiers); err != nil {
			return st, err
		}
		// Memory's vectors come from the embed tier, which makes none longer.
		if top := cmp.Or(st.EmbedMaxDimensions, proxy.DefaultEmbedMaxDimensions); st.Memory.EmbedDimensions > top {
			return st, fmt.Errorf("config memory.embed_dimensions: %d is more than aux.embed_max_dimensions (%d)",
				st.Memory.EmbedDimensions, top)
		}
	}
	for i := range tiers {
		if err := tiers[i].Validate(); err != nil {
			return st, fmt.Errorf("config tiers.%s.%w", tiers[i].Name, err)
		}
	}
	for i := range aux {
		if err := aux[i].Validate(); err != nil {
			return st, fmt.Errorf("config aux_tiers.%s.%w", aux[i].Name, err)
		}
	}
	if st.Status, err = loadStatus(fc.Status, tiers); err != nil {
		return st, err
	}
	st.Tiers, st.AuxTiers = tiers, aux
	return st, nil
}

// emptyDocument reports whether a YAML document holds nothing (a trailing
// --- or only comments).
func emptyDocument(doc *yaml.Node) bool {
	for _, n := range doc.Content {
		if n.Kind != yaml.ScalarNode || n.Tag != "!!null" {
			return false
		}
	}
	return true
}

// namePaths rewrites a decoding error's "line N: ..." messages to name the
// setting at that line, since yaml gives only the line: "tiers.kavi.deadline:
// not a duration ... (line 3)". A message whose setting cannot be told
// (a line holding several) is kept as it is.
func namePaths(err error, raw []byte) error {
	var te *yaml.TypeError
	var root yaml.Node
	if !errors.As(err, &te) || yaml.Unmarshal(raw, &root) != nil {
		return err
	}
	msgs := make([]string, len(te.Errors))
	for i, m := range te.Errors {
		msgs[i] = m
		var line int
		if _, e := fmt.Sscanf(m, "line %d:", &line); e != nil {
			continue
		}
		_, what, _ := strings.Cut(m, ": ")
		var match func(k, v *yaml.Node) bool
		if field, ok := strings.CutPrefix(what, "field "); ok && strings.Contains(field, " not found in type ") {
			field, _, _ = strings.Cut(field, " not found in type ")
			match = func(k, _ *yaml.Node) bool { return k.Value == field }
			what = "unknown setting"
		} else if _, quoted, ok := strings.Cut(what, "`"); ok {
			// "cannot unmarshal !!str `45 seconds` into time.Duration";
			// yaml shortens a long value to its start and "...".
			quoted, _, _ = strings.Cut(quoted, "`")
			quoted = strings.TrimSuffix(quoted, "...")
			match = func(_, v *yaml.Node) bool { return v.Kind == yaml.ScalarNode && strings.HasPrefix(v.Value, quoted) }
			if strings.HasSuffix(what, "into time.Duration") {
				what = "not a duration: write it with its unit, such as 45s or 2m"
			}
		} else {
			continue
		}
		if p := keyPath(&root, line, "", match); p != "" {
			msgs[i] = fmt.Sprintf("%s: %s (line %d)", p, what, line)
		}
	}
	return errors.New(strings.Join(msgs, "; "))
}

// keyPath is the dotted path of the setting at line whose key and value
// match, or "".
func keyPath(n *yaml.Node, line int, prefix string, match func(k, v *yaml.Node) bool) string {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			if p := keyPath(c, line, prefix, match); p != "" {
				return p
			}
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := k.Value
			if prefix != "" {
				p = prefix + "." + k.Value
			}
			if k.Line == line && match(k, v) {
				return p
			}
			if q := keyPath(v, line, p, match); q != "" {
				return q
			}
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			p := fmt.Sprintf("%s[%d]", prefix, i)
			if c.Line == line && match(&yaml.Node{}, c) {
				return p
			}
			if q := keyPath(c, line, p, match); q != "" {
				return q
			}
		}
	}
	return ""
}

func (tc tierConfig) bind(b *binding, providers map[string]providerConfig) error {
	set(&b.Provider, tc.Provider)
	set(&b.UpstreamModel, tc.UpstreamModel)
	set(&b.SystemPrompt, tc.SystemPrompt)
	set(&b.Reasons, tc.Reasons)
	set(&b.StreamIdleTimeout, tc.StreamIdleTimeout)
	if tc.Retries != nil {
		b.Retries = tc.Retries
	}
	if _, ok := providers[b.Provider]; !ok && b.Provider != simProvider {
		return fmt.Errorf("provider: %q is not defined under providers (or use %q)", b.Provider, simProvider)
	}
	if b.Provider != simProvider && (tc.UpstreamModel == nil || *tc.UpstreamModel == "") {
		return errors.New("upstream_model: must be set for a real provider")
	}
	if b.StreamIdleTimeout < 0 {
		return errors.New("stream_idle_timeout: must not be negative")
	}
	if b.Retries != nil && (*b.Retries < 0 || *b.Retries > 10) {
		return errors.New("retries: must be between 0 and 10")
	}
	return nil
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
	set(&t.SupportsStructured, tc.Structured)
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
