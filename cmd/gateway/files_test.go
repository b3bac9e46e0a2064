package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/control/filetext/filetexttest"
)

// multipartBody is an upload form: the file part (when name is not empty)
// and the fields, in order.
func multipartBody(t *testing.T, filename string, content []byte, fields ...string) (string, []byte) {
	t.Helper()
	var b bytes.Buffer
	w := multipart.NewWriter(&b)
	for i := 0; i+1 < len(fields); i += 2 {
		require.NoError(t, w.WriteField(fields[i], fields[i+1]))
	}
	if filename != "" {
		h := textproto.MIMEHeader{}
		h.Set("Content-Disposition", fmt.Sprintf(`form-data; name="file"; filename=%q`, filename))
		h.Set("Content-Type", "text/plain") // the client's claim, which the gateway does not trust
		part, err := w.CreatePart(h)
		require.NoError(t, err)
		_, err = part.Write(content)
		require.NoError(t, err)
	}
	require.NoError(t, w.Close())
	return w.FormDataContentType(), b.Bytes()
}

// upload sends an upload form; fields default to purpose chat_attachment.
func (c convClient) upload(t *testing.T, filename string, content []byte, fields []string, headers ...string) resp {
	t.Helper()
	if fields == nil {
		fields = []string{"purpose", "chat_attachment"}
	}
	ctype, body := multipartBody(t, filename, content, fields...)
	return c.do(t, "POST", "/api/v1/files", string(body), append([]string{"Content-Type", ctype}, headers...)...)
}

func (c convClient) uploadText(t *testing.T, name, text string) string {
	t.Helper()
	r := c.upload(t, name, []byte(text), nil)
	require.Equal(t, 200, r.status, "%s", r.raw)
	return r.body["id"].(string)
}

// fileCounts are the file rows and stored chunks of the database.
func (ta *testApp) fileCounts(t *testing.T) (files, chunks int) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, ta.db.Pool.QueryRow(ctx, `select count(*) from files`).Scan(&files))
	require.NoError(t, ta.db.Pool.QueryRow(ctx, `select count(*) from file_chunks`).Scan(&chunks))
	return files, chunks
}

