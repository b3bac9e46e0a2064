package filetext

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/go-pdf/fpdf"
	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/control/filetext/filetexttest"
	"github.com/edgegw/gateway/hotpath"
	"github.com/edgegw/gateway/hotpath/tokens"
)

func read(t *testing.T, r *Reader, data []byte, name string) Result {
	t.Helper()
	return r.Read(context.Background(), data, name)
}

func TestReadKinds(t *testing.T) {
	r := NewReader(Config{})
	t.Run("utf-8 text and its types", func(t *testing.T) {
		for name, want := range map[string]string{"notes.txt": "text/plain", "README.md": "text/markdown",
			"data.csv": "text/csv", "x.json": "application/json", "main.go": "text/plain"} {
			res := read(t, r, []byte("héllo, world\nline two\n"), name)
			require.Equal(t, hotpath.FileTextReady, res.Status, name)
			require.Equal(t, want, res.ContentType, name)
			require.Equal(t, "héllo, world\nline two\n", res.Text)
			require.Equal(t, tokens.Count(res.Text), res.Tokens)
		}
	})
	t.Run("the bytes decide, not the name", func(t *testing.T) {
		res := read(t, r, filetexttest.PNG(t), "innocent.txt")
		require.Equal(t, hotpath.FileTextImage, res.Status)
		require.Equal(t, "image/png", res.ContentType)
		res = read(t, r, filetexttest.PDF(t, "hi"), "photo.jpg")
		require.Equal(t, "application/pdf", res.ContentType)
	})
	t.Run("non-utf-8 text is not text", func(t *testing.T) {
		res := read(t, r, []byte("caf\xe9 au lait, latin-1 bytes"), "latin1.txt")
		require.Equal(t, hotpath.FileTextNotText, res.Status)
		require.Equal(t, ReasonUnreadable, res.Reason)
	})
	t.Run("empty and blank text has no text", func(t *testing.T) {
		for _, b := range []string{"", " \n\t "} {
			res := read(t, r, []byte(b), "empty.txt")
			require.Equal(t, hotpath.FileTextNotText, res.Status)
			require.Equal(t, ReasonNoText, res.Reason)
		}
	})
	t.Run("binary the gateway does not read", func(t *testing.T) {
		res := read(t, r, []byte("GIF89a\x01\x00\x01\x00\x00\x00\x00;"), "a.gif")
		require.Equal(t, ReasonNotExtracted, res.Reason)
		res = read(t, r, []byte("PK\x03\x04 not a word document"), "a.zip")
		require.Equal(t, ReasonNotExtracted, res.Reason)
	})
	t.Run("images", func(t *testing.T) {
		for data, ct := range map[string]string{
			string(filetexttest.PNG(t)):                "image/png",
			"\xFF\xD8\xFF\xE0\x00\x10JFIF\x00":         "image/jpeg",
			"RIFF\x24\x00\x00\x00WEBPVP8 \x18\x00\x00": "image/webp",
		} {
			res := read(t, r, []byte(data), "img")
			require.Equal(t, hotpath.FileTextImage, res.Status)
			require.Equal(t, ct, res.ContentType)
			require.Zero(t, res.Tokens)
		}
	})
	t.Run("legacy doc", func(t *testing.T) {
		res := read(t, r, filetexttest.LegacyDoc(), "old.doc")
		require.Equal(t, ReasonLegacyDoc, res.Reason)
		require.Equal(t, "application/msword", res.ContentType)
	})
}

