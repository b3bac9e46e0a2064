package load

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/edgegw/gateway/bench/scenarios"
)

// Defaults that Validate fills in.
const (
	DefaultTier     = "mira"
	DefaultWarmup   = time.Second
	DefaultDuration = 10 * time.Second
	DefaultTimeout  = 60 * time.Second
)

// LoadScenario reads a scenario: nameOrPath is a path to a YAML file (it
// ends in .yaml or .yml, or names a directory), or the name of a shipped
// scenario (ShippedScenarios). The scenario is validated, with its
// defaults filled in; its Name is the file's base name unless the file
// gives one. Unknown fields are refused.
func LoadScenario(nameOrPath string) (*Scenario, error) {
	var (
		data []byte
		err  error
	)
	name := strings.TrimSuffix(strings.TrimSuffix(filepath.Base(nameOrPath), ".yaml"), ".yml")
	if isPath(nameOrPath) {
		data, err = os.ReadFile(nameOrPath)
		if err != nil {
			return nil, fmt.Errorf("cannot read scenario: %w", err)
		}
	} else {
		data, err = scenarios.Files.ReadFile(nameOrPath + ".yaml")
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("cannot load scenario %q: no such shipped scenario (shipped: %s)",
				nameOrPath, strings.Join(ShippedScenarios(), ", "))
		}
		if err != nil {
			return nil, fmt.Errorf("cannot load scenario %q: %w", nameOrPath, err)
		}
	}
	sc, err := ParseScenario(data)
	if err != nil {
		return nil, fmt.Errorf("cannot load scenario %q: %w", nameOrPath, err)
	}
	if sc.Name == "" {
		sc.Name = name
	}
	if err := sc.Validate(); err != nil {
		return nil, err
	}
	return sc, nil
}

// isPath reports whether s names a file rather than a shipped scenario.
func isPath(s string) bool {
	return strings.HasSuffix(s, ".yaml") || strings.HasSuffix(s, ".yml") ||
		strings.ContainsRune(s, '/') || strings.ContainsRune(s, filepath.Separator)
}

// ParseScenario decodes one scenario from YAML, refusing unknown fields.
// It does not validate: call Validate.
func ParseScenario(data []byte) (*Scenario, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	sc := new(Scenario)
	if err := dec.Decode(sc); err != nil {
		return nil, fmt.Errorf("cannot decode scenario: %w", err)
	}
	return sc, nil
}