func TestFilesUploadReadListDownloadDelete(t *testing.T) {
	ta := startTestApp(t)
	ada := convTenant(t, ta, "ada@example.com")
	pdf := filetexttest.PDF(t, "Quarterly report: revenue grew.", "Page two.")
	docx := filetexttest.DOCX(t, []string{"Minutes"}, [][]string{{"who", "what"}, {"ada", "engines"}})
	for _, tc := range []struct {
		name, filename string
		content        []byte
		ctype, status  string
		reason         string
	}{
		{"markdown", "notes.md", []byte("# Notes\nplain words"), "text/markdown", "ready", ""},
		{"pdf", "report.pdf", pdf, "application/pdf", "ready", ""},
		{"docx", "minutes.docx", docx, "application/vnd.openxmlformats-officedocument.wordprocessingml.document", "ready", ""},
		{"encrypted pdf", "locked.pdf", filetexttest.EncryptedPDF(t), "application/pdf", "not_text", "encrypted"},
		{"scanned pdf", "scan.pdf", filetexttest.ScannedPDF(t), "application/pdf", "not_text", "no_text"},
		{"corrupt pdf", "broken.pdf", filetexttest.CorruptPDF(t), "application/pdf", "not_text", "corrupt"},
		{"legacy doc", "old.doc", filetexttest.LegacyDoc(), "application/msword", "not_text", "legacy_doc"},
		{"latin-1 text", "latin.txt", []byte("caf\xe9 cr\xe8me"), "text/plain", "not_text", "unreadable"},
		{"gif", "anim.gif", []byte("GIF89a\x01\x00\x01\x00\x00\x00\x00;"), "image/gif", "not_text", "not_extracted"},
		{"png named .txt", "photo.txt", filetexttest.PNG(t), "image/png", "image", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := ada.upload(t, tc.filename, tc.content, nil)
			require.Equal(t, 200, r.status, "%s", r.raw)
			f := r.body
			require.Equal(t, "file", f["object"])
			require.Equal(t, tc.filename, f["filename"])
			require.EqualValues(t, len(tc.content), f["bytes"])
			require.Equal(t, tc.ctype, f["content_type"], "sniffed, not the client's text/plain")
			require.Equal(t, "chat_attachment", f["purpose"])
			require.Equal(t, tc.status, f["text_status"])
			require.Nil(t, f["expires_at"])
			require.NotZero(t, f["created_at"])
			if tc.reason != "" {
				require.Equal(t, tc.reason, f["reason"])
			} else {
				require.NotContains(t, f, "reason")
			}
			if tc.status == "ready" {
				require.Greater(t, f["text_tokens"].(float64), float64(0))
			}
			id := f["id"].(string)
			got := ada.do(t, "GET", "/api/v1/files/"+id, nil)
			require.Equal(t, 200, got.status)
			require.Equal(t, f, got.body)
			dl := ada.do(t, "GET", "/api/v2/files/"+id+"/content", nil)
			require.Equal(t, 200, dl.status)
			require.True(t, bytes.Equal(tc.content, dl.raw), "the bytes as uploaded")
			require.Equal(t, tc.ctype, dl.header.Get("Content-Type"))
			require.Equal(t, "nosniff", dl.header.Get("X-Content-Type-Options"))
			require.Contains(t, dl.header.Get("Content-Disposition"), `attachment; filename="`+tc.filename+`"`)
		})
	}

	t.Run("a hostile filename is made safe", func(t *testing.T) {
		r := ada.upload(t, `../../etc/"quoted" name ☃.txt`, []byte("x"), nil)
		require.Equal(t, 200, r.status, "%s", r.raw)
		require.Equal(t, `"quoted" name ☃.txt`, r.body["filename"])
		dl := ada.do(t, "GET", "/api/v1/files/"+r.body["id"].(string)+"/content", nil)
		require.Equal(t, `attachment; filename="_quoted_ name _.txt"; filename*=UTF-8''%22quoted%22%20name%20%E2%98%83.txt`,
			dl.header.Get("Content-Disposition"))
	})

	t.Run("list pages newest first", func(t *testing.T) {
		var ids []string
		cursor := ""
		for page := 0; page < 10; page++ {
			r := ada.do(t, "GET", "/api/v1/files?limit=4"+cursor, nil)
			require.Equal(t, 200, r.status, "%s", r.raw)
			require.Equal(t, "list", r.body["object"])
			for _, f := range r.body["data"].([]any) {
				ids = append(ids, f.(map[string]any)["id"].(string))
			}
			if r.body["next_cursor"] == nil {
				require.Equal(t, false, r.body["has_more"])
				break
			}
			require.Equal(t, true, r.body["has_more"])
			cursor = "&cursor=" + r.body["next_cursor"].(string)
		}
		require.Len(t, ids, 11)
		r := ada.do(t, "GET", "/api/v1/files?limit=101", nil)
		requireError(t, r, 400, "invalid_request", "limit")
		r = ada.do(t, "GET", "/api/v1/files?cursor=bogus", nil)
		requireError(t, r, 400, "invalid_request", "cursor")
		r = ada.do(t, "GET", "/api/v1/files?limit=4&cursor=", nil)
		require.Equal(t, 200, r.status, "an empty cursor is the first page: %s", r.raw)
		require.Equal(t, ids[0], r.body["data"].([]any)[0].(map[string]any)["id"])
	})

	t.Run("delete", func(t *testing.T) {
		id := ada.uploadText(t, "gone.txt", "bye")
		r := ada.do(t, "DELETE", "/api/v1/files/"+id, nil)
		require.Equal(t, 200, r.status)
		require.Equal(t, true, r.body["deleted"])
		for _, p := range []string{"", "/content"} {
			requireError(t, ada.do(t, "GET", "/api/v1/files/"+id+p, nil), 404, "file_not_found")
		}
		requireError(t, ada.do(t, "DELETE", "/api/v1/files/"+id, nil), 404, "file_not_found")
		// The janitor deletes the bytes.
		n, ran, err := ta.janitor.RunOnce(context.Background())
		require.NoError(t, err)
		require.True(t, ran)
		require.Equal(t, 1, n)
	})

	t.Run("no filename or content in the logs", func(t *testing.T) {
		logs := ta.logs.String()
		require.NotContains(t, logs, "minutes.docx")
		require.NotContains(t, logs, "Quarterly report")
	})
}

