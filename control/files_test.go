package control

import (
	"bytes"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"
)

func formCtx(ctype string, body []byte) *fasthttp.RequestCtx {
	var ctx fasthttp.RequestCtx
	ctx.Request.Header.SetContentType(ctype)
	ctx.Request.SetBody(body)
	return &ctx
}

const uploadType = "multipart/form-data; boundary=XyZ"

func part(name, filename, content string) string {
	disp := `form-data; name="` + name + `"`
	if filename != "" {
		disp += `; filename="` + filename + `"`
	}
	return "--XyZ\r\nContent-Disposition: " + disp + "\r\n\r\n" + content + "\r\n"
}

func TestParseUploadForm(t *testing.T) {
	ok := part("purpose", "", "chat_attachment") + part("file", "a.txt", "hello\r\nworld") + "--XyZ--\r\n"
	ctx := formCtx(uploadType, []byte("preamble\r\n"+ok))
	form, cerr := parseUploadForm(ctx)
	require.Nil(t, cerr)
	require.Equal(t, "a.txt", form.filename)
	require.Equal(t, "hello\r\nworld", string(form.content))
	require.Equal(t, "chat_attachment", form.purpose)
	body := ctx.PostBody()
	require.True(t, &body[bytes.Index(body, []byte("hello"))] == &form.content[0], "the file is a slice of the body, not a copy")

	for name, tc := range map[string]struct{ ctype, body, msg string }{
		"not multipart":      {"application/json", ok, "multipart/form-data"},
		"no boundary":        {"multipart/form-data", ok, "multipart/form-data"},
		"no closing":         {uploadType, part("purpose", "", "chat_attachment") + part("file", "a", "x"), "malformed"},
		"no delimiter":       {uploadType, "just bytes", "malformed"},
		"repeated part":      {uploadType, part("purpose", "", "chat_attachment") + part("purpose", "", "x") + "--XyZ--", "more than once"},
		"unknown part":       {uploadType, part("colour", "", "red") + "--XyZ--", "colour"},
		"file without name":  {uploadType, part("purpose", "", "chat_attachment") + part("file", "", "x") + "--XyZ--", "file"},
		"no file":            {uploadType, part("purpose", "", "chat_attachment") + "--XyZ--", "file"},
		"bad expires_in":     {uploadType, part("expires_in", "", "soon") + "--XyZ--", "expires_in"},
		"encoded part":       {uploadType, "--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a\"\r\nContent-Transfer-Encoding: base64\r\n\r\neA==\r\n--XyZ--", "Content-Transfer-Encoding"},
		"many parts":         {uploadType, strings.Repeat(part("x", "", ""), 9) + "--XyZ--", "\"x\""},
		"huge part header":   {uploadType, "--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"" + strings.Repeat("a", 9000) + "\"\r\n\r\nx\r\n--XyZ--", "malformed"},
		"directory filename": {uploadType, part("purpose", "", "chat_attachment") + part("file", "dir/", "x") + "--XyZ--", "filename"},
	} {
		t.Run(name, func(t *testing.T) {
			_, cerr := parseUploadForm(formCtx(tc.ctype, []byte(tc.body)))
			require.NotNil(t, cerr)
			require.Equal(t, 400, cerr.Status())
			require.Contains(t, cerr.Message, tc.msg)
		})
	}
}

func TestCleanFilename(t *testing.T) {
	for in, want := range map[string]string{
		"report.pdf": "report.pdf", `C:\Users\ada\report.pdf`: "report.pdf", "../../etc/passwd": "passwd",
		"tab\there.txt": "tabhere.txt", " spaced.txt ": "spaced.txt", "☃.md": "☃.md",
	} {
		got, ok := cleanFilename(in)
		require.True(t, ok, in)
		require.Equal(t, want, got)
	}
	for _, in := range []string{"", "dir/", "..", ".", "\x00", "bad\xff.txt", strings.Repeat("a", 256)} {
		_, ok := cleanFilename(in)
		require.False(t, ok, "%q", in)
	}
}

func TestFileCursorRoundTrip(t *testing.T) {
	at := time.UnixMicro(1795694319123456)
	k, ok := decodeFileCursor(encodeFileCursor(at, "0b5e3a9e-6f1c-4e5b-9a1d-2f6a7c8d9e0f"))
	require.True(t, ok)
	require.True(t, at.Equal(k.CreatedAt))
	for _, bad := range []string{"", "!!", "Zg", encodeFileCursor(at, "not-a-uuid")} {
		_, ok := decodeFileCursor(bad)
		require.False(t, ok, bad)
	}
}

// FuzzParseUploadForm: whatever the body, the parser answers a form or a
// 400; a form's file is a slice of the body and its filename a clean one.
func FuzzParseUploadForm(f *testing.F) {
	f.Add([]byte(part("purpose", "", "chat_attachment") + part("file", "a.txt", "x") + "--XyZ--"))
	f.Add([]byte(part("file", "../a", "") + "--XyZ--"))
	f.Add([]byte("--XyZ\r\n\r\n\r\n--XyZ--"))
	f.Fuzz(func(t *testing.T, body []byte) {
		ctx := formCtx(uploadType, body)
		form, cerr := parseUploadForm(ctx)
		if cerr != nil {
			require.Equal(t, 400, cerr.Status())
			return
		}
		require.True(t, utf8.ValidString(form.filename))
		require.LessOrEqual(t, len(form.filename), 255)
		require.NotContains(t, form.filename, "/")
		require.False(t, strings.ContainsFunc(form.filename, unicode.IsControl))
		require.NotEmpty(t, form.purpose)
		require.True(t, bytes.Contains(ctx.PostBody(), form.content))
	})
}
