package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime/debug"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/edgegw/gateway/codec"
	"github.com/edgegw/gateway/hotpath"
)

// openStream takes the client connection over and runs the stream from its
// own goroutine: the upstream call (retried only while nothing has reached
// the client), then the frames, written straight to the socket. The request
// context and the server's read buffer go back before the upstream is
// called, so a stream waiting for its first token holds only its own
// state. Its body is chunked (HTTP/1.1), so the connection outlives the
// stream; an HTTP/1.0 client gets a body that ends with the connection. A
// refusal before the first byte is answered on the connection as the edge
// would answer it.
func (t *turn) openStream(ctx *fasthttp.RequestCtx, req *fasthttp.Request, c *hotpath.Call) {
	ch := t.ch
	t.chunked = ctx.Request.Header.IsHTTP11()
	t.lastConn = !t.chunked || !ch.cfg.ConnsKept || ch.serveConn == nil || ch.closing.Load() || ch.draining.Load() ||
		ctx.Request.Header.ConnectionClose()
	// The head so far — request id, version, rate headers — is the stream's
	// head or its refusal's.
	head := fasthttp.AcquireResponse()
	ctx.Response.Header.CopyTo(&head.Header)
	ctx.HijackSetNoResponse(true)
	c.Detached = true
	t.hcall = c
	ch.streams.Add(1)
	ch.open.Add(1)
	ctx.Hijack(func(conn net.Conn) {
		if ch.cfg.ConnsKept {
			// The server keeps the connection after this returns and
			// hands its request context back to its pool; the raw socket
			// leaves the server's read buffer behind for the collector,
			// once the bytes it holds past this request (a pipelined
			// request, or its start) are kept to hand back with the
			// connection. A stream only writes.
			scratch := scratchPool.Get().(*[scratchSize]byte)
			conn, t.ahead = takeOver(conn, t.ahead[:0], scratch[:])
			scratchPool.Put(scratch)
			ch.watch.add(t, conn)
			t.jconn, t.jreq, t.jresp = conn, req, head
			ch.workers.Go((*openJob)(t))
			return
		}
		t.open(conn, req, head, false)
	})
}

// openJob and writeJob run an owned stream's two halves on a worker:
// the upstream call, then the frames. Their arguments wait in the turn.
type (
	openJob  turn
	writeJob turn
)

func (j *openJob) run() {
	t := (*turn)(j)
	conn, req, head := t.jconn, t.jreq, t.jresp
	t.jconn, t.jreq, t.jresp = nil, nil, nil
	t.open(conn, req, head, true)
}

func (j *writeJob) run() {
	t := (*turn)(j)
	conn, resp := t.jconn, t.jresp
	t.jconn, t.jresp = nil, nil
	t.write(conn, resp, true)
}

// scratchSize is the buffer a stream reads its connection's buffered bytes
// with, shared through scratchPool: an open stream keeps none.
const scratchSize = 4096

var scratchPool = sync.Pool{New: func() any { return new([scratchSize]byte) }}

// open calls the upstream and either answers the refusal or starts the
// stream. owned says the stream owns conn (the server kept the connection
// for it).
func (t *turn) open(conn net.Conn, req *fasthttp.Request, head *fasthttp.Response, owned bool) {
	resp := fasthttp.AcquireResponse()
	resp.StreamBody = true
	cerr := t.callGuarded(req, resp)
	fasthttp.ReleaseRequest(req)
	if cerr == nil && t.departed.Load() {
		// The client left while the upstream call was under way:
		// nothing reached it, nothing is billed.
		cerr = codec.ErrClientClosedRequest
		t.ch.m.clientGone.Inc()
	}
	if cerr != nil {
		_ = resp.CloseBodyStream()
		fasthttp.ReleaseResponse(resp)
		if cerr == codec.ErrClientClosedRequest {
			fasthttp.ReleaseResponse(head)
			t.end(conn, nil, codec.CodeClientClosedRequest.Status(), cerr, owned, false, false)
			return
		}
		t.refuse(conn, head, cerr, owned)
		return
	}
	if t.tctx != nil {
		t.startStream()
	}
	h := &head.Header
	h.SetContentType("text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	switch {
	case !t.chunked:
		h.SetContentLength(-2) // the body ends with the connection
	case t.lastConn:
		// Still chunked, so that the last chunk says the stream ended
		// well; the connection closes after it.
		h.SetContentLength(-1)
		h.SetConnectionClose()
	default:
		h.SetContentLength(-1)
	}
	t.out = h.AppendBytes(t.out[:0])
	fasthttp.ReleaseResponse(head)
	t.mark = len(t.out) // the head goes out with the first frame
	t.beginFrame()
	if owned {
		// The frames run on another worker: this one's stack grew deep in
		// the upstream call, and an open stream would keep it; a worker
		// that ran frames before has the stack frames need.
		t.jconn, t.jresp = conn, resp
		t.ch.workers.Go((*writeJob)(t))
		return
	}
	t.write(conn, resp, false)
}

