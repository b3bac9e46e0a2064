package proxy

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/bench/frameorder"
	"github.com/edgegw/gateway/hotpath"
	"github.com/edgegw/gateway/hotpath/logtest"
)

// captureStdLog collects what the standard logger prints while a test runs:
// Go's HTTP transport reports a response on an idle connection there
// ("Unsolicited response received on idle HTTP channel").
func captureStdLog(t *testing.T) *logtest.Buffer {
	t.Helper()
	buf := &logtest.Buffer{}
	prev := log.Writer()
	log.SetOutput(buf)
	t.Cleanup(func() { log.SetOutput(prev) })
	return buf
}

// Go's net/http with its default pooled transport drives streams and plain
// requests on every wire, one after another and side by side, with idle
// gaps past the read timeout and past the idle timeout between them: no
// transport error, no unsolicited response, every stream complete.
func TestNetHTTPPooledClientsSeeNoStrayBytes(t *testing.T) {
	logs := captureStdLog(t)
	f := newLifecycleFixture(t)
	tr := &http.Transport{MaxIdleConnsPerHost: 4, IdleConnTimeout: time.Minute, DisableCompression: true}
	t.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr}
	gaps := []time.Duration{0, 3 * lcRead / 2, 0, lcIdle + 300*time.Millisecond, 3 * lcRead / 2}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i, gap := range gaps {
				time.Sleep(gap)
				path := lcPaths[(w+i)%len(lcPaths)]
				body := streamBody(fmt.Sprintf("turn %d [[sim:tokens=8]]", i))
				if (w+i)%3 == 0 {
					body = lcKinds()[0].body
				}
				req, _ := http.NewRequest("POST", "http://"+f.addr+path, strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+f.key)
				resp, err := client.Do(req)
				if err != nil {
					errs <- fmt.Errorf("worker %d turn %d: %w", w, i, err)
					return
				}
				out, err := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				if err != nil || resp.StatusCode != http.StatusOK {
					errs <- fmt.Errorf("worker %d turn %d: status %d, %v: %s", w, i, resp.StatusCode, err, out)
					return
				}
				if strings.Contains(body, `"stream":true`) && !bytes.Contains(out, []byte("[DONE]")) && !bytes.Contains(out, []byte("event: finish")) {
					errs <- fmt.Errorf("worker %d turn %d: incomplete stream %q", w, i, out)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	require.NotContains(t, logs.String(), "Unsolicited")
}

// The official OpenAI Go SDK's streaming accumulator, over kept
// connections with idle gaps between turns.
func TestOpenAISDKStreamsOverKeptConnections(t *testing.T) {
	logs := captureStdLog(t)
	f := newLifecycleFixture(t)
	tr := &http.Transport{MaxIdleConnsPerHost: 2, DisableCompression: true}
	t.Cleanup(tr.CloseIdleConnections)
	client := openai.NewClient(option.WithBaseURL("http://"+f.addr+"/v1/"), option.WithAPIKey(f.key),
		option.WithMaxRetries(0), option.WithHTTPClient(&http.Client{Transport: tr}))
	for i, gap := range []time.Duration{0, 3 * lcRead / 2, 3 * lcRead / 2, lcIdle + 300*time.Millisecond, 0} {
		time.Sleep(gap)
		stream := client.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{
			Model:         "vaani",
			Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage(fmt.Sprintf("turn %d [[sim:tokens=12]]", i))},
			StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
		})
		acc := openai.ChatCompletionAccumulator{}
		for stream.Next() {
			acc.AddChunk(stream.Current())
		}
		require.NoError(t, stream.Err(), "turn %d", i)
		require.NoError(t, stream.Close())
		require.Len(t, acc.Choices, 1)
		require.NotEmpty(t, acc.Choices[0].Message.Content, "turn %d", i)
		require.Equal(t, "stop", acc.Choices[0].FinishReason)
		require.EqualValues(t, 12, acc.Usage.CompletionTokens, "turn %d", i)
	}
	require.NotContains(t, logs.String(), "Unsolicited")
}

// readStream reads a stream's body from the raw connection rc (after its
// head), line by line, and reports the body and the longest time the
// client waited for a byte.
func readStream(t *testing.T, rc *rawConn) (body []byte, longest time.Duration) {
	t.Helper()
	resp, err := http.ReadResponse(rc.br, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	r := bufio.NewReader(resp.Body)
	last := time.Now()
	for {
		line, err := r.ReadBytes('\n')
		now := time.Now()
		longest = max(longest, now.Sub(last))
		last = now
		body = append(body, line...)
		if err == io.EOF {
			return body, longest
		}
		require.NoError(t, err)
	}
}

// A tier that reasons for 40 seconds on a wire that does not show
// reasoning sends its client an SSE comment every 15 seconds (the default
// interval), which the frame grammar ignores: a load balancer with a
// 20-second idle timeout would not cut it.
func TestLongHiddenReasoningKeepsTheStreamAlive(t *testing.T) {
	t.Parallel()
	f := newChatFixture(t, func(o *fixtureOptions) {
		o.tcp = true
		o.tiers = func(ts []hotpath.Tier) {
			for i := range ts {
				ts[i].Deadline = time.Minute
			}
		}
		o.upstream = func(c *UpstreamConfig) { c.StreamIdle = time.Minute }
	})
	for _, w := range []frameorder.Wire{frameorder.V1, frameorder.OpenAIUsage} {
		t.Run(w.String(), func(t *testing.T) {
			t.Parallel()
			rc := f.dialRaw(t)
			require.NoError(t, rc.c.SetDeadline(time.Now().Add(2*time.Minute)))
			rc.send(t, f, "HTTP/1.1", "POST", w.Path(), `{"model":"kavi","stream":true,"stream_options":{"include_usage":true},`+
				`"messages":[{"role":"user","content":"think [[sim:reasoning=400]] [[sim:itl_ms=100]] [[sim:tokens=3]]"}]}`)
			body, longest := readStream(t, rc)
			require.Less(t, longest, 20*time.Second, "the client waited %s for a byte", longest)
			require.GreaterOrEqual(t, bytes.Count(body, keepAliveComment), 2)
			out := frameorder.CheckStream(w, body)
			require.True(t, out.OK(), "%+v", out)
		})
	}
}

// An upstream that says nothing at all — before its first token — wakes the
// stream's read, which sends the comment on every wire.
func TestSilentUpstreamKeepsTheStreamAlive(t *testing.T) {
	f := newChatFixture(t, func(o *fixtureOptions) {
		o.tcp = true
		o.keepAlive = 100 * time.Millisecond
		o.upstream = func(c *UpstreamConfig) { c.StreamIdle = 5 * time.Second }
	})
	for _, w := range []frameorder.Wire{frameorder.V1, frameorder.V2, frameorder.OpenAIUsage} {
		rc := f.dialRaw(t)
		rc.send(t, f, "HTTP/1.1", "POST", w.Path(), `{"model":"mira","stream":true,"stream_options":{"include_usage":true},`+
			`"messages":[{"role":"user","content":"hi [[sim:ttft_ms=700]] [[sim:tokens=3]]"}]}`)
		body, _ := readStream(t, rc)
		require.GreaterOrEqual(t, bytes.Count(body, keepAliveComment), 3, "%s: %q", w, body)
		out := frameorder.CheckStream(w, body)
		require.True(t, out.OK(), "%s: %+v", w, out)
		// The connection serves the next request.
		rc.send(t, f, "HTTP/1.1", "POST", w.Path(), streamBody("hi [[sim:tokens=2]]"))
		resp, _, err := rc.read(t)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode)
	}
}
