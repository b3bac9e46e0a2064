package load

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/bytedance/sonic"
	"github.com/valyala/fasthttp"

	"github.com/edgegw/gateway/bench/frameorder"
	"github.com/edgegw/gateway/codec"
)

// readChunk is the size of the buffer a call reads a response body into.
const readChunk = 4 << 10

// maxBodyKept bounds what a call keeps of a non-streaming body, to parse an
// error envelope or check that a reply is JSON; the rest is counted only.
const maxBodyKept = 1 << 20

// call is the reusable state of one request at a time: the fasthttp request
// and response, the read buffer, the SSE scanner and the frame-order
// checker. A closed-loop client owns one; an open loop takes them from a
// pool.
type call struct {
	req   fasthttp.Request
	resp  fasthttp.Response
	buf   []byte
	body  []byte
	sse   *codec.SSEScanner
	chunk codec.Chunk
	chk   frameorder.Checker
	out   outcome
}

var callPool = sync.Pool{New: func() any { return newCall() }}

func newCall() *call {
	return &call{
		buf: make([]byte, readChunk),
		sse: codec.NewSSEScanner(0),
	}
}

// reset prepares c for the next request, keeping its buffers.
func (c *call) reset() {
	c.req.Reset()
	c.resp.Reset()
	c.body = c.body[:0]
	c.sse.Reset()
	gaps := c.out.gaps[:0]
	if cap(gaps) > 1<<16 {
		gaps = nil
	}
	c.out = outcome{gaps: gaps, ttfb: -1, ttft: -1}
}

// authHeader is the header that authenticates a run's requests.
type authHeader struct{ name, value []byte }

var (
	strAuthorization = []byte("Authorization")
	strAccept        = []byte("Accept")
	strEventStream   = []byte("text/event-stream")
	strDone          = []byte("[DONE]")
	strDelta         = []byte("delta")
	strEmptyJSON     = []byte(`""`)
	strErrorKey      = []byte(`"error"`)

	strBlockDelta     = []byte("content_block_delta")
	strThinkingDelta  = []byte(`"thinking_delta"`)
	strTextDelta      = []byte("response.output_text.delta")
	strArgumentsDelta = []byte("response.function_call_arguments.delta")
)

// do sends one request of shape v and reads its answer to the end, filling
// c.out. Times are measured from start: the intended send time in an open
// loop, the actual one in a closed loop.
func (c *call) do(cl *fasthttp.HostClient, v *variant, auth authHeader, timeout time.Duration, start time.Time) {
	c.reset()
	o := &c.out
	req, resp := &c.req, &c.resp
	req.SetRequestURI(v.uri)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.SetContentType("application/json")
	if len(auth.name) > 0 {
		req.Header.SetBytesKV(auth.name, auth.value)
	}
	if v.stream {
		req.Header.SetBytesKV(strAccept, strEventStream)
	}
	req.SetBodyRaw(v.body)
	req.SetTimeout(timeout)
	resp.StreamBody = true

	err := cl.Do(req, resp)
	now := time.Now()
	if err != nil {
		o.latency = now.Sub(start)
		o.code = transportCode(err)
		return
	}
	o.ttfb = now.Sub(start)
	o.status = resp.StatusCode()
	ok := o.status >= 200 && o.status < 300

	if ok && v.stream {
		c.readStream(v, start)
		return
	}
	readErr := c.readBody()
	o.latency = time.Since(start)
	switch {
	case !ok:
		o.code = envelopeCode(c.body, o.status)
	case readErr != nil:
		o.code = CodeBadBody
		if isTimeout(readErr) {
			o.code = CodeTimeout
		}
	case len(c.body) < maxBodyKept && !json.Valid(c.body):
		o.code = CodeBadBody
	default:
		o.completed = true
	}
}