func TestReadPDF(t *testing.T) {
	r := NewReader(Config{})
	t.Run("text in page order", func(t *testing.T) {
		res := read(t, r, filetexttest.PDF(t, "First page (with parens) and words", "Second page\nnext line"), "a.pdf")
		require.Equal(t, hotpath.FileTextReady, res.Status, res.Reason)
		require.Equal(t, 2, res.Pages)
		require.Equal(t, "First page (with parens) and words\nSecond page\nnext line", res.Text)
		require.Equal(t, tokens.Count(res.Text), res.Tokens)
	})
	t.Run("encrypted", func(t *testing.T) {
		res := read(t, r, filetexttest.EncryptedPDF(t), "locked.pdf")
		require.Equal(t, hotpath.FileTextNotText, res.Status)
		require.Equal(t, ReasonEncrypted, res.Reason)
	})
	t.Run("scanned", func(t *testing.T) {
		res := read(t, r, filetexttest.ScannedPDF(t), "scan.pdf")
		require.Equal(t, ReasonNoText, res.Reason)
		require.Equal(t, 1, res.Pages)
	})
	t.Run("corrupt", func(t *testing.T) {
		res := read(t, r, filetexttest.CorruptPDF(t), "broken.pdf")
		require.Equal(t, ReasonCorrupt, res.Reason)
		res = read(t, r, []byte("%PDF-1.7\nnothing else"), "broken.pdf")
		require.Equal(t, ReasonCorrupt, res.Reason)
	})
	t.Run("over the page bound", func(t *testing.T) {
		small := NewReader(Config{MaxPDFPages: 3})
		res := read(t, small, filetexttest.ManyPagesPDF(t, 4), "long.pdf")
		require.Equal(t, ReasonTooLarge, res.Reason)
		require.Equal(t, BoundPDFPages, res.Bound)
		require.Equal(t, 4, res.Pages)
		res = read(t, small, filetexttest.ManyPagesPDF(t, 3), "ok.pdf")
		require.Equal(t, hotpath.FileTextReady, res.Status)
	})
	t.Run("over the byte bound", func(t *testing.T) {
		pdf := filetexttest.PDF(t, "x")
		res := read(t, NewReader(Config{MaxPDFBytes: int64(len(pdf) - 1)}), pdf, "big.pdf")
		require.Equal(t, ReasonTooLarge, res.Reason)
		require.Equal(t, BoundPDFBytes, res.Bound)
	})
	t.Run("a page that inflates past the bound", func(t *testing.T) {
		long := strings.Repeat("the same line again and again\n", 2000)
		res := read(t, NewReader(Config{MaxDecodedBytes: 8 << 10}), filetexttest.PDF(t, long), "bomb.pdf")
		require.Equal(t, hotpath.FileTextNotText, res.Status)
	})
}

// pdfShowing returns a one-page PDF whose page content is content.
func pdfShowing(t *testing.T, content string) []byte {
	t.Helper()
	f := fpdf.New("P", "pt", "Letter", "")
	f.SetFont("Helvetica", "", 24)
	f.AddPage()
	f.RawWriteStr(content)
	var b bytes.Buffer
	require.NoError(t, f.Output(&b))
	return b.Bytes()
}

// PostgreSQL stores no NUL: none reaches the text, whatever the format.
func TestReadDropsNUL(t *testing.T) {
	r := NewReader(Config{})
	t.Run("utf-16 pdf strings drop control codes as winansi ones do", func(t *testing.T) {
		res := read(t, r, pdfShowing(t, "BT /F1 24 Tf 72 700 Td <FEFF004800000069> Tj ET\n"), "nul.pdf")
		require.Equal(t, hotpath.FileTextReady, res.Status, res.Reason)
		require.Equal(t, "Hi", res.Text)
		res = read(t, r, pdfShowing(t, "BT /F1 24 Tf 72 700 Td <FEFF0041000100420009004300100044> Tj ET\n"), "ctl.pdf")
		require.Equal(t, "AB\tCD", res.Text)
		res = read(t, r, pdfShowing(t, "BT /F1 24 Tf 72 700 Td <4100010942> Tj ET\n"), "winansi.pdf")
		require.Equal(t, "A\tB", res.Text)
	})
	t.Run("text and docx", func(t *testing.T) {
		res := read(t, r, []byte("a\x00b"), "nul.txt")
		require.Equal(t, ReasonNotExtracted, res.Reason, "binary by its first bytes")
		res = read(t, r, []byte(strings.Repeat("text ", 200)+"a\x00b"), "late-nul.txt")
		require.Equal(t, ReasonUnreadable, res.Reason)
		res = read(t, r, filetexttest.DOCX(t, []string{"a\x00b"}, nil), "nul.docx")
		require.Equal(t, ReasonCorrupt, res.Reason, "XML has no NUL")
	})
	t.Run("every text passes finish, which drops NUL", func(t *testing.T) {
		res := r.finish(Result{ContentType: "application/pdf", Status: hotpath.FileTextReady}, "a\x00b\x00")
		require.Equal(t, "ab", res.Text)
		require.Equal(t, tokens.Count("ab"), res.Tokens)
		res = r.finish(Result{ContentType: "application/pdf", Status: hotpath.FileTextReady}, "\x00 \x00")
		require.Equal(t, ReasonNoText, res.Reason)
	})
}