// callGuarded calls the upstream for a stream. The edge's recovery ended
// with the handler: a panic in the call is answered as the edge would
// answer it, not allowed to take the process down.
func (t *turn) callGuarded(req *fasthttp.Request, resp *fasthttp.Response) (cerr *codec.Error) {
	defer func() {
		if r := recover(); r != nil {
			t.ch.cfg.Log.Error("stream's upstream call panicked", "request_id", string(t.requestID), "panic", fmt.Sprint(r),
				"stack", string(debug.Stack()))
			cerr = codec.ErrInternal
		}
	}()
	return t.call(t.up.stream, req, resp, time.Now().Add(t.up.cfg.StreamMax))
}

// refuse answers a stream the upstream refused before its first byte: the
// whole response, in the wire's envelope, with the head the edge set. The
// body has its length, so the connection can serve the client's next
// request.
func (t *turn) refuse(conn net.Conn, head *fasthttp.Response, cerr *codec.Error, owned bool) {
	writeError(head, t.wire.envelope(), cerr, t.requestID)
	if t.lastConn {
		head.Header.SetConnectionClose()
	}
	head.Header.SetContentLength(len(head.Body()))
	t.out = head.Header.AppendBytes(t.out[:0])
	t.out = append(t.out, head.Body()...)
	status := head.StatusCode()
	fasthttp.ReleaseResponse(head)
	t.recordBeforeLast(status, cerr)
	w := clientWriter{Conn: conn, bound: t.up.cfg.StreamIdle}
	_, err := w.Write(t.out)
	keep := err == nil && t.keepConn(conn, owned)
	t.end(conn, nil, status, cerr, owned, keep, false)
}

// write runs the stream on the client connection c. A complete chunked
// stream then hands c back to the server for the client's next request, as
// does one that failed the way its wire says; any other ending (the client
// gone, a panic) closes c — which ends the client's response.
//
// Handing c back drops nothing the client sent: what the server had read
// past the stream's request was kept (t.ahead) and is read first, and what
// arrived since is still in the socket.
func (t *turn) write(c net.Conn, resp *fasthttp.Response, owned bool) {
	complete := false
	keep := false
	defer func() {
		// The edge's recovery ended with the handler; a panic here must
		// not take the process down, and must free everything.
		if r := recover(); r != nil {
			complete, keep = false, false
			t.ch.cfg.Log.Error("stream writer panicked", "request_id", string(t.requestID), "panic", fmt.Sprint(r),
				"stack", string(debug.Stack()))
		}
		status, cerr := fasthttp.StatusOK, (*codec.Error)(nil)
		if t.gone {
			// The client left: its request is logged and counted as
			// such (499, as proxies log it), whatever went out before.
			status, cerr = codec.CodeClientClosedRequest.Status(), codec.ErrClientClosedRequest
			t.ch.m.clientGone.Inc()
		}
		t.end(c, resp, status, cerr, owned, keep, complete)
	}()
	w := clientWriter{Conn: c, bound: t.up.cfg.StreamIdle}
	complete = t.pump(&w, resp)
	// The client's response ended well-formed — complete, or failed the
	// way its wire says — and nothing asked to close: the connection
	// serves the client's next request.
	keep = t.lastSent && t.keepConn(c, owned)
}

