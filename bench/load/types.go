// Package load is the bench harness's load generator: it runs a scenario
// against one or more targets (the upstream directly, the gateway, a
// reference proxy, another gateway), open-loop or closed-loop, measures every
// request as a client sees it (latency, time to first byte and first token,
// every inter-frame gap), checks every stream's frame order, and keeps the
// figures in HDR histograms.
package load

import (
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Wire is the chat wire a scenario speaks.
type Wire string

// The wires. WireUpstream is the plain OpenAI route of an upstream server
// (what the simulator serves): the "direct" side of a comparison.
const (
	WireV1       Wire = "v1"       // POST /api/v1/chat
	WireV2       Wire = "v2"       // POST /api/v2/chat
	WireOpenAI   Wire = "openai"   // POST /v1/chat/completions on the gateway
	WireUpstream Wire = "upstream" // POST /v1/chat/completions on an upstream
	// The two wires that speak other vendors' APIs on the gateway.
	WireAnthropic Wire = "anthropic" // POST /v1/messages
	WireResponses Wire = "responses" // POST /v1/responses
)

// Mode is how arrivals are generated.
type Mode string

const (
	// ModeOpen sends at a fixed rate whatever the answers do; latency is
	// measured from each request's intended send time, so a stall cannot
	// hide behind requests that were never sent (no coordinated omission).
	ModeOpen Mode = "open"
	// ModeClosed runs N clients, each sending its next request when the
	// previous one ends.
	ModeClosed Mode = "closed"
)

// Scenario is one load shape, read from a YAML file.
type Scenario struct {
	Name        string `yaml:"name"`
	Description string `yaml:"description"`

	// Wires weights the wires requests go to; one entry is the usual case.
	Wires map[Wire]float64 `yaml:"wires"`
	// Tiers weights the model named in requests (kavi, vaani, mira, auto).
	Tiers  map[string]float64 `yaml:"tiers"`
	Stream bool               `yaml:"stream"`

	// Model, when set, is the model every request names instead of its
	// tier (or sim-TIER on the upstream wire), for a gateway that names
	// models its own way: "openai/sim-mira"; "{tier}" in it stands for the
	// tier: "openai/sim-{tier}". A target's own model overrides it.
	Model string `yaml:"model"`
	// Path, when set, is the route every request is posted to, after the
	// target's base URL path, instead of its wire's: "/chat/completions".
	// It needs a single wire. A target's own path overrides it.
	Path string `yaml:"path"`
	// AuthHeader, when set, is sent with every request to a target that
	// brings no key or header of its own: "x-api-key: k1",
	// "Authorization: Bearer k1".
	AuthHeader string `yaml:"auth_header"`
	// Route, when set, loads a specialised route instead of chat:
	// "embeddings", "rerank" or "moderation". The gateway's wires post to
	// /api/v1/<route> (v1, v2) or the OpenAI route (openai: /v1/embeddings,
	// /v1/moderations); the upstream wire posts what the gateway would send
	// its upstream (the simulator's /v1/embeddings, /rerank, or one guard
	// chat call), so a comparison measures the gateway's own cost.
	Route string `yaml:"route"`
	// Inputs is how many inputs (documents for rerank) an aux request
	// carries, each of PromptWords words. Default 1.
	Inputs int `yaml:"inputs"`
	// IncludeUsage asks for the usage frame on the OpenAI wires.
	IncludeUsage bool `yaml:"include_usage"`
	// Memory, when set, is sent as the memory switch of native-wire
	// requests ({"recall":true,"capture":false}); Rules as their rules
	// switch.
	Memory *struct {
		Recall  bool `yaml:"recall" json:"recall"`
		Capture bool `yaml:"capture" json:"capture"`
	} `yaml:"memory"`
	Rules *bool `yaml:"rules"`

	// PromptWords pads the user message to about this many words.
	PromptWords int `yaml:"prompt_words"`
	// ReplyTokens, TTFTms, ITLms and ReasoningTokens become simulator
	// directives ([[sim:tokens=N]] and so on).
	ReplyTokens     int  `yaml:"reply_tokens"`
	TTFTms          int  `yaml:"ttft_ms"`
	ITLms           int  `yaml:"itl_ms"`
	ReasoningTokens int  `yaml:"reasoning_tokens"`
	Tools           bool `yaml:"tools"` // declare a tool and ask the simulator to call it
	// Faults weights extra directives ([[sim:fault=reset]], [[sim:status=503]],
	// ...) mixed into requests; the empty directive "" is a healthy request.
	Faults map[string]float64 `yaml:"faults"`
	// Hostile weights hostile requests mixed into the traffic by kind
	// (HostileKinds); "" is an ordinary request. Hostile requests are sent
	// and counted apart (Result.Hostile), never in the latency figures, so
	// the report shows what ordinary traffic saw beside them.
	Hostile map[string]float64 `yaml:"hostile"`

	Mode        Mode    `yaml:"mode"`
	Rate        float64 `yaml:"rate"`        // requests per second (open loop)
	Poisson     bool    `yaml:"poisson"`     // exponential gaps instead of constant ones
	Concurrency int     `yaml:"concurrency"` // clients (closed loop)
	// Think is how long a closed-loop client waits after each answer before
	// its next request, its connection idle in the pool meanwhile: pooled
	// clients leave kept connections idle like this between turns, and a
	// gap past the server's read timeout shows whether it writes on them.
	Think time.Duration `yaml:"think"`
	// MaxInFlight caps the requests an open loop keeps in flight; a request
	// due while the cap is reached is not sent and counts as an error with
	// code harness_backlog. Default: four times what the rate and the
	// expected reply time need, at least 16.
	MaxInFlight int           `yaml:"max_in_flight"`
	Warmup      time.Duration `yaml:"warmup"`       // sent but not reported; negative: none
	Duration    time.Duration `yaml:"duration"`     // measured window, after the warm-up
	MaxRequests int           `yaml:"max_requests"` // stop after this many measured requests (0: no bound)
	Timeout     time.Duration `yaml:"timeout"`      // per request; default 60s

	// SampleRSS samples the gateway's resident memory (by pid or URL of
	// its /metrics) every interval, for soak runs.
	SampleRSS time.Duration `yaml:"sample_rss"`
	// Cooldown keeps sampling resident memory this long after the load
	// has ended (its in-flight requests done or abandoned), with nothing
	// sent: memory must come back down, not just stop climbing. It only
	// applies where memory is sampled.
	Cooldown time.Duration `yaml:"cooldown"`
}

// Target is one base URL to load: the upstream directly or a proxy in
// front of it.
type Target struct {
	Name    string // "direct", "gateway", "refproxy", ...
	BaseURL string // http://127.0.0.1:8080
	Key     string // Bearer key; empty for an upstream that needs none
	// Wire overrides the scenario's wires: the direct side of a comparison
	// always speaks WireUpstream.
	Wire Wire
	// PID, when set, lets soak runs sample the target's resident memory,
	// and is the target's own process when Procs is empty.
	PID int
	// Procs are the processes whose CPU time over the target's measured
	// window (until its last request ended), and resident memory at its
	// end, the target's result reports
	// (Result.CPU): its own process, and those it drives (its upstream,
	// its database), measured over the same window. Each counts with its
	// descendants. Empty: PID alone, when set, as the target's own.
	Procs []Proc

	// Model, when set, is the model every request names, in place of the
	// tier (gateway wires) or sim-TIER (the upstream wire); "{tier}" in it
	// is replaced by the request's tier: "openai/sim-{tier}". It overrides
	// the scenario's model.
	Model string
	// Path, when set, is the route requests are posted to, after the base
	// URL's own path, in place of the wire's: "/chat/completions". It
	// overrides the scenario's path.
	Path string
	// AuthHeader, when set, is the header that authenticates every
	// request, "Name: value" ("x-api-key: k1", "Authorization: Bearer
	// k1"), in place of the Authorization header Key makes. A target with
	// neither sends the scenario's auth_header, if any.
	AuthHeader string
}

// Proc is a process measured beside a target.
type Proc struct {
	Name string // "gateway", "simulator", "postgres"
	PID  int
	// Own marks the target's own process (the proxy or gateway measured);
	// the others are processes it drives, shown beside it.
	Own bool
	// Alone measures the process without its descendants: the load
	// generator, whose children are the targets it compares.
	Alone bool
}

// ProcCost is what one process (with its descendants) cost over a
// target's measured window: what a fleet is sized by.
type ProcCost struct {
	Name string `json:"name"`
	PID  int    `json:"pid"`
	Own  bool   `json:"own"`
	// CPU is user plus system time, from /proc/PID/stat in clock ticks
	// of 10 ms, from the start of the measured window (of every round of
	// a comparison) to the end of its last request: the work of the
	// requests the result counts, the warm-up's left out.
	CPU time.Duration `json:"cpu_ns"`
	// PerKRequests is CPU seconds per 1,000 completed requests, and
	// PerKFrames per 1,000 stream frames the client received (0 without
	// frames).
	PerKRequests float64 `json:"cpu_s_per_1k_requests"`
	PerKFrames   float64 `json:"cpu_s_per_1k_frames,omitempty"`
	// RSS is the resident memory at the end of the target's last measured
	// window, and Processes how many processes the tree held then.
	RSS       int64 `json:"rss_bytes"`
	Processes int   `json:"processes"`
}

// Histograms hold microseconds, from 1 µs to 10 minutes, 3 significant
// figures.
func NewHistogram() *hdrhistogram.Histogram {
	return hdrhistogram.New(1, int64(10*time.Minute/time.Microsecond), 3)
}

// Result is what one target did under one scenario, for the measured
// window only.
type Result struct {
	Scenario string        `json:"scenario"`
	Target   string        `json:"target"`
	BaseURL  string        `json:"base_url"`
	Started  time.Time     `json:"started"`
	Elapsed  time.Duration `json:"elapsed_ns"`

	// Hostile counts the measured hostile requests, apart from Requests,
	// and HostileByStatus their answers.
	Hostile         int64         `json:"hostile,omitempty"`
	HostileByStatus map[int]int64 `json:"hostile_by_status,omitempty"`

	Requests  int64            `json:"requests"`
	Completed int64            `json:"completed"` // 2xx and, for streams, a complete stream
	Errors    int64            `json:"errors"`    // transport errors, non-2xx, broken streams
	ByStatus  map[int]int64    `json:"by_status"`
	ByCode    map[string]int64 `json:"by_code"` // error codes from envelopes and stream error frames
	Bytes     int64            `json:"bytes"`
	Frames    int64            `json:"frames"`
	// Connections is how many connections the client opened during the
	// measured window: a target that closes its connection after every
	// response (or stream) costs one per request.
	Connections int64 `json:"connections"`
	// Throughput is completed requests per second of the measured window.
	Throughput float64 `json:"throughput_rps"`

	// Latency is from the intended send time (open loop) or the actual send
	// time (closed loop) to the last byte.
	Latency    *hdrhistogram.Histogram `json:"-"`
	TTFB       *hdrhistogram.Histogram `json:"-"` // to the first response byte
	TTFT       *hdrhistogram.Histogram `json:"-"` // to the first content (or tool-call) frame
	InterFrame *hdrhistogram.Histogram `json:"-"` // every gap between two frames of a stream

	// FrameViolations counts streams whose frames broke their wire's
	// grammar; the first few are kept whole for a human to read.
	FrameViolations int64    `json:"frame_violations"`
	FirstViolations []string `json:"first_violations,omitempty"`

	// RSS samples (bytes) when the scenario asks for them.
	RSS []RSSSample `json:"rss,omitempty"`

	// Rounds is how many interleaved rounds Compare ran (0 for Run).
	Rounds int `json:"rounds,omitempty"`

	// CPU is, for each process measured beside the target (Target.Procs),
	// what it cost over the measured window; absent when none was given
	// or none could be read.
	CPU []ProcCost `json:"cpu,omitempty"`
	// CPUs is how busy each CPU of the machine the processes run on was
	// over the same window; absent with CPU.
	CPUs []CPUBusy `json:"cpus,omitempty"`
}

// RSSSample is one reading of a process's resident memory.
type RSSSample struct {
	At    time.Duration `json:"at_ns"` // since the run started
	Bytes int64         `json:"bytes"`
	// After is set on the samples of the cooldown: taken after the load
	// ended, with nothing sent.
	After bool `json:"after_load"`
}

// Percentiles are the ones every report shows.
var Percentiles = []float64{50, 90, 99, 99.9, 100}