func TestReadDOCX(t *testing.T) {
	r := NewReader(Config{})
	doc := filetexttest.DOCX(t, []string{"Title & intro", "Second paragraph"}, [][]string{{"a1", "b1"}, {"a2", "b2"}})
	res := read(t, r, doc, "report.docx")
	require.Equal(t, hotpath.FileTextReady, res.Status, res.Reason)
	require.Equal(t, "application/vnd.openxmlformats-officedocument.wordprocessingml.document", res.ContentType)
	require.Equal(t, "Title & intro\nSecond paragraph\na1\tb1\na2\tb2", res.Text)

	res = read(t, r, filetexttest.DOCX(t, nil, nil), "empty.docx")
	require.Equal(t, ReasonNoText, res.Reason)

	t.Run("zip bomb stops at the bound", func(t *testing.T) {
		bomb := filetexttest.DOCXBomb(t, 4<<20)
		require.Less(t, len(bomb), 64<<10, "the bomb is small on the wire")
		start := time.Now()
		res := read(t, NewReader(Config{MaxDecodedBytes: 256 << 10}), bomb, "bomb.docx")
		require.Equal(t, ReasonUnreadable, res.Reason)
		require.Less(t, time.Since(start), 2*time.Second)
	})
	t.Run("corrupt docx", func(t *testing.T) {
		broken := append([]byte(nil), doc...)
		i := strings.Index(string(broken), "word/document.xml")
		// Damage the compressed document part after its local header.
		for j := i + 40; j < i+80 && j < len(broken); j++ {
			broken[j] ^= 0xFF
		}
		res := read(t, r, broken, "broken.docx")
		require.Equal(t, hotpath.FileTextNotText, res.Status)
		require.Contains(t, []string{ReasonCorrupt, ReasonNotExtracted}, res.Reason)
	})
}

func TestReadBoundedInTimeAndConcurrency(t *testing.T) {
	r := NewReader(Config{Concurrency: 1, Timeout: 50 * time.Millisecond})
	r.gate <- struct{}{} // every slot busy
	start := time.Now()
	res := read(t, r, filetexttest.PDF(t, "waiting"), "a.pdf")
	require.Equal(t, ReasonUnreadable, res.Reason)
	require.Less(t, time.Since(start), time.Second)
	<-r.gate
	res = read(t, r, filetexttest.PDF(t, "served"), "a.pdf")
	require.Equal(t, hotpath.FileTextReady, res.Status)
}

func TestCountBound(t *testing.T) {
	r := NewReader(Config{CountBound: 5})
	res := read(t, r, []byte(strings.Repeat("word ", 50)), "a.txt")
	require.Equal(t, hotpath.FileTextReady, res.Status)
	require.Greater(t, res.Tokens, 5)
	require.Empty(t, res.Text, "text over the counting bound is not kept")
}

var allowedReasons = map[string]bool{"": true, ReasonNoText: true, ReasonEncrypted: true, ReasonCorrupt: true,
	ReasonUnreadable: true, ReasonLegacyDoc: true, ReasonNotExtracted: true, ReasonTooLarge: true}

// FuzzRead feeds arbitrary bytes, and mutations of real documents, to the
// one entry point. Beyond not panicking: the result is one of the three
// statuses with a known reason exactly when not_text, the text is UTF-8
// and its count is the tokenizer's.
func FuzzRead(f *testing.F) {
	f.Add(filetexttest.PDF(f, "seed text"), "a.pdf")
	f.Add(filetexttest.ScannedPDF(f), "s.pdf")
	f.Add(filetexttest.DOCX(f, []string{"p"}, [][]string{{"c"}}), "d.docx")
	f.Add([]byte("plain text"), "t.txt")
	f.Add(filetexttest.LegacyDoc(), "o.doc")
	f.Add([]byte("%PDF-1.4\n1 0 obj<</Length 99999999>>stream\nBT (x) Tj ET"), "x.pdf")
	r := NewReader(Config{Timeout: 5 * time.Second, MaxDecodedBytes: 8 << 20})
	f.Fuzz(func(t *testing.T, data []byte, name string) {
		res := r.Read(context.Background(), data, name)
		switch res.Status {
		case hotpath.FileTextReady:
			require.Empty(t, res.Reason)
			require.True(t, utf8.ValidString(res.Text))
			require.NotEmpty(t, strings.TrimSpace(res.Text))
			require.Equal(t, tokens.Count(res.Text), res.Tokens)
		case hotpath.FileTextImage:
			require.Empty(t, res.Reason)
		case hotpath.FileTextNotText:
			require.NotEmpty(t, res.Reason)
			require.Empty(t, res.Text)
		default:
			t.Fatalf("status %q", res.Status)
		}
		require.True(t, allowedReasons[res.Reason], res.Reason)
		require.NotEmpty(t, res.ContentType)
	})
}