// keepConn reports whether conn, whose response ended well-formed, goes
// back to the server for the client's next request: the stream owns it,
// neither the client nor shutdown asked to close, and its deadline is
// cleared (the server sets its own). Once shutdown's grace has ended it
// goes back only when the client already began its next request behind
// the stream, whether the server had read it before the stream took the
// connection over (t.ahead) or it has arrived since (read now, without
// waiting; only during shutdown): the server then refuses that request 503
// server_shutting_down with Connection: close, as it refuses any request
// on a kept connection then, instead of the connection closing under it
// unanswered.
func (t *turn) keepConn(conn net.Conn, owned bool) bool {
	if !owned || t.lastConn {
		return false
	}
	if t.ch.closing.Load() && len(t.ahead) == 0 && !t.inputWaiting(conn) {
		return false
	}
	return conn.SetDeadline(time.Time{}) == nil
}

// inputWaiting reports whether the client has sent on conn what nobody has
// read yet: on a socket, bytes in its receive buffer, left there for the
// server; on anything else (a pipe), what it holds, moved to t.ahead.
func (t *turn) inputWaiting(conn net.Conn) bool {
	if sc, ok := conn.(syscall.Conn); ok {
		if rc, err := sc.SyscallConn(); err == nil {
			return bytesWaiting(rc)
		}
	}
	scratch := scratchPool.Get().(*[scratchSize]byte)
	t.ahead = readPending(conn, t.ahead, scratch[:])
	scratchPool.Put(scratch)
	return len(t.ahead) > 0
}

// end frees everything the stream held, once, however it ended: conn is
// closed unless keep hands it back to the server, the budgets are settled
// and the slots given back, the request is ended on its route (its ledger
// row written, unless recordBeforeLast did before the last frames), and
// the upstream response, when there is one, is read to
// its end (complete) and released.
func (t *turn) end(conn net.Conn, resp *fasthttp.Response, status int, cerr *codec.Error, owned, keep, complete bool) {
	ch := t.ch
	ch.watch.remove(t)
	t.upConn.Store(nil)
	var next net.Conn
	if owned && !keep {
		_ = conn.Close()
	} else if keep {
		kc := &keptConn{Conn: conn, idle: ch.idle, serve: ch.serveConn}
		if len(t.ahead) > 0 {
			kc.ahead = append([]byte(nil), t.ahead...)
		}
		next = kc
	}
	if t.sspan != nil {
		t.endStream(status, cerr, complete)
	}
	t.settle()
	c := t.hcall
	t.account(&c.Usage)
	c.Ender.End(c, status, cerr)
	releaseTurn(t)
	if keep && ch.closing.Load() {
		// The grace has ended (keepConn): the request waiting behind the
		// stream is refused before the stream counts as ended, since
		// shutdown waits for streams (Drain), not for the connections
		// they hand back.
		_ = ch.serveConn(next)
		keep = false
	}
	// The stream's slots are free. The client's next request is served
	// once the upstream connection is back in the pool (its next stream
	// then skips a dial), or after drainWait if the end of the upstream's
	// stream is slow to come.
	var handoff *time.Timer
	if keep {
		handoff = time.AfterFunc(drainWait, func() { _ = ch.serveConn(next) })
	}
	if resp != nil {
		if complete && owned {
			drainUpstream(resp.BodyStream())
		}
		if !complete {
			// Never pooled, whatever its body's reader last saw: a
			// departure closed it, or it stopped mid-body. An in-memory
			// connection closed here reads as a clean end of the body.
			resp.SetConnectionClose()
		}
		_ = resp.CloseBodyStream()
		fasthttp.ReleaseResponse(resp)
	}
	if keep && handoff.Stop() {
		ch.workers.Go(next.(*keptConn))
	}
	ch.open.Add(-1)
	ch.streams.Done()
}