// readBody reads a whole non-streaming body, keeping up to maxBodyKept.
func (c *call) readBody() error {
	o := &c.out
	bs := c.resp.BodyStream()
	if bs == nil {
		b := c.resp.Body()
		o.bytes = int64(len(b))
		c.body = append(c.body, b[:min(len(b), maxBodyKept)]...)
		return nil
	}
	for {
		n, err := bs.Read(c.buf)
		o.bytes += int64(n)
		if room := maxBodyKept - len(c.body); room > 0 {
			c.body = append(c.body, c.buf[:min(n, room)]...)
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// readStream reads an event stream to its end, timing every frame and
// checking its order.
func (c *call) readStream(v *variant, start time.Time) {
	o := &c.out
	if v.check != 0 {
		c.chk.Reset(v.check)
	}
	var (
		last    time.Time
		done    bool   // the upstream wire's [DONE]
		errCode string // the upstream wire's error frame
		readErr error
	)
	event := func(ev codec.SSEEvent, at time.Time) {
		o.frames++
		if !last.IsZero() {
			o.gaps = append(o.gaps, int64(at.Sub(last)/time.Microsecond))
		}
		last = at
		if v.check != 0 {
			c.chk.Event(ev)
		}
		if o.ttft < 0 && isContent(v.wire, ev, &c.chunk) {
			o.ttft = at.Sub(start)
		}
		if v.wire == WireUpstream {
			switch {
			case bytes.Equal(ev.Data, strDone):
				done = true
			case errCode == "" && bytes.Contains(ev.Data, strErrorKey):
				if codec.ParseChunk(ev.Data, &c.chunk) == nil && c.chunk.Error != nil {
					errCode = errorObjectCode(c.chunk.Error)
				}
			}
		}
	}

	if bs := c.resp.BodyStream(); bs != nil {
		for {
			n, err := bs.Read(c.buf)
			at := time.Now()
			if n > 0 {
				o.bytes += int64(n)
				c.sse.Feed(c.buf[:n])
				for {
					ev, ok, serr := c.sse.Next()
					if serr != nil {
						readErr = serr
						break
					}
					if !ok {
						break
					}
					event(ev, at)
				}
			}
			if err != nil {
				if err != io.EOF {
					readErr = err
				}
				break
			}
			if readErr != nil {
				break
			}
		}
	} else {
		b := c.resp.Body()
		o.bytes = int64(len(b))
		c.sse.Feed(b)
	}
	at := time.Now()
	for {
		ev, ok, err := c.sse.Finish()
		if err != nil || !ok {
			break
		}
		event(ev, at)
	}
	o.latency = at.Sub(start)

	if v.check != 0 {
		res := c.chk.End()
		o.violation = res.Violation
		o.completed = res.Complete
		errCode = res.ErrorCode
	} else {
		o.completed = done && errCode == ""
	}
	if !o.completed {
		switch {
		case errCode != "":
			o.code = errCode
		case readErr != nil && isTimeout(readErr):
			o.code = CodeTimeout
		default:
			o.code = CodeIncomplete
		}
	}
}

// isContent reports whether ev is the first frame that counts for time to
// first token: a v2 delta event, an Anthropic content_block_delta other
// than thinking, a Responses text or arguments delta, or a chunk whose
// delta carries content or tool calls (not the empty content of the role
// primer, nor reasoning).
func isContent(w Wire, ev codec.SSEEvent, ch *codec.Chunk) bool {
	switch w {
	case WireV2:
		return bytes.Equal(ev.Event, strDelta)
	case WireAnthropic:
		return bytes.Equal(ev.Event, strBlockDelta) && !bytes.Contains(ev.Data, strThinkingDelta)
	case WireResponses:
		return bytes.Equal(ev.Event, strTextDelta) || bytes.Equal(ev.Event, strArgumentsDelta)
	}
	if len(ev.Data) == 0 || ev.Data[0] != '{' {
		return false
	}
	if codec.ParseChunk(ev.Data, ch) != nil {
		return false
	}
	return ch.ToolCalls != nil || (ch.Content != nil && !bytes.Equal(ch.Content, strEmptyJSON))
}

// envelopeCode returns the error code of an error body: "code" at the top
// level (the /api envelope), "error.code" (the OpenAI envelope) or
// "error.type" (Anthropic's), else http_STATUS.
func envelopeCode(body []byte, status int) string {
	if n, err := sonic.Get(body, "code"); err == nil {
		if s, err := n.StrictString(); err == nil && s != "" {
			return s
		}
	}
	if n, err := sonic.Get(body, "error", "code"); err == nil {
		if s, err := n.StrictString(); err == nil && s != "" {
			return s
		}
	}
	// Anthropic's envelope names a type, not a code.
	if n, err := sonic.Get(body, "error", "type"); err == nil {
		if s, err := n.StrictString(); err == nil && s != "" {
			return s
		}
	}
	return httpCode(status)
}

// errorObjectCode returns the code of a stream's error value (an object
// with a code, or a plain string), or "upstream_error".
func errorObjectCode(raw []byte) string {
	if n, err := sonic.Get(raw, "code"); err == nil {
		if s, err := n.StrictString(); err == nil && s != "" {
			return s
		}
	}
	return "upstream_error"
}

var httpCodes sync.Map // int → "http_NNN"

func httpCode(status int) string {
	if s, ok := httpCodes.Load(status); ok {
		return s.(string)
	}
	s := "http_" + strconv.Itoa(status)
	httpCodes.Store(status, s)
	return s
}

// transportCode names an error from Do: no response head.
// A connection that could not be made in time is a transport error; a
// request that waited its whole timeout for an answer, or for a free
// connection of the harness's own pool, is a timeout.
func transportCode(err error) string {
	switch {
	case errors.Is(err, fasthttp.ErrDialTimeout):
		return CodeTransport
	case errors.Is(err, fasthttp.ErrNoFreeConns), isTimeout(err):
		return CodeTimeout
	}
	return CodeTransport
}

func isTimeout(err error) bool {
	if errors.Is(err, fasthttp.ErrTimeout) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
