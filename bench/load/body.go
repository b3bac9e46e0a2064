package load

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"sort"
	"strconv"
	"strings"

	"github.com/edgegw/gateway/bench/frameorder"
	"github.com/edgegw/gateway/codec"
	"github.com/edgegw/gateway/hotpath/tokens"
)

// Paths of the wires.
const (
	pathV1        = "/api/v1/chat"
	pathV2        = "/api/v2/chat"
	pathOpenAI    = "/v1/chat/completions"
	pathAnthropic = "/v1/messages"
	pathResponses = "/v1/responses"
)

// Path returns the route a wire posts to.
func (w Wire) Path() string {
	switch w {
	case WireV1:
		return pathV1
	case WireV2:
		return pathV2
	case WireAnthropic:
		return pathAnthropic
	case WireResponses:
		return pathResponses
	default:
		return pathOpenAI
	}
}

// ToolName is the function every tool-calling request declares and asks
// the simulator to call.
const ToolName = "get_weather"

// anthropicToolsJSON and responsesToolsJSON declare ToolName on the
// Anthropic and Responses wires.
const (
	toolParams         = `{"type":"object","properties":{"city":{"type":"string"},"unit":{"type":"string","enum":["celsius","fahrenheit"]}},"required":["city"]}`
	anthropicToolsJSON = `[{"name":"` + ToolName + `","description":"Current weather in a city","input_schema":` + toolParams + `}]`
	responsesToolsJSON = `[{"type":"function","name":"` + ToolName + `","description":"Current weather in a city","parameters":` + toolParams + `}]`
)

// anthropicMaxTokens is the max_tokens of every request on the Anthropic
// wire, which requires one: the largest tier cap, so that each tier
// clamps it to its own, as a request without max_tokens gets elsewhere.
const anthropicMaxTokens = 8192

// toolsJSON declares ToolName.
const toolsJSON = `[{"type":"function","function":{"name":"` + ToolName + `",` +
	`"description":"Current weather in a city","parameters":{"type":"object",` +
	`"properties":{"city":{"type":"string"},"unit":{"type":"string","enum":["celsius","fahrenheit"]}},` +
	`"required":["city"]}}}]`

// paddingSeed makes the padding words the same in every run, so that two
// runs, and the direct and proxied sides of a comparison, send the
// simulator the same text.
const paddingSeed = 0x6c6f6164

// variant is one request shape of a run: a wire, a tier and a fault, with
// its body built once and shared, read-only, by every request of that shape.
type variant struct {
	wire    Wire
	tier    string
	fault   string
	hostile string // the hostile kind, "" for an ordinary request
	uri     string // absolute URL
	body    []byte
	stream  bool
	check   frameorder.Wire // 0: no frame-order check
	weight  float64         // cumulative, over the run's variants
}

// target is a parsed base URL, with what a target or its scenario
// overrides of the requests sent to it.
type target struct {
	addr   string // host:port
	tls    bool
	prefix string // path prefix, without a trailing slash
	origin string // scheme://host[:port]
	model  string // Target.Model or Scenario.Model; empty: the wire's default
	path   string // Target.Path or Scenario.Path; empty: the wire's route
}

func parseTarget(base string) (target, error) {
	u, err := url.Parse(base)
	if err != nil {
		return target{}, fmt.Errorf("cannot parse base URL %q: %w", base, err)
	}
	var t target
	switch u.Scheme {
	case "http":
	case "https":
		t.tls = true
	default:
		return target{}, fmt.Errorf("cannot use base URL %q: scheme must be http or https", base)
	}
	if u.Host == "" {
		return target{}, fmt.Errorf("cannot use base URL %q: no host", base)
	}
	if u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return target{}, fmt.Errorf("cannot use base URL %q: only scheme, host, port and path", base)
	}
	port := u.Port()
	if port == "" {
		port = "80"
		if t.tls {
			port = "443"
		}
	}
	t.addr = net.JoinHostPort(u.Hostname(), port)
	t.prefix = strings.TrimSuffix(u.EscapedPath(), "/")
	t.origin = u.Scheme + "://" + u.Host
	return t, nil
}