// drainWait bounds how long a kept client connection waits for the
// upstream's stream to be read to its end before serving the client's next
// request: the chunked terminator normally follows [DONE] at once.
const drainWait = 10 * time.Millisecond

// drainUpstream reads the end of a complete upstream stream — the chunked
// body's terminator after [DONE] — so that the connection is fully read and
// can be reused. It gives up after a few KiB (the connection is then
// closed, as it would have been); the upstream connection's idle bound
// limits the wait.
func drainUpstream(body io.Reader) {
	if body == nil {
		return
	}
	var buf [512]byte
	for n := 0; n < 4096; {
		k, err := body.Read(buf[:])
		n += k
		if err != nil {
			return
		}
	}
}

// clientWriter writes frames to the client's socket. A client that stops
// reading for longer than the bound is treated as gone; the write deadline
// moves only when a quarter of the bound has passed.
type clientWriter struct {
	net.Conn
	bound time.Duration
	set   time.Time
	last  time.Time // of the last write
}

func (w *clientWriter) Write(p []byte) (int, error) {
	now := time.Now()
	w.last = now
	if w.set.Sub(now) < w.bound-w.bound/4 {
		w.set = now.Add(w.bound)
		if err := w.Conn.SetWriteDeadline(w.set); err != nil {
			return 0, err
		}
	}
	return w.Conn.Write(p)
}

var scannerPool = sync.Pool{New: func() any { return codec.NewSSEScanner(1 << 20) }}

// readChunk is the least free space the pump offers each upstream read. It
// reads straight into the scanner's buffer: no second buffer per open
// stream and no copy per frame.
const readChunk = 1024

var (
	doneData     = []byte("[DONE]")
	emptyContent = []byte(`""`)
)

// streamState is what the pump learns from the upstream.
type streamState struct {
	finish    string
	sawTools  bool
	usage     codec.Usage
	hasUsage  bool
	done      bool
	failure   *codec.Error
	firstSent bool
	firstByte bool // the first upstream bytes were read (traced streams)
	deltas    int  // content and tool-call frames sent
}