func TestFilesIsolation(t *testing.T) {
	ta := startTestApp(t)
	ada := convTenant(t, ta, "ada@example.com")
	bob := convMember(t, ta, ada.orgID, "bob@example.com", "member")
	eve := convTenant(t, ta, "eve@example.com")
	adas := ada.uploadText(t, "secret.txt", "ada's secret")

	// Another user's, another organization's, a missing and a malformed
	// id: the same answer on every route.
	answers := map[string]bool{}
	for _, tc := range []struct {
		who convClient
		id  string
	}{{bob, adas}, {eve, adas}, {ada, "00000000-0000-4000-8000-000000000000"}, {ada, "not-a-file-id"}} {
		for _, rt := range []struct{ method, suffix string }{{"GET", ""}, {"GET", "/content"}, {"DELETE", ""}} {
			r := tc.who.do(t, rt.method, "/api/v1/files/"+tc.id+rt.suffix, nil)
			requireError(t, r, 404, "file_not_found")
			delete(r.body, "request_id")
			raw, _ := json.Marshal(r.body)
			answers[string(raw)] = true
		}
		pinned := []string{"Gateway-Version", "2026-10-05"}
		r := tc.who.do(t, "POST", "/api/v1/chat", map[string]any{"model": "vaani",
			"messages": []any{map[string]any{"role": "user", "content": "leak?", "file_ids": []string{tc.id}}}}, pinned...)
		requireError(t, r, 404, "file_not_found")
		require.Equal(t, tc.id, r.body["file_id"])
		conv := tc.who.create(t, nil)["id"].(string)
		r = tc.who.do(t, "POST", "/api/v1/conversations/"+conv+"/messages", map[string]any{"role": "user",
			"content": "x", "file_ids": []string{tc.id}}, "Gateway-Version", "2026-10-06")
		requireError(t, r, 404, "file_not_found")
		require.Equal(t, tc.id, r.body["file_id"])
	}
	require.Len(t, answers, 1, "one answer for every id the caller cannot read: %v", answers)
	list := bob.do(t, "GET", "/api/v1/files", nil)
	require.Empty(t, list.body["data"])

	// The files scope; read-only keys cannot write.
	noFiles := convMember(t, ta, ada.orgID, "nofiles@example.com", "member", "--scopes", "chat")
	r := noFiles.upload(t, "a.txt", []byte("x"), nil)
	requireError(t, r, 403, "key_scope_forbidden")
	require.Equal(t, "files", r.body["required_scope"])
	requireError(t, noFiles.do(t, "GET", "/api/v1/files", nil), 403, "key_scope_forbidden")
	ro := convMember(t, ta, ada.orgID, "ro@example.com", "member", "--read-only")
	requireError(t, ro.upload(t, "a.txt", []byte("x"), nil), 403, "key_read_only")
}

