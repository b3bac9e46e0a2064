// Package filetext reads the text of an uploaded file once, at upload: it
// sniffs the type from the bytes (never the client's word), reads UTF-8
// text, PDF and Word (.docx) documents, recognizes images, and says why a
// file has no text when it has none. Every stage is bounded in bytes,
// pages, time and concurrency, so a hostile file costs at most its bound.
package filetext

import (
	"bytes"
	"context"
	"net/http"
	"path"
	"runtime"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/edgegw/gateway/codec"
	"github.com/edgegw/gateway/hotpath"
	"github.com/edgegw/gateway/hotpath/tokens"
)

// Reasons a file has no text (text_status not_text).
const (
	ReasonNoText       = "no_text"       // a document without a text layer, such as a scanned PDF
	ReasonEncrypted    = "encrypted"     // a password-protected PDF or Word document
	ReasonCorrupt      = "corrupt"       // a PDF or .docx whose structure cannot be parsed
	ReasonUnreadable   = "unreadable"    // text that is not UTF-8, or a document over a reading bound
	ReasonLegacyDoc    = "legacy_doc"    // a Word 97-2003 .doc
	ReasonNotExtracted = "not_extracted" // a type the gateway stores but does not read
	// ReasonTooLarge is a PDF over the page or byte bound; chat answers it
	// file_too_large naming the bound.
	ReasonTooLarge = "too_large"
)

// Bounds a PDF may exceed; Result.Bound names the one it did.
const (
	BoundPDFPages = "pdf_pages"
	BoundPDFBytes = "pdf_bytes"
)

// Config bounds the reading.
type Config struct {
	// MaxPDFPages is the most pages of a PDF read. Default 500.
	MaxPDFPages int
	// MaxPDFBytes is the largest PDF read. Default 64 MiB.
	MaxPDFBytes int64
	// MaxDecodedBytes bounds what a document decompresses to: a PDF's
	// streams, a .docx's document part. Default 256 MiB.
	MaxDecodedBytes int64
	// CountBound is the most tokens counted; the text of a file over it
	// is not kept (no per-file cap may exceed it). Default 1,000,000.
	CountBound int
	// Timeout bounds reading one document. Default 20s.
	Timeout time.Duration
	// Concurrency is the most documents read at once in the process.
	// Default the number of CPUs.
	Concurrency int
}

// Validate fills in defaults.
func (c *Config) Validate() error {
	if c.MaxPDFPages <= 0 {
		c.MaxPDFPages = 500
	}
	if c.MaxPDFBytes <= 0 {
		c.MaxPDFBytes = 64 << 20
	}
	if c.MaxDecodedBytes <= 0 {
		c.MaxDecodedBytes = 256 << 20
	}
	if c.CountBound <= 0 {
		c.CountBound = 1_000_000
	}
	if c.Timeout <= 0 {
		c.Timeout = 20 * time.Second
	}
	if c.Concurrency <= 0 {
		c.Concurrency = runtime.NumCPU()
	}
	return nil
}

// Result is what was read from a file.
type Result struct {
	// ContentType is the sniffed media type.
	ContentType string
	// Status is hotpath.FileTextReady, FileTextNotText or FileTextImage.
	Status string
	// Reason says why Status is not_text.
	Reason string
	// Bound names the PDF bound a too_large file exceeds.
	Bound string
	// Text is the text read; empty when Status is not ready or the count
	// passed CountBound. For a text file it is a view of the data Read was
	// given, valid only as long as that data.
	Text string
	// Tokens counts Text; past CountBound it is only known to exceed it.
	Tokens int
	// Pages is a PDF's page count, 0 for other types.
	Pages int
}

// Reader reads files under one Config; it holds the concurrency gate.
type Reader struct {
	cfg  Config
	gate chan struct{}
}

// NewReader returns a Reader; cfg is validated.
func NewReader(cfg Config) *Reader {
	_ = cfg.Validate()
	return &Reader{cfg: cfg, gate: make(chan struct{}, cfg.Concurrency)}
}