// buildVariants returns the run's request shapes with cumulative weights
// (the last one is 1). wire, when set, replaces the scenario's wires.
func buildVariants(sc *Scenario, tg target, wire Wire) ([]variant, error) {
	wires := sc.Wires
	if wire != "" {
		wires = map[Wire]float64{wire: 1}
	}
	faults := sc.Faults
	if len(faults) == 0 {
		faults = map[string]float64{"": 1}
	}
	hostile := sc.Hostile
	if len(hostile) == 0 {
		hostile = map[string]float64{"": 1}
	}
	wsum, tsum, fsum, hsum := sumWeights(wires), sumWeights(sc.Tiers), sumWeights(faults), sumWeights(hostile)
	if wsum <= 0 || tsum <= 0 || fsum <= 0 || hsum <= 0 {
		return nil, errors.New("cannot build requests: scenario has no weight (call Validate)")
	}
	padding := tokens.AppendWords(nil, paddingSeed, sc.PromptWords)

	var vs []variant
	for _, w := range sortedKeys(wires) {
		for _, tier := range sortedKeys(sc.Tiers) {
			for _, fault := range sortedKeys(faults) {
				for _, kind := range sortedKeys(hostile) {
					weight := wires[w] / wsum * sc.Tiers[tier] / tsum * faults[fault] / fsum * hostile[kind] / hsum
					if weight <= 0 {
						continue
					}
					path := w.Path()
					if sc.Route != "" {
						path = auxPath(sc.Route, w)
					}
					if tg.path != "" {
						path = tg.path
					}
					v := variant{
						wire:    w,
						tier:    tier,
						fault:   fault,
						hostile: kind,
						uri:     tg.origin + tg.prefix + path,
						body:    appendBody(nil, sc, w, modelName(tg.model, w, tier), fault, padding),
						stream:  sc.Stream,
						check:   checkerWire(sc, w),
						weight:  weight,
					}
					if sc.Route != "" {
						v.body = appendAuxBody(nil, sc, w, tg.model, fault, padding)
					}
					if kind != "" {
						v.body, v.stream, v.check = hostileBody(kind, tier), false, 0
					}
					vs = append(vs, v)
				}
			}
		}
	}
	if len(vs) == 0 {
		return nil, errors.New("cannot build requests: scenario has no weight (call Validate)")
	}
	var cum float64
	for i := range vs {
		cum += vs[i].weight
		vs[i].weight = cum
	}
	for i := range vs {
		vs[i].weight /= cum
	}
	vs[len(vs)-1].weight = 1
	return vs, nil
}

func sortedKeys[K ~string](m map[K]float64) []K {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
	return keys
}

// checkerWire is the frame-order grammar a stream of wire w follows, or 0
// when it is not checked (non-streams). The upstream's plain stream is
// checked with its own, looser grammar (frameorder.Upstream), so that the
// load generator spends the same per frame on every target.
func checkerWire(sc *Scenario, w Wire) frameorder.Wire {
	if !sc.Stream {
		return 0
	}
	switch w {
	case WireV1:
		return frameorder.V1
	case WireV2:
		return frameorder.V2
	case WireOpenAI:
		if sc.IncludeUsage {
			return frameorder.OpenAIUsage
		}
		return frameorder.OpenAI
	case WireAnthropic:
		return frameorder.Anthropic
	case WireResponses:
		return frameorder.Responses
	case WireUpstream:
		return frameorder.Upstream
	}
	return 0
}

// TierPlaceholder, in a model name given to a target or a scenario, stands
// for the request's tier.
const TierPlaceholder = "{tier}"

// modelName is the model a request of tier on wire w names: model, with
// TierPlaceholder replaced by the tier, when given; else the tier on the
// gateway's wires and sim-TIER on the upstream wire (the simulator answers
// any model, and the name keeps tiers apart in its logs).
func modelName(model string, w Wire, tier string) string {
	switch {
	case model != "":
		return strings.ReplaceAll(model, TierPlaceholder, tier)
	case w == WireUpstream:
		return "sim-" + tier
	}
	return tier
}

// appendBody appends the JSON body of one request shape: one user message
// of padding words and simulator directives, the tool when the scenario
// calls tools, and the stream switches.
func appendBody(dst []byte, sc *Scenario, w Wire, model, fault string, padding []byte) []byte {
	var content []byte
	content = append(content, padding...)
	directive := func(name string, n int) {
		if n > 0 {
			content = append(content, " [[sim:"...)
			content = append(content, name...)
			content = append(content, '=')
			content = strconv.AppendInt(content, int64(n), 10)
			content = append(content, "]]"...)
		}
	}
	directive("tokens", sc.ReplyTokens)
	directive("ttft_ms", sc.TTFTms)
	directive("itl_ms", sc.ITLms)
	directive("reasoning", sc.ReasoningTokens)
	if sc.Tools {
		content = append(content, " [[sim:tool="+ToolName+"]]"...)
	}
	if fault != "" {
		// Last, so that a fault such as ttft_ms=1500 overrides the
		// scenario's own directive of that name.
		content = append(content, ' ')
		content = append(content, fault...)
	}
	if len(content) > 0 && content[0] == ' ' {
		content = content[1:]
	}

	dst = append(dst, `{"model":`...)
	dst = codec.AppendJSONString(dst, model)
	switch w {
	case WireAnthropic:
		dst = append(dst, `,"max_tokens":`...)
		dst = strconv.AppendInt(dst, anthropicMaxTokens, 10)
		dst = append(dst, `,"messages":[{"role":"user","content":`...)
		dst = codec.AppendJSONBytes(dst, content)
		dst = append(dst, `}]`...)
		if sc.Stream {
			dst = append(dst, `,"stream":true`...)
		}
		if sc.Tools {
			dst = append(dst, `,"tools":`+anthropicToolsJSON...)
		}
		return append(dst, '}')
	case WireResponses:
		dst = append(dst, `,"input":`...)
		dst = codec.AppendJSONBytes(dst, content)
		if sc.Stream {
			dst = append(dst, `,"stream":true`...)
		}
		if sc.Tools {
			dst = append(dst, `,"tools":`+responsesToolsJSON...)
		}
		return append(dst, '}')
	}
	dst = append(dst, `,"messages":[{"role":"user","content":`...)
	dst = codec.AppendJSONBytes(dst, content)
	dst = append(dst, `}]`...)
	if sc.Stream {
		dst = append(dst, `,"stream":true`...)
		if sc.IncludeUsage && (w == WireOpenAI || w == WireUpstream) {
			dst = append(dst, `,"stream_options":{"include_usage":true}`...)
		}
	}
	if sc.Tools {
		dst = append(dst, `,"tools":`...)
		dst = append(dst, toolsJSON...)
	}
	if w == WireV1 || w == WireV2 {
		if m := sc.Memory; m != nil {
			dst = append(dst, `,"memory":{"recall":`...)
			dst = strconv.AppendBool(dst, m.Recall)
			dst = append(dst, `,"capture":`...)
			dst = strconv.AppendBool(dst, m.Capture)
			dst = append(dst, '}')
		}
		if sc.Rules != nil {
			dst = append(dst, `,"rules":`...)
			dst = strconv.AppendBool(dst, *sc.Rules)
		}
	}
	return append(dst, '}')
}