func TestFilesUploadRefusals(t *testing.T) {
	ta := startTestApp(t, func(c *serveConfig) {
		c.ConfigPath = writeConfig(t, "files:\n  max_file_bytes: 4096\n")
	})
	ada := convTenant(t, ta, "ada@example.com")
	nothingStored := func(t *testing.T) {
		t.Helper()
		files, chunks := ta.fileCounts(t)
		require.Zero(t, files)
		require.Zero(t, chunks)
	}
	t.Run("form", func(t *testing.T) {
		r := ada.do(t, "POST", "/api/v1/files", `{"file":"x"}`, "Content-Type", "application/json")
		requireError(t, r, 400, "invalid_request", "multipart/form-data")
		requireError(t, ada.upload(t, "a.txt", []byte("x"), []string{"purpose", "fine_tune"}), 400, "invalid_request", "purpose")
		requireError(t, ada.upload(t, "a.txt", []byte("x"), []string{}), 400, "invalid_request", "purpose")
		requireError(t, ada.upload(t, "", nil, []string{"purpose", "chat_attachment"}), 400, "invalid_request", "file")
		requireError(t, ada.upload(t, "a.txt", []byte("x"), []string{"purpose", "chat_attachment", "colour", "red"}),
			400, "invalid_request", "colour")
		ctype, body := multipartBody(t, "a.txt", []byte("x"), "purpose", "chat_attachment")
		r = ada.do(t, "POST", "/api/v1/files", string(body[:len(body)/2]), "Content-Type", ctype)
		requireError(t, r, 400, "invalid_request", "malformed")
		nothingStored(t)
	})
	t.Run("expires_in needs the 2026-10-07 pin", func(t *testing.T) {
		fields := []string{"purpose", "chat_attachment", "expires_in", "3600"}
		r := ada.upload(t, "a.txt", []byte("x"), fields)
		requireError(t, r, 400, "invalid_request", "expires_in")
		require.Equal(t, "2026-10-07", r.body["required_version"])
		r = ada.upload(t, "a.txt", []byte("x"), fields, "Gateway-Version", "2026-10-06")
		require.Equal(t, "2026-10-07", r.body["required_version"])
		for _, v := range []string{"59", "604801", "ten", "-5"} {
			r = ada.upload(t, "a.txt", []byte("x"), []string{"purpose", "chat_attachment", "expires_in", v},
				"Gateway-Version", "2026-10-07")
			requireError(t, r, 400, "invalid_request", "expires_in")
		}
		nothingStored(t)
	})
	t.Run("over the per-file limit", func(t *testing.T) {
		r := ada.upload(t, "big.txt", bytes.Repeat([]byte("a"), 4097), nil)
		requireError(t, r, 413, "payload_too_large", "4096")
		require.Equal(t, "file_bytes", r.body["bound"])
		nothingStored(t)
		r = ada.upload(t, "fits.txt", bytes.Repeat([]byte("a"), 4096), nil)
		require.Equal(t, 200, r.status, "%s", r.raw)
		require.NoError(t, ada.deleteAndSweep(t, ta, r.body["id"].(string)))
		nothingStored(t)
	})
	t.Run("a body over the route's bound is refused before it is read", func(t *testing.T) {
		conn, err := net.Dial("tcp", ta.Addr())
		require.NoError(t, err)
		defer conn.Close()
		fmt.Fprintf(conn, "POST /api/v1/files HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer %s\r\n"+
			"Content-Type: multipart/form-data; boundary=x\r\nContent-Length: %d\r\n\r\n", ada.key, 8<<20)
		res, err := http.ReadResponse(bufio.NewReader(conn), nil)
		require.NoError(t, err)
		defer res.Body.Close()
		require.Equal(t, 413, res.StatusCode)
		body, _ := io.ReadAll(res.Body)
		require.Contains(t, string(body), `"code":"payload_too_large"`)
		nothingStored(t)
	})
	t.Run("an interrupted upload stores nothing", func(t *testing.T) {
		ctype, body := multipartBody(t, "a.txt", bytes.Repeat([]byte("z"), 3000), "purpose", "chat_attachment")
		conn, err := net.Dial("tcp", ta.Addr())
		require.NoError(t, err)
		fmt.Fprintf(conn, "POST /api/v1/files HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer %s\r\n"+
			"Content-Type: %s\r\nContent-Length: %d\r\n\r\n", ada.key, ctype, len(body))
		_, err = conn.Write(body[:len(body)/2])
		require.NoError(t, err)
		require.NoError(t, conn.Close())
		time.Sleep(100 * time.Millisecond) // nothing to wait for: nothing may appear
		nothingStored(t)
	})
}

func (c convClient) deleteAndSweep(t *testing.T, ta *testApp, id string) error {
	t.Helper()
	require.Equal(t, 200, c.do(t, "DELETE", "/api/v1/files/"+id, nil).status)
	_, _, err := ta.janitor.RunOnce(context.Background())
	return err
}