// pump copies the upstream stream to the client, rewriting every frame for
// the wire, flushing per event. It returns when the stream completes (true:
// the upstream finished and the client has every frame), fails or the
// client leaves; the caller closes the upstream body, which cancels the
// upstream call when it has not finished.
func (t *turn) pump(w *clientWriter, resp *fasthttp.Response) (complete bool) {
	began := time.Now()
	defer func() {
		t.ch.m.streamDuration.Update(time.Since(began).Seconds())
		if t.maxGap > 0 {
			t.ch.m.maxGap.Update(t.maxGap.Seconds())
		}
	}()

	// t.out holds the response head; the first frame goes out with it.
	switch t.wire {
	case chatV2:
		t.out = codec.AppendV2Start(t.out, &t.head, t.requestID, &t.routing)
		if f := t.memoryFields(); f != nil {
			t.out = codec.SpliceFields(t.out, 2, f)
		}
	case chatAnthropic:
		t.out = codec.AppendAnthropicMessageStart(t.out, &t.head)
	case chatResponses:
		t.out = t.appendResponsesStart(t.out)
	default:
		var gw []byte
		if t.wire == chatV1 {
			gw = t.gw
		}
		t.out = codec.AppendChunkRole(t.out, &t.head, gw)
	}
	if !t.flush(w) {
		t.settleBill(nil, false, t.delivered)
		return false
	}
	// The gateway's own share of opening the stream: everything until the
	// primer went out, less the time spent waiting on the upstream.
	t.ch.m.overhead.Update((time.Since(t.start) - t.upstream).Seconds())

	sc := scannerPool.Get().(*codec.SSEScanner)
	sc.Reset()
	sc.SetMaxEvent(t.up.cfg.MaxEventBytes)
	defer scannerPool.Put(sc)
	if ic, ok := resp.LocalAddr().(*idleConn); ok {
		// The departure watcher closes it when the client leaves, which
		// wakes a read of a silent upstream.
		t.upConn.Store(ic)
		if t.departed.Load() {
			t.gone = true
		}
		// Frames go out when the upstream has nothing more for the
		// moment (beforeRead), and while it is silent the read wakes to
		// keep the client's connection from going quiet (keepQuiet).
		t.cw, ic.hook = w, t
		defer func() { ic.hook, t.cw = nil, nil }()
	}
	body := resp.BodyStream()
	var st streamState
	var chunk codec.Chunk
	for !st.done && st.failure == nil && !t.gone {
		n, rerr := body.Read(sc.Space(readChunk))
		if t.departed.Load() {
			t.gone = true
		}
		if n > 0 && !t.gone {
			if t.sspan != nil && !st.firstByte {
				st.firstByte = true
				t.streamEvent(EventFirstByte)
			}
			sc.Commit(n)
			if !t.relayRead(w, sc, &chunk, &st) || !t.keepQuiet(w, time.Now()) {
				t.gone = true
			}
			if t.cw == nil && !t.flushPending(w) {
				t.gone = true // no hook to flush before the next read
			}
		}
		if t.gone {
			break
		}
		if rerr != nil && !st.done && st.failure == nil {
			switch {
			case errors.Is(rerr, io.EOF) && st.finish != "":
				// Some servers end a complete stream without [DONE].
				st.done = true
			case t.up.cut():
				st.failure = errCut // shutdown's bound passed
			case isTimeout(rerr):
				st.failure = errStreamStalled
			default:
				st.failure = errStreamBroken
			}
		}
	}
	if t.gone {
		// The client left: stop reading; closing the body cancels the
		// upstream. Bill what was delivered.
		t.settleBill(nil, false, t.delivered)
		return false
	}
	if st.failure != nil {
		t.fail(w, st.failure)
		return false
	}
	if st.finish == "" {
		st.finish = finishReason(nil, st.sawTools)
	}
	// Capture starts once the last content frame is in; its report goes
	// in the usage frame (v1) or the finish event (v2), bounded in time.
	t.startCapture()
	t.beginFrame()
	switch t.wire {
	case chatAnthropic:
		// message_delta carries the usage.
		t.settleBill(&st.usage, st.hasUsage, t.delivered)
		t.anthropicEnd()
		t.out = codec.AppendAnthropicMessageDelta(t.out, st.finish, &t.bill)
		t.out = codec.AppendAnthropicMessageStop(t.out)
		t.last = true
		return t.flush(w)
	case chatResponses:
		// The terminal event carries the usage.
		t.settleBill(&st.usage, st.hasUsage, t.delivered)
		t.answer.Finish, t.reasoningTokens = st.finish, st.usage.ReasoningTokens
		t.out = t.appendResponsesEnd(t.out)
		t.last = true
		return t.flush(w)
	}
	if t.wire == chatV2 {
		// The finish event carries the usage.
		t.settleBill(&st.usage, st.hasUsage, t.delivered)
		if st.deltas == 0 {
			// The grammar has one or more delta events: a reply with no
			// text (all budget spent thinking) says so with an empty one.
			t.out = codec.AppendV2Content(t.out, emptyContent)
		}
		t.out = codec.AppendV2Finish(t.out, st.finish, &t.bill)
		if f := t.captureField(); f != nil {
			t.out = codec.SpliceFields(t.out, 2, f)
		}
		t.last = true
		return t.flush(w)
	}
	t.out = codec.AppendChunkFinish(t.out, &t.head, st.finish)
	usageFrame := t.wire == chatV1 || t.req.StreamOptions != nil && t.req.StreamOptions.IncludeUsage
	if !st.hasUsage {
		// The usage must be counted: the finish frame goes out first, so
		// the client sees the answer end without waiting for the count.
		// The stream's last bytes ([DONE], after the usage frame if there
		// is one) follow the count: the ledger row, which holds it, is
		// kept before the answer is complete.
		if !t.flush(w) {
			t.settleBill(nil, false, t.delivered)
			return false
		}
		t.settleBill(nil, false, t.delivered)
		t.beginFrame()
	} else {
		t.settleBill(&st.usage, true)
	}
	if usageFrame {
		var gw []byte
		if f := t.captureField(); f != nil && t.wire == chatV1 {
			gw = codec.SpliceFields([]byte("{}"), 0, f)
			gw = append(gw[:1], gw[2:]...) // {,"memory_capture":…} → {"memory_capture":…}
		}
		t.out = codec.AppendChunkUsage(t.out, &t.head, &t.bill, gw)
	}
	t.out = codec.AppendDone(t.out)
	t.last = true
	return t.flush(w)
}