// Read reads data, uploaded under filename (whose extension only refines
// the media type of text). It never fails: a file that cannot be read is a
// Result with a reason. A document that takes longer than the timeout, or
// that waits that long for a free slot, is unreadable; the work it started
// runs on, holding its slot, until it stops at its other bounds.
func (r *Reader) Read(ctx context.Context, data []byte, filename string) Result {
	kind, ctype := sniff(data, filename)
	switch kind {
	case kindText:
		// Read in place: a text file is not copied to be counted.
		return r.finish(Result{ContentType: ctype, Status: hotpath.FileTextReady}, codec.StringView(data))
	case kindImage:
		return Result{ContentType: ctype, Status: hotpath.FileTextImage}
	case kindPDF, kindDOCX:
	default:
		return notText(ctype, reasonOf(kind))
	}
	if kind == kindPDF && int64(len(data)) > r.cfg.MaxPDFBytes {
		res := notText(ctype, ReasonTooLarge)
		res.Bound = BoundPDFBytes
		return res
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	select {
	case r.gate <- struct{}{}:
	case <-ctx.Done():
		return notText(ctype, ReasonUnreadable)
	}
	done := make(chan docResult, 1)
	go func() {
		defer func() { <-r.gate }()
		var out docResult
		defer func() {
			if recover() != nil {
				out = docResult{reason: ReasonCorrupt}
			}
			done <- out
		}()
		if kind == kindPDF {
			out = readPDF(data, &r.cfg)
		} else {
			out = readDOCX(data, &r.cfg)
		}
	}()
	var d docResult
	select {
	case d = <-done:
	case <-ctx.Done():
		return notText(ctype, ReasonUnreadable)
	}
	if d.reason != "" {
		res := notText(ctype, d.reason)
		res.Pages, res.Bound = d.pages, d.bound
		return res
	}
	text := strings.TrimSpace(d.text)
	if text == "" {
		res := notText(ctype, ReasonNoText)
		res.Pages = d.pages
		return res
	}
	return r.finish(Result{ContentType: ctype, Status: hotpath.FileTextReady, Pages: d.pages}, text)
}

// finish counts the text, keeping it only within the counting bound. Every
// text read passes here; a NUL, which PostgreSQL cannot store, is dropped.
func (r *Reader) finish(res Result, text string) Result {
	if strings.IndexByte(text, 0) >= 0 {
		text = strings.ReplaceAll(text, "\x00", "")
	}
	if strings.TrimSpace(text) == "" {
		return notText(res.ContentType, ReasonNoText)
	}
	res.Tokens = tokens.CountLimit(text, r.cfg.CountBound)
	if res.Tokens <= r.cfg.CountBound {
		res.Text = text
	}
	return res
}

func notText(ctype, reason string) Result {
	return Result{ContentType: ctype, Status: hotpath.FileTextNotText, Reason: reason}
}

// docResult is what a document reader found.
type docResult struct {
	text   string
	pages  int
	reason string
	bound  string
}

type kind uint8

const (
	kindOther kind = iota
	kindText
	kindNotUTF8
	kindImage
	kindPDF
	kindDOCX
	kindZip
	kindDoc
	kindEncryptedOffice
)

func reasonOf(k kind) string {
	switch k {
	case kindNotUTF8:
		return ReasonUnreadable
	case kindDoc:
		return ReasonLegacyDoc
	case kindEncryptedOffice:
		return ReasonEncrypted
	}
	return ReasonNotExtracted
}

var (
	magicPDF  = []byte("%PDF-")
	magicZip  = []byte("PK\x03\x04")
	magicOLE  = []byte("\xD0\xCF\x11\xE0\xA1\xB1\x1A\xE1")
	magicPNG  = []byte("\x89PNG\r\n\x1a\n")
	magicJPEG = []byte("\xFF\xD8\xFF")
	// Names of OLE streams, in UTF-16LE as a compound file stores them.
	oleWordDocument  = utf16le("WordDocument")
	oleEncryptedInfo = utf16le("EncryptionInfo")
)

func utf16le(s string) []byte {
	b := make([]byte, 0, 2*len(s))
	for i := 0; i < len(s); i++ {
		b = append(b, s[i], 0)
	}
	return b
}

// textTypes refines UTF-8 text by extension; anything else is text/plain.
var textTypes = map[string]string{
	".md": "text/markdown", ".markdown": "text/markdown", ".csv": "text/csv", ".tsv": "text/tab-separated-values",
	".json": "application/json", ".html": "text/html", ".htm": "text/html", ".xml": "application/xml",
	".yaml": "application/yaml", ".yml": "application/yaml",
}

// sniff decides a file's kind and media type from its bytes.
func sniff(data []byte, filename string) (kind, string) {
	head := data[:min(len(data), 1024)]
	switch {
	case bytes.Contains(head, magicPDF):
		return kindPDF, "application/pdf"
	case bytes.HasPrefix(data, magicPNG):
		return kindImage, "image/png"
	case bytes.HasPrefix(data, magicJPEG):
		return kindImage, "image/jpeg"
	case len(data) >= 12 && string(data[:4]) == "RIFF" && string(data[8:12]) == "WEBP":
		return kindImage, "image/webp"
	case bytes.HasPrefix(data, magicZip):
		if isDOCX(data) {
			return kindDOCX, "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
		}
		return kindZip, "application/zip"
	case bytes.HasPrefix(data, magicOLE):
		// An encrypted .docx is an OLE container with an EncryptionInfo
		// stream; a Word 97-2003 document has a WordDocument stream.
		if bytes.Contains(data, oleEncryptedInfo) {
			return kindEncryptedOffice, "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
		}
		if bytes.Contains(data, oleWordDocument) {
			return kindDoc, "application/msword"
		}
		return kindOther, "application/x-ole-storage"
	}
	detected := http.DetectContentType(data)
	if !strings.HasPrefix(detected, "text/") {
		return kindOther, mediaType(detected)
	}
	if !utf8.Valid(data) || bytes.IndexByte(data, 0) >= 0 {
		return kindNotUTF8, "text/plain"
	}
	if t, ok := textTypes[strings.ToLower(path.Ext(filename))]; ok {
		return kindText, t
	}
	return kindText, "text/plain"
}

func mediaType(detected string) string {
	t, _, _ := strings.Cut(detected, ";")
	return strings.TrimSpace(t)
}