// clock is a settable clock for the app.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func TestFilesExpiry(t *testing.T) {
	clk := &clock{now: time.Now()}
	ta := startTestApp(t, func(c *serveConfig) { c.now = clk.Now })
	ada := convTenant(t, ta, "ada@example.com")
	r := ada.upload(t, "brief.txt", []byte("lives a minute"), []string{"purpose", "chat_attachment", "expires_in", "60"},
		"Gateway-Version", "2026-10-07")
	require.Equal(t, 200, r.status, "%s", r.raw)
	id := r.body["id"].(string)
	require.EqualValues(t, clk.Now().Unix()+60, r.body["expires_at"])
	keep := ada.uploadText(t, "keep.txt", "lives until deleted")
	conv := ada.create(t, nil)["id"].(string)
	ada.appendMsgPinned(t, conv, id)

	clk.Advance(59 * time.Second)
	require.Equal(t, 200, ada.do(t, "GET", "/api/v1/files/"+id, nil).status)
	n, _, err := ta.janitor.RunOnce(context.Background())
	require.NoError(t, err)
	require.Zero(t, n, "nothing is due yet")

	// From the second the record names on, the file is gone: the clock
	// stands on that whole second, not a fraction past it.
	clk.mu.Lock()
	clk.now = time.Unix(int64(r.body["expires_at"].(float64)), 0)
	clk.mu.Unlock()
	for _, p := range []string{"", "/content"} {
		requireError(t, ada.do(t, "GET", "/api/v1/files/"+id+p, nil), 404, "file_not_found")
	}
	requireError(t, ada.do(t, "DELETE", "/api/v1/files/"+id, nil), 404, "file_not_found")
	list := ada.do(t, "GET", "/api/v1/files", nil)
	require.Len(t, list.body["data"], 1)
	r = ada.do(t, "POST", "/api/v1/chat", map[string]any{"model": "vaani",
		"messages": []any{map[string]any{"role": "user", "content": "?", "file_ids": []string{id}}}}, "Gateway-Version", "2026-10-05")
	requireError(t, r, 404, "file_not_found")

	// The janitor deletes the bytes and detaches the file from messages.
	n, ran, err := ta.janitor.RunOnce(context.Background())
	require.NoError(t, err)
	require.True(t, ran)
	require.Equal(t, 1, n)
	files, chunks := ta.fileCounts(t)
	require.Equal(t, 1, files)
	require.Equal(t, 1, chunks, "only the live file's bytes remain")
	msgs := ada.read(t, conv, "")["messages"].(map[string]any)["data"].([]any)
	require.Equal(t, []any{}, msgs[0].(map[string]any)["file_ids"])
	require.Equal(t, 200, ada.do(t, "GET", "/api/v1/files/"+keep, nil).status)
}

func (c convClient) appendMsgPinned(t *testing.T, conv string, ids ...string) map[string]any {
	t.Helper()
	r := c.do(t, "POST", "/api/v1/conversations/"+conv+"/messages", map[string]any{"role": "user", "content": "see",
		"file_ids": ids}, "Gateway-Version", "2026-10-06")
	require.Equal(t, 201, r.status, "%s", r.raw)
	return r.body
}

func TestConversationFiles(t *testing.T) {
	ta := startTestApp(t)
	ada := convTenant(t, ta, "ada@example.com")
	a, b := ada.uploadText(t, "a.txt", "only here"), ada.uploadText(t, "b.txt", "in two conversations")
	c1, c2 := ada.create(t, nil)["id"].(string), ada.create(t, nil)["id"].(string)
	ada.appendMsgPinned(t, c1, a, b)
	ada.appendMsgPinned(t, c2, b)

	// Deleting a file removes it from the messages that listed it.
	gone := ada.uploadText(t, "gone.txt", "soon deleted")
	// An id in upper case names the same file, stored as the file's id.
	m := ada.appendMsgPinned(t, c2, strings.ToUpper(gone), b)
	require.Equal(t, []any{gone, b}, m["message"].(map[string]any)["file_ids"])
	require.Equal(t, 200, ada.do(t, "DELETE", "/api/v1/files/"+gone, nil).status)
	msgs := ada.read(t, c2, "")["messages"].(map[string]any)["data"].([]any)
	require.Equal(t, []any{b}, msgs[1].(map[string]any)["file_ids"])

	// Deleting a conversation deletes the chat_attachment files no other
	// conversation's message attaches.
	require.Equal(t, 204, ada.do(t, "DELETE", "/api/v1/conversations/"+c1, nil).status)
	requireError(t, ada.do(t, "GET", "/api/v1/files/"+a, nil), 404, "file_not_found")
	require.Equal(t, 200, ada.do(t, "GET", "/api/v1/files/"+b, nil).status)
}