// relayRead turns every complete upstream event of one read into client frames,
// which wait in t.out: they go out together, as one write, when the
// upstream has nothing more for the moment (flushPending, called before the
// next upstream read would wait). It returns false when the client is gone.
func (t *turn) relayRead(w *clientWriter, sc *codec.SSEScanner, chunk *codec.Chunk, st *streamState) bool {
	for {
		ev, ok, err := sc.Next()
		if err != nil {
			st.failure = t.upstreamUnreadable(err)
			return true
		}
		if !ok {
			return true
		}
		if bytes.Equal(ev.Data, doneData) {
			st.done = true
			return true
		}
		if err := codec.ParseChunk(ev.Data, chunk); err != nil {
			st.failure = errUpstreamMalformed
			return true
		}
		if chunk.Error != nil {
			st.failure = errStreamBroken
			return true
		}
		t.beginFrame()
		if len(chunk.Reasoning) > 2 {
			t.deliver(chunk.Reasoning)
			// v2 orders reasoning before the answer; a trace fragment an
			// upstream sends after answer text has begun is billed, not shown.
			if t.reasons() && st.deltas == 0 {
				switch {
				case t.wire == chatV2:
					t.out = codec.AppendV2Reasoning(t.out, chunk.Reasoning)
				case t.wire == chatAnthropic && t.thinking:
					t.anthropicText(blockThinking, chunk.Reasoning)
				}
			}
		}
		if len(chunk.Content) > 2 {
			st.deltas++
			t.deliver(chunk.Content)
			if t.mem != nil {
				t.mem.keepAnswer(chunk.Content)
			}
			switch t.wire {
			case chatV2:
				t.out = codec.AppendV2Content(t.out, chunk.Content)
			case chatAnthropic:
				t.anthropicText(blockText, chunk.Content)
			case chatResponses:
				t.responsesText(chunk.Content)
			default:
				t.out = codec.AppendChunkContent(t.out, &t.head, chunk.Content)
			}
		}
		if chunk.ToolCalls != nil {
			st.deltas++
			st.sawTools = true
			ok := true
			switch t.wire {
			case chatV2:
				t.out = codec.AppendV2ToolCalls(t.out, chunk.ToolCalls)
			case chatAnthropic:
				ok = t.anthropicTools(chunk.ToolCalls)
			case chatResponses:
				ok = t.responsesTools(chunk.ToolCalls)
			default:
				t.out = codec.AppendChunkToolCalls(t.out, &t.head, chunk.ToolCalls)
			}
			if !ok {
				st.failure = errUpstreamMalformed
				return true
			}
		}
		if chunk.FinishReason != nil {
			st.finish = finishReason(chunk.FinishReason, st.sawTools)
		}
		if chunk.HasUsage {
			st.usage, st.hasUsage = chunk.Usage, true
		}
		if !st.firstSent && t.framed() > 0 {
			st.firstSent, t.firstPending = true, true
		}
	}
}

// deliveredKeep bounds the delivered text a stream keeps uncounted. A reply
// within its max_tokens fits (8192 tokens at 32 bytes a token), so it is
// counted at most once — at the end, and only when the upstream's usage
// never came — and never between two frames. Text past the bound (an
// upstream that sends more than it was asked for) is counted by a
// background counter, off the stream's goroutine.
const deliveredKeep = 256 << 10

