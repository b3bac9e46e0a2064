package sim

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// fault kinds of [[sim:fault=KIND]].
const (
	faultNone = iota
	faultReset
	faultHang
	faultStallAfter
	faultMalformedAfter
	faultNoDone
	faultRateLimited
	faultRateLimitedBare
	faultContextLength
	faultContentFilter
)

// Bounds on directive values, so that one request cannot exhaust memory:
// a reply of maxTokens tokens holds a few MiB.
const (
	maxTokens   = 1 << 17
	maxDelayMS  = 10 * 60 * 1000
	maxToolCall = 16
)

// directives is what the [[sim:…]] markers of a text ask for. Unset
// numbers are -1.
type directives struct {
	tokens      int
	ttft, itl   time.Duration
	hasTTFT     bool
	hasITL      bool
	reasoning   int
	tools       []string
	status      int
	failFirst   int
	dropAfter   int
	finish      string
	json        bool
	jsonInvalid bool
	fault       int
	faultAfter  int // N of stall_after and malformed_after
	unsafe      bool
	hazards     []string
	garbled     bool // guard: a reply that is not a verdict
	tie         bool // rerank: every document scores the same
}

// parseDirectives reads every [[sim:NAME]] and [[sim:NAME=VALUE]] marker in
// text; a later marker overrides an earlier one of the same name. Text that
// is not a complete marker is ignored; an unknown name or a bad value is an
// error that names it.
func parseDirectives(text string) (directives, error) {
	d := directives{tokens: -1, reasoning: -1, dropAfter: -1}
	for {
		i := strings.Index(text, "[[sim:")
		if i < 0 {
			return d, nil
		}
		text = text[i+len("[[sim:"):]
		j := strings.Index(text, "]]")
		if j < 0 {
			return d, nil
		}
		body := text[:j]
		text = text[j+2:]
		name, value, hasValue := strings.Cut(body, "=")
		if err := d.set(strings.TrimSpace(name), strings.TrimSpace(value), hasValue); err != nil {
			return d, fmt.Errorf("simulator directive [[sim:%s]]: %w", body, err)
		}
	}
}

func (d *directives) set(name, value string, hasValue bool) error {
	count := func(limit int) (int, error) {
		n, err := strconv.Atoi(value)
		if err != nil || n < 0 || n > limit {
			return 0, fmt.Errorf("want an integer from 0 to %d", limit)
		}
		return n, nil
	}
	flag := func() error {
		if hasValue {
			return errors.New("takes no value")
		}
		return nil
	}
	var err error
	switch name {
	case "tokens":
		d.tokens, err = count(maxTokens)
	case "reasoning":
		d.reasoning, err = count(maxTokens)
	case "ttft_ms":
		var ms int
		ms, err = count(maxDelayMS)
		d.ttft, d.hasTTFT = time.Duration(ms)*time.Millisecond, true
	case "itl_ms":
		var ms int
		ms, err = count(maxDelayMS)
		d.itl, d.hasITL = time.Duration(ms)*time.Millisecond, true
	case "drop_after":
		d.dropAfter, err = count(maxTokens)
	case "fail_first":
		d.failFirst, err = count(1000)
	case "status":
		d.status, err = strconv.Atoi(value)
		if err != nil || d.status < 400 || d.status > 599 {
			d.status = 0
			err = errors.New("want an HTTP status from 400 to 599")
		}
	case "tool":
		d.tools = d.tools[:0]
		for n := range strings.SplitSeq(value, ",") {
			if n = strings.TrimSpace(n); n == "" {
				return errors.New("want one or more tool names separated by commas")
			}
			d.tools = append(d.tools, n)
		}
		if len(d.tools) > maxToolCall {
			err = fmt.Errorf("at most %d tools", maxToolCall)
		}
	case "finish":
		switch value {
		case "stop", "length", "content_filter", "tool_calls":
			d.finish = value
		default:
			err = errors.New("want stop, length, content_filter or tool_calls")
		}
	case "json":
		d.json, d.jsonInvalid, err = true, false, flag()
	case "json_invalid":
		d.json, d.jsonInvalid, err = false, true, flag()
	case "garbled":
		d.garbled, err = true, flag()
	case "tie":
		d.tie, err = true, flag()
	case "unsafe":
		d.unsafe, d.hazards = true, d.hazards[:0]
		for c := range strings.SplitSeq(value, ",") {
			if c = strings.TrimSpace(c); c == "" {
				continue
			}
			if !validHazard(c) {
				return fmt.Errorf("%q is not a hazard code S1 to S14", c)
			}
			d.hazards = append(d.hazards, c)
		}
	case "fault":
		err = d.setFault(value)
	default:
		err = errors.New("unknown directive")
	}
	return err
}

func (d *directives) setFault(value string) error {
	kind, n, hasN := strings.Cut(value, "=")
	var err error
	d.faultAfter = 0
	switch kind {
	case "reset":
		d.fault = faultReset
	case "hang":
		d.fault = faultHang
	case "no_done":
		d.fault = faultNoDone
	case "rate_limited":
		d.fault = faultRateLimited
	case "rate_limited_bare":
		d.fault = faultRateLimitedBare
	case "context_length":
		d.fault = faultContextLength
	case "content_filter":
		d.fault = faultContentFilter
	case "stall_after", "malformed_after":
		d.fault = faultStallAfter
		if kind == "malformed_after" {
			d.fault = faultMalformedAfter
		}
		d.faultAfter, err = strconv.Atoi(n)
		if err != nil || d.faultAfter < 0 {
			return fmt.Errorf("%s wants =N, a count of token chunks", kind)
		}
		return nil
	default:
		return fmt.Errorf("unknown fault %q", kind)
	}
	if hasN {
		return fmt.Errorf("fault %s takes no value", kind)
	}
	return err
}

// validHazard reports whether c is a guard hazard code, S1 to S14.
func validHazard(c string) bool {
	n, err := strconv.Atoi(strings.TrimPrefix(c, "S"))
	return strings.HasPrefix(c, "S") && err == nil && n >= 1 && n <= 14 && c == "S"+strconv.Itoa(n)
}