func TestChatWithUploadedFiles(t *testing.T) {
	ta := startTestApp(t)
	ada := convTenant(t, ta, "ada@example.com")
	pin := []string{"Gateway-Version", "2026-10-05"}
	report := ada.upload(t, "report.pdf", filetexttest.PDF(t, strings.Repeat("The engine computes Bernoulli numbers. ", 40)), nil)
	require.Equal(t, 200, report.status, "%s", report.raw)
	id := report.body["id"].(string)
	tokens := int(report.body["text_tokens"].(float64))
	ask := func(path string, stream bool, ids ...string) resp {
		msg := map[string]any{"role": "user", "content": "summarise"}
		if len(ids) > 0 {
			msg["file_ids"] = ids
		}
		return ada.do(t, "POST", path, map[string]any{"model": "vaani", "stream": stream, "messages": []any{msg}}, pin...)
	}
	base := ask("/api/v1/chat", false)
	with := ask("/api/v1/chat", false, id)
	require.Equal(t, 200, with.status, "%s", with.raw)
	in := func(r resp) int { return int(r.body["usage"].(map[string]any)["input_tokens"].(float64)) }
	require.GreaterOrEqual(t, in(with)-in(base), tokens, "the file's text is billed as input")

	v2 := ask("/api/v2/chat", false, id)
	require.Equal(t, 200, v2.status, "%s", v2.raw)
	require.Equal(t, in(with), in(v2))
	for _, path := range []string{"/api/v1/chat", "/api/v2/chat"} {
		s := ask(path, true, id)
		require.Equal(t, 200, s.status, "%s", s.raw)
		require.True(t, strings.Contains(string(s.raw), "[DONE]") || strings.Contains(string(s.raw), "event: finish"), "%s", s.raw)
	}

	scan := ada.upload(t, "scan.pdf", filetexttest.ScannedPDF(t), nil).body["id"].(string)
	r := ask("/api/v1/chat", false, scan)
	requireError(t, r, 400, "file_not_text")
	require.Equal(t, "no_text", r.body["reason"])
	require.Equal(t, "scan.pdf", r.body["filename"])

	long := ada.upload(t, "long.pdf", filetexttest.ManyPagesPDF(t, 501), nil)
	require.Equal(t, "not_text", long.body["text_status"], "%s", long.raw)
	r = ask("/api/v1/chat", false, long.body["id"].(string))
	requireError(t, r, 400, "file_too_large")
	require.Equal(t, "pdf_pages", r.body["bound"])
	require.EqualValues(t, 500, r.body["limit"])

	img := ada.upload(t, "pic.png", filetexttest.PNG(t), nil).body["id"].(string)
	r = ada.do(t, "POST", "/api/v1/chat", map[string]any{"model": "mira",
		"messages": []any{map[string]any{"role": "user", "content": "what is it", "file_ids": []string{img}}}}, pin...)
	requireError(t, r, 400, "image_not_supported")
	require.Equal(t, []any{"kavi", "vaani"}, r.body["vision_tiers"])
}

// The S3-compatible store, configured in the file, serves the same routes.
func TestFilesOnS3Store(t *testing.T) {
	backend := s3mem.New()
	require.NoError(t, backend.CreateBucket("gw-files"))
	srv := httptest.NewServer(gofakes3.New(backend).Server())
	t.Cleanup(srv.Close)
	t.Setenv("TEST_S3_SECRET", "s3-secret")
	ta := startTestApp(t, func(c *serveConfig) {
		c.ConfigPath = writeConfig(t, fmt.Sprintf(`files:
  s3:
    endpoint: %s
    bucket: gw-files
    region: us-east-1
    access_key_id: test
    secret_access_key_env: TEST_S3_SECRET
    insecure: true
`, srv.Listener.Addr().String()))
	})
	ada := convTenant(t, ta, "ada@example.com")
	pdf := filetexttest.PDF(t, "stored in a bucket")
	r := ada.upload(t, "b.pdf", pdf, nil)
	require.Equal(t, 200, r.status, "%s", r.raw)
	id := r.body["id"].(string)
	dl := ada.do(t, "GET", "/api/v1/files/"+id+"/content", nil)
	require.True(t, bytes.Equal(pdf, dl.raw))
	_, chunks := ta.fileCounts(t)
	require.Zero(t, chunks, "the bytes are in the bucket, not PostgreSQL")
	objs, err := backend.ListBucket("gw-files", nil, gofakes3.ListBucketPage{})
	require.NoError(t, err)
	require.Len(t, objs.Contents, 1)
	require.NoError(t, ada.deleteAndSweep(t, ta, id))
	objs, err = backend.ListBucket("gw-files", nil, gofakes3.ListBucketPage{})
	require.NoError(t, err)
	require.Empty(t, objs.Contents, "the janitor deleted the object")

	// The store away: 503, and nothing readable is left behind; the
	// pending record waits for the janitor to delete whatever reached
	// the store.
	srv.Close()
	r = ada.upload(t, "c.txt", []byte("no bucket"), nil)
	requireError(t, r, 503, "service_unavailable")
	require.Empty(t, ada.do(t, "GET", "/api/v1/files", nil).body["data"])
	var pending int
	require.NoError(t, ta.db.Pool.QueryRow(context.Background(),
		`select count(*) from files where state = 'pending'`).Scan(&pending))
	require.Equal(t, 1, pending)
	require.NotContains(t, ta.logs.String(), "c.txt")
}