// deliver keeps a delivered fragment (a JSON string literal) for counting,
// should the upstream's usage never arrive. Once the kept text passes
// deliveredKeep, a fragment that begins with a space starts a new word,
// which every tokenizer the gateway counts with treats as a token boundary:
// the text before it goes to the background counter, and the sum of the
// counts is the count of the whole text.
func (t *turn) deliver(frag []byte) {
	if len(t.delivered) >= deliveredKeep && len(frag) > 2 && frag[1] == ' ' {
		t.foldInBackground()
	}
	t.delivered = append(t.delivered, frag...)
}

// keepAliveComment is the SSE comment a quiet stream sends: every SSE
// parser ignores it, and no wire's frame grammar counts it.
var keepAliveComment = []byte(": keep-alive\n\n")

// keepQuiet sends the keep-alive comment when nothing reached the client
// for the quiet interval — a tier reasoning on a wire that does not show
// reasoning, or an upstream that says nothing — so that proxies and load
// balancers with an idle timeout do not cut the stream. It runs on the
// stream's own goroutine, after each upstream read and when a silent
// upstream's read wakes (idleConn); false means the client is gone.
func (t *turn) keepQuiet(w *clientWriter, now time.Time) bool {
	every := t.ch.quietEvery
	if every <= 0 || now.Sub(w.last) < every || t.last {
		return true
	}
	t.beginFrame()
	if t.wire == chatAnthropic {
		// Anthropic's stream keeps alive with ping events.
		t.out = codec.AppendAnthropicPing(t.out)
	} else {
		t.out = append(t.out, keepAliveComment...)
	}
	t.keepingAlive = true // not a token: no gap ends here
	if !t.flush(w) {
		t.gone = true
	}
	t.keepingAlive = false
	return !t.gone
}

// quietDue and quiet serve idleConn while this stream reads from it.
func (t *turn) quietDue() time.Time {
	if t.ch.quietEvery <= 0 {
		return farFuture
	}
	return t.cw.last.Add(t.ch.quietEvery)
}

// farFuture is a time no bound reaches.
var farFuture = time.Unix(1<<62, 0)

func (t *turn) quiet() bool { return t.keepQuiet(t.cw, time.Now()) }

// fail ends a stream that broke after it opened, the way each wire says:
// /api/v1/chat just stops; the OpenAI route sends an error frame instead of
// [DONE]; /api/v2/chat and /v1/messages send an error event;
// /v1/responses sends response.failed. What was delivered is billed.
func (t *turn) fail(w *clientWriter, cerr *codec.Error) {
	t.ch.m.streamsBroken.Inc()
	t.hcall.Usage.ErrorCode = cerr.Code.String()
	t.ch.cfg.Log.Warn("stream failed after it opened", "request_id", string(t.requestID), "tier", t.up.Tier.Name,
		"code", cerr.Code.String())
	t.settleBill(nil, false, t.delivered)
	t.beginFrame()
	switch t.wire {
	case chatOpenAI:
		t.out = codec.AppendChunkError(t.out, cerr)
	case chatV2:
		t.out = codec.AppendV2Error(t.out, cerr, t.requestID)
	case chatAnthropic:
		t.out = codec.AppendAnthropicStreamError(t.out, cerr, t.requestID)
	case chatResponses:
		t.out = t.appendResponsesFailed(t.out, cerr)
	}
	// The stream ends the way its wire says — an error frame, or on
	// /api/v1/chat no finish frame — and the HTTP body ends well-formed, so
	// the connection can serve the client's next request. (A body cut
	// without its last chunk would leave the connection to clients that
	// wrongly reuse it.)
	t.last = true
	t.flush(w)
}

// chunkRoom is the space kept in front of every frame for its chunk-size
// line: up to eight hex digits and CRLF.
const chunkRoom = 10

var lastChunk = []byte("0\r\n\r\n")

// beginFrame empties t.out for the next frames, keeping room in front for
// the chunk-size line. The response head, when it is still in t.out (before
// the first flush), stays.
func (t *turn) beginFrame() {
	if t.batch {
		return // frames not yet written: the next ones join them
	}
	t.out = t.out[:t.mark]
	if t.chunked {
		t.out = append(t.out, make([]byte, chunkRoom)...)
	}
	t.batch = true
}