// ShippedScenarios returns the names of the scenarios shipped in
// bench/scenarios, sorted.
func ShippedScenarios() []string {
	entries, err := fs.ReadDir(scenarios.Files, ".")
	if err != nil {
		return nil
	}
	var names []string
	for _, e := range entries {
		if n, ok := strings.CutSuffix(e.Name(), ".yaml"); ok && !e.IsDir() {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names
}

// knownTiers are the public tiers a request may name.
var knownTiers = map[string]bool{"kavi": true, "vaani": true, "mira": true, "auto": true}

// knownDirectives are the simulator directive names a fault may use.
var knownDirectives = map[string]bool{
	"tokens": true, "ttft_ms": true, "itl_ms": true, "reasoning": true, "tool": true,
	"status": true, "fail_first": true, "drop_after": true, "finish": true,
	"json": true, "json_invalid": true, "unsafe": true, "fault": true,
}

// Validate checks s and fills in its defaults: one wire, openai, when none
// is given; tier mira when none is given; mode open when a rate is given
// and closed otherwise, with one client when the concurrency is unset; 10 s
// measured after a 1 s warm-up (a negative warm-up means none); a 60 s
// timeout per request. Fault keys are normalised to whole markers:
// "fault=reset" becomes "[[sim:fault=reset]]". The error names the first
// bad field by its YAML name.
func (s *Scenario) Validate() error {
	bad := func(field, format string, args ...any) error {
		name := s.Name
		if name == "" {
			name = "(unnamed)"
		}
		return fmt.Errorf("invalid scenario %s: %s: %s", name, field, fmt.Sprintf(format, args...))
	}

	if len(s.Wires) == 0 {
		s.Wires = map[Wire]float64{WireOpenAI: 1}
	}
	for w, weight := range s.Wires {
		switch w {
		case WireV1, WireV2, WireOpenAI, WireUpstream, WireAnthropic, WireResponses:
		default:
			return bad("wires", "unknown wire %q (v1, v2, openai, anthropic, responses or upstream)", w)
		}
		if err := checkWeight(weight); err != nil {
			return bad("wires."+string(w), "%v", err)
		}
	}
	if sumWeights(s.Wires) <= 0 {
		return bad("wires", "every weight is zero")
	}

	if s.Path != "" {
		if err := checkPath(s.Path); err != nil {
			return bad("path", "%v", err)
		}
		if len(s.Wires) > 1 {
			return bad("path", "applies to a single wire, not %d", len(s.Wires))
		}
	}
	if s.AuthHeader != "" {
		if _, _, err := ParseHeader(s.AuthHeader); err != nil {
			return bad("auth_header", "%v", err)
		}
	}
	if err := checkModel(s.Model); err != nil {
		return bad("model", "%v", err)
	}

	switch s.Route {
	case "":
	case RouteEmbeddings, RouteRerank, RouteModeration:
		if s.Stream || s.Tools || s.IncludeUsage {
			return bad("route", "%s takes no stream, tools or include_usage", s.Route)
		}
		if s.Route == RouteRerank && (s.Wires[WireOpenAI] > 0) {
			return bad("route", "rerank has no OpenAI route (wires v1, v2 or upstream)")
		}
		if s.Inputs == 0 {
			s.Inputs = 1
		}
		if s.Inputs < 0 || s.Inputs > 512 {
			return bad("inputs", "must be from 1 to 512")
		}
	default:
		return bad("route", "unknown route %q (embeddings, rerank or moderation)", s.Route)
	}
	if len(s.Tiers) == 0 {
		s.Tiers = map[string]float64{DefaultTier: 1}
	}
	for tier, weight := range s.Tiers {
		if !knownTiers[tier] {
			return bad("tiers", "unknown tier %q (kavi, vaani, mira or auto)", tier)
		}
		if err := checkWeight(weight); err != nil {
			return bad("tiers."+tier, "%v", err)
		}
	}
	if sumWeights(s.Tiers) <= 0 {
		return bad("tiers", "every weight is zero")
	}

	for field, v := range map[string]int{
		"prompt_words": s.PromptWords, "reply_tokens": s.ReplyTokens, "ttft_ms": s.TTFTms,
		"itl_ms": s.ITLms, "reasoning_tokens": s.ReasoningTokens, "concurrency": s.Concurrency,
		"max_requests": s.MaxRequests, "max_in_flight": s.MaxInFlight,
	} {
		if v < 0 {
			return bad(field, "must not be negative")
		}
	}
	if s.PromptWords > 1<<20 {
		return bad("prompt_words", "at most %d", 1<<20)
	}

	for kind, weight := range s.Hostile {
		if _, ok := hostileBodies[kind]; kind != "" && !ok {
			return bad("hostile", "unknown kind %q (known: %s)", kind, strings.Join(HostileKinds(), ", "))
		}
		if weight < 0 {
			return bad("hostile", "weight of %q must not be negative", kind)
		}
	}
	if len(s.Faults) > 0 {
		faults := make(map[string]float64, len(s.Faults))
		for key, weight := range s.Faults {
			marker, err := faultMarker(key)
			if err != nil {
				return bad("faults", "%q: %v", key, err)
			}
			if err := checkWeight(weight); err != nil {
				return bad("faults", "%q: %v", key, err)
			}
			faults[marker] += weight
		}
		if sumWeights(faults) <= 0 {
			return bad("faults", "every weight is zero")
		}
		s.Faults = faults
	}

	switch s.Mode {
	case "":
		if s.Rate > 0 {
			s.Mode = ModeOpen
		} else {
			s.Mode = ModeClosed
		}
	case ModeOpen, ModeClosed:
	default:
		return bad("mode", "unknown mode %q (open or closed)", s.Mode)
	}
	if math.IsNaN(s.Rate) || math.IsInf(s.Rate, 0) || s.Rate < 0 {
		return bad("rate", "must be a non-negative number")
	}
	if s.Mode == ModeOpen && s.Rate <= 0 {
		return bad("rate", "must be positive when mode is open")
	}
	if s.Mode == ModeClosed && s.Concurrency == 0 {
		s.Concurrency = 1
	}

	switch {
	case s.Warmup == 0:
		s.Warmup = DefaultWarmup
	case s.Warmup < 0:
		s.Warmup = -1 // none
	}
	switch {
	case s.Duration == 0:
		s.Duration = DefaultDuration
	case s.Duration < 0:
		return bad("duration", "must be positive")
	}
	switch {
	case s.Timeout == 0:
		s.Timeout = DefaultTimeout
	case s.Timeout < 0:
		return bad("timeout", "must be positive")
	}
	if s.SampleRSS < 0 {
		return bad("sample_rss", "must not be negative")
	}
	if s.Cooldown < 0 {
		return bad("cooldown", "must not be negative")
	}
	if s.Think < 0 {
		return bad("think", "must not be negative")
	}
	if s.Think > 0 && s.Mode != ModeClosed {
		return bad("think", "applies to the closed loop only")
	}
	return nil
}

// warmup is the warm-up to run: zero when s.Warmup is negative.
func (s *Scenario) warmup() time.Duration { return max(s.Warmup, 0) }

// expectedReply is how long a reply takes by the simulator directives the
// scenario sets (0 when it sets none).
func (s *Scenario) expectedReply() time.Duration {
	return time.Duration(s.TTFTms+(s.ReplyTokens+s.ReasoningTokens)*s.ITLms) * time.Millisecond
}

func checkWeight(w float64) error {
	if math.IsNaN(w) || math.IsInf(w, 0) || w < 0 {
		return errors.New("weight must be a non-negative number")
	}
	return nil
}

func sumWeights[K comparable](m map[K]float64) float64 {
	var sum float64
	for _, w := range m {
		sum += w
	}
	return sum
}

// faultMarker turns a fault key into the marker text added to a request:
// "" stays empty (a healthy request), "NAME=VALUE" or "NAME" is wrapped as
// [[sim:NAME=VALUE]], and text that already holds markers is kept as it is
// once each of its markers names a known directive.
func faultMarker(key string) (string, error) {
	key = strings.TrimSpace(key)
	if key == "" {
		return "", nil
	}
	if !strings.Contains(key, "[[") {
		if strings.ContainsAny(key, "[] \t\n") {
			return "", errors.New("not a directive: want NAME=VALUE or [[sim:NAME=VALUE]]")
		}
		key = "[[sim:" + key + "]]"
	}
	rest := key
	for {
		i := strings.Index(rest, "[[")
		if i < 0 {
			break
		}
		body, ok := strings.CutPrefix(rest[i:], "[[sim:")
		if !ok {
			return "", errors.New("a marker must start with \"[[sim:\"")
		}
		end := strings.Index(body, "]]")
		if end < 0 {
			return "", errors.New("unterminated marker")
		}
		name, _, _ := strings.Cut(body[:end], "=")
		if !knownDirectives[name] {
			return "", fmt.Errorf("unknown directive %q", name)
		}
		rest = body[end+2:]
	}
	return key, nil
}

// checkPath accepts a route: it starts with '/' and holds no whitespace,
// query or fragment.
func checkPath(p string) error {
	if !strings.HasPrefix(p, "/") {
		return errors.New(`must start with "/"`)
	}
	if strings.ContainsAny(p, "?# \t\r\n") {
		return errors.New("a path only: no query, fragment or whitespace")
	}
	return nil
}

// checkModel accepts a model name without control characters.
func checkModel(m string) error {
	for _, r := range m {
		if r < 0x20 || r == 0x7f {
			return errors.New("control character in model name")
		}
	}
	return nil
}

// ParseHeader splits "Name: value" into its name and value, trimmed. The
// name must be an HTTP token and the value non-empty, on one line.
func ParseHeader(h string) (name, value string, err error) {
	name, value, ok := strings.Cut(h, ":")
	name, value = strings.TrimSpace(name), strings.TrimSpace(value)
	if !ok || name == "" || value == "" {
		return "", "", errors.New(`header: want "Name: value"`)
	}
	for _, r := range name {
		if r <= ' ' || r >= 0x7f || strings.ContainsRune(`"(),/:;<=>?@[\]{}`, r) {
			return "", "", fmt.Errorf("header name %q is not a token", name)
		}
	}
	if strings.ContainsAny(value, "\r\n") {
		return "", "", fmt.Errorf("header %s: value spans lines", name)
	}
	return name, value, nil
}