// pick returns the variant of request i of a run seeded with seed: the same
// sequence of shapes whatever order the requests are sent in.
func pick(vs []variant, seed uint64, i uint64) *variant {
	if len(vs) == 1 {
		return &vs[0]
	}
	u := float64(splitmix64(seed^(i*0x9e3779b97f4a7c15))>>11) / (1 << 53)
	j := sort.Search(len(vs), func(k int) bool { return vs[k].weight > u })
	if j == len(vs) {
		j = len(vs) - 1
	}
	return &vs[j]
}

func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// The specialised routes a scenario may load instead of chat.
const (
	RouteEmbeddings = "embeddings"
	RouteRerank     = "rerank"
	RouteModeration = "moderation"
)

// auxPath is the route an aux request of wire w posts to: the gateway's
// own, or, on the upstream wire, the call the gateway makes upstream.
func auxPath(route string, w Wire) string {
	switch {
	case w == WireUpstream && route == RouteModeration:
		return pathOpenAI
	case w == WireUpstream && route == RouteRerank:
		return "/rerank"
	case w == WireUpstream:
		return "/v1/embeddings"
	case w == WireOpenAI && route == RouteModeration:
		return "/v1/moderations"
	case w == WireOpenAI:
		return "/v1/embeddings"
	case w == WireV2:
		return "/api/v2/" + auxRouteName(route)
	}
	return "/api/v1/" + auxRouteName(route)
}

func auxRouteName(route string) string {
	if route == RouteModeration {
		return "moderations"
	}
	return route
}

// appendAuxBody appends an aux request of sc.Inputs inputs of padding
// (the fault directive, if any, in the first), as the gateway's route
// takes it, or on the upstream wire as the gateway sends it upstream (the
// guard: one chat call judging the first input).
func appendAuxBody(dst []byte, sc *Scenario, w Wire, model, fault string, padding []byte) []byte {
	input := func(i int) []byte {
		text := append([]byte(nil), padding...)
		text = strconv.AppendInt(append(text, ' '), int64(i), 10)
		if fault != "" && i == 0 {
			text = append(append(text, ' '), fault...)
		}
		return text
	}
	list := func(dst []byte) []byte {
		dst = append(dst, '[')
		for i := range sc.Inputs {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = codec.AppendJSONBytes(dst, input(i))
		}
		return append(dst, ']')
	}
	if model == "" {
		model = map[string]string{RouteEmbeddings: "gw-embed", RouteRerank: "gw-rerank", RouteModeration: "gw-guard"}[sc.Route]
		if w == WireUpstream {
			model = map[string]string{RouteEmbeddings: "sim-embed", RouteRerank: "sim-rerank", RouteModeration: "guard-sim"}[sc.Route]
		}
	}
	dst = append(dst, `{"model":`...)
	dst = codec.AppendJSONString(dst, model)
	switch {
	case sc.Route == RouteRerank:
		dst = append(dst, `,"query":`...)
		dst = codec.AppendJSONBytes(dst, input(0))
		dst = append(dst, `,"documents":`...)
		dst = list(dst)
	case sc.Route == RouteModeration && w == WireUpstream:
		dst = append(dst, `,"messages":[{"role":"user","content":`...)
		dst = codec.AppendJSONBytes(dst, input(0))
		dst = append(dst, `}],"max_tokens":64,"temperature":0`...)
	default:
		dst = append(dst, `,"input":`...)
		dst = list(dst)
	}
	return append(dst, '}')
}