// framed is how many frame bytes t.out holds.
func (t *turn) framed() int {
	if !t.batch {
		return 0
	}
	n := len(t.out) - t.mark
	if t.chunked {
		n -= chunkRoom
	}
	return n
}

// flushPending writes the frames waiting in t.out, if any; false means the
// client is gone.
func (t *turn) flushPending(w *clientWriter) bool {
	if t.framed() == 0 {
		return true
	}
	return t.flush(w)
}

// beforeRead serves idleConn: the stream's upstream is about to be read
// with nothing buffered, so the frames of what it sent so far go out now.
func (t *turn) beforeRead() bool {
	if !t.flushPending(t.cw) {
		t.gone = true
	}
	return !t.gone
}

// flush writes what t.out holds to the client in one write — the response
// head first, on the first flush — framed as one chunk (SSE framing does
// not depend on chunk boundaries, so one chunk may carry many events),
// followed by the last chunk when the stream is done; false means the
// client is gone.
func (t *turn) flush(w *clientWriter) bool {
	if t.last {
		t.recordBeforeLast(fasthttp.StatusOK, nil)
	}
	from := 0
	if t.chunked {
		if n := t.framed(); n > 0 {
			var hex [16]byte
			size := strconv.AppendUint(hex[:0], uint64(n), 16)
			from = t.mark + chunkRoom - 2 - len(size)
			copy(t.out[from:], size)
			t.out[from+len(size)], t.out[from+len(size)+1] = '\r', '\n'
			t.out = append(t.out, '\r', '\n')
			if t.mark > 0 {
				// The head goes out with the first chunk: close the gap.
				from -= copy(t.out[from-t.mark:from], t.out[:t.mark])
			}
		} else {
			t.out = t.out[:t.mark] // a chunk of size 0 would end the body
		}
		if t.last {
			t.out = append(t.out, lastChunk...)
		}
	}
	t.mark, t.batch = 0, false
	if from < len(t.out) {
		if _, err := w.Write(t.out[from:]); err != nil {
			t.gone = true
			return false
		}
	}
	if !t.keepingAlive {
		// The longest pause between two writes of frames to the client
		// (the first one, the time to first token, aside).
		if !t.lastWrite.IsZero() {
			t.maxGap = max(t.maxGap, w.last.Sub(t.lastWrite))
		}
		t.lastWrite = w.last
	}
	if t.firstPending {
		t.firstPending = false
		t.ttft = time.Since(t.start)
		t.ch.m.ttft.Update(t.ttft.Seconds())
		if t.sspan != nil {
			t.streamEvent(EventFirstSent)
		}
	}
	t.lastSent = t.last
	return true
}

// recordBeforeLast settles the stream and then writes its ledger row,
// before its last bytes go out: a client never holds a complete answer
// whose row a crash could still lose (docs/ledger.md), nor one whose slot
// is still taken. Settling first, as every ending does, keeps the row out
// of a budget counter rebuilt before the settlement, which adds the
// request's cost to such a counter itself (docs/ledger.md, "Rebuilding
// counters"). The row's status is what the client is being answered; a
// client that leaves during this last write is counted and logged as gone
// (499) but its row keeps that status: the answer was complete when it
// left the gateway. Its duration runs to this moment, and a first content
// token going out in this same write is stamped now.
func (t *turn) recordBeforeLast(status int, cerr *codec.Error) {
	c := t.hcall
	if c == nil || c.Recorded {
		return
	}
	if t.firstPending {
		t.firstPending = false
		t.ttft = time.Since(t.start)
		t.ch.m.ttft.Update(t.ttft.Seconds())
	}
	t.account(&c.Usage)
	t.settle()
	c.Ender.Record(c, status, cerr)
}

// isTimeout reports a deadline or idle bound that passed, whatever the
// connection type wraps it in.
func isTimeout(err error) bool {
	var te interface{ Timeout() bool }
	return errors.Is(err, fasthttp.ErrTimeout) || errors.As(err, &te) && te.Timeout()
}
