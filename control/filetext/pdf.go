package filetext

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"unicode/utf16"

	"github.com/pdfcpu/pdfcpu/pkg/api"
	"github.com/pdfcpu/pdfcpu/pkg/pdfcpu"
	"github.com/pdfcpu/pdfcpu/pkg/pdfcpu/model"
	"golang.org/x/text/encoding/charmap"
)

func init() {
	// pdfcpu would otherwise create and read a configuration directory
	// under the user's home.
	api.DisableConfigDir()
}

// readPDF parses the document with pdfcpu (cross references, object
// streams, filters and encryption, each under pdfcpu's resource limits)
// and reads the text-showing operators of each page's content in order.
func readPDF(data []byte, cfg *Config) docResult {
	conf := model.NewDefaultConfiguration()
	conf.Limits.MaxStreamBytes = cfg.MaxPDFBytes
	conf.Limits.MaxDecodeBytes = cfg.MaxDecodedBytes
	conf.Limits.MaxImageBytes = cfg.MaxDecodedBytes
	conf.Limits.MaxObjectCount = 1_000_000
	conf.Limits.MaxXRefEntries = 1_000_000
	conf.Limits.MaxObjectStreamCount = 100_000
	ctx, err := api.ReadContext(bytes.NewReader(data), conf)
	if err != nil {
		if errors.Is(err, pdfcpu.ErrWrongPassword) || errors.Is(err, pdfcpu.ErrUnsupportedEncryptionFeature) ||
			strings.Contains(err.Error(), "password") {
			return docResult{reason: ReasonEncrypted}
		}
		return docResult{reason: ReasonCorrupt}
	}
	if err := ctx.EnsurePageCount(); err != nil {
		return docResult{reason: ReasonCorrupt}
	}
	pages := ctx.PageCount
	if pages > cfg.MaxPDFPages {
		return docResult{reason: ReasonTooLarge, bound: BoundPDFPages, pages: pages}
	}
	var out []byte
	left := cfg.MaxDecodedBytes
	for p := 1; p <= pages; p++ {
		r, err := pdfcpu.ExtractPageContent(ctx, p)
		if err != nil {
			return docResult{reason: ReasonCorrupt, pages: pages}
		}
		content, err := io.ReadAll(r)
		if err != nil {
			return docResult{reason: ReasonCorrupt, pages: pages}
		}
		if left -= int64(len(content)); left < 0 {
			return docResult{reason: ReasonUnreadable, pages: pages}
		}
		out = appendContentText(out, content)
		if len(out) > 0 && out[len(out)-1] != '\n' {
			out = append(out, '\n')
		}
	}
	return docResult{text: string(out), pages: pages}
}

// appendContentText appends the text a content stream shows: the strings
// of Tj, TJ, ' and ", with a line break for each new text line (T*, Td,
// TD, Tm, ' and ", and ET) and a space for a wide TJ gap. Strings are
// decoded as UTF-16BE when they carry its byte order mark and as
// WinAnsiEncoding (the encoding of the standard fonts) otherwise; glyph
// codes of embedded composite fonts are not mapped.
func appendContentText(dst, content []byte) []byte {
	s := scanner{b: content}
	var operands [][]byte // strings of the pending operands
	line := func() {
		if len(dst) > 0 && dst[len(dst)-1] != '\n' {
			dst = append(dst, '\n')
		}
	}
	for {
		tok, kind := s.next()
		switch kind {
		case tokEOF:
			return dst
		case tokString:
			operands = append(operands, tok)
		case tokNumber:
			if s.depth > 0 && len(tok) > 0 && tok[0] == '-' && len(tok) >= 4 {
				// A kerning adjustment of a thousandth of an em or
				// more (-100 and beyond) reads as a word gap.
				operands = append(operands, []byte{' '})
			}
		case tokOperator:
			switch string(tok) {
			case "Tj", "TJ":
				for _, o := range operands {
					dst = decodePDFString(dst, o)
				}
			case "'", "\"":
				line()
				for _, o := range operands {
					dst = decodePDFString(dst, o)
				}
			case "T*", "Td", "TD", "Tm", "ET":
				line()
			case "BI":
				s.skipInlineImage()
			}
			operands = operands[:0]
		}
	}
}

var winAnsi = charmap.Windows1252.NewDecoder()

// decodePDFString appends a PDF string's text.
func decodePDFString(dst, raw []byte) []byte {
	if len(raw) == 1 && raw[0] == ' ' {
		if len(dst) > 0 && dst[len(dst)-1] != ' ' && dst[len(dst)-1] != '\n' {
			dst = append(dst, ' ')
		}
		return dst
	}
	if len(raw) >= 2 && raw[0] == 0xFE && raw[1] == 0xFF {
		u := make([]uint16, 0, len(raw)/2)
		for i := 2; i+1 < len(raw); i += 2 {
			u = append(u, uint16(raw[i])<<8|uint16(raw[i+1]))
		}
		return appendPrintable(dst, []byte(string(utf16.Decode(u))))
	}
	text, err := winAnsi.Bytes(raw)
	if err != nil {
		return dst
	}
	return appendPrintable(dst, text)
}

// appendPrintable appends UTF-8 text without its C0 control codes but tab:
// in a shown string they are glyph ids of a font, not text, and a NUL could
// not be stored.
func appendPrintable(dst, text []byte) []byte {
	for _, c := range text {
		if c < 0x20 && c != '\t' {
			continue
		}
		dst = append(dst, c)
	}
	return dst
}

type tokKind uint8

const (
	tokEOF tokKind = iota
	tokString
	tokNumber
	tokOperator
	tokArrayStart
	tokOther
)

// scanner tokenizes a content stream. Strings are returned decoded
// (escapes resolved, hex digits read); everything else as its bytes.
// Nesting is bounded by the input's length; it never allocates past it.
type scanner struct {
	b     []byte
	i     int
	depth int // inside [ ]
	buf   []byte
}

func isPDFSpace(c byte) bool {
	return c == ' ' || c == '\n' || c == '\r' || c == '\t' || c == '\f' || c == 0
}

func isPDFDelim(c byte) bool {
	return c == '(' || c == ')' || c == '<' || c == '>' || c == '[' || c == ']' || c == '{' || c == '}' ||
		c == '/' || c == '%'
}

func (s *scanner) next() ([]byte, tokKind) {
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case isPDFSpace(c):
			s.i++
		case c == '%':
			for s.i < len(s.b) && s.b[s.i] != '\n' && s.b[s.i] != '\r' {
				s.i++
			}
		case c == '(':
			return s.literal(), tokString
		case c == '<':
			if s.i+1 < len(s.b) && s.b[s.i+1] == '<' {
				s.i += 2
				return nil, tokOther
			}
			return s.hex(), tokString
		case c == '>':
			s.i++
			if s.i < len(s.b) && s.b[s.i] == '>' {
				s.i++
			}
			return nil, tokOther
		case c == '[':
			s.i++
			s.depth++
			return nil, tokArrayStart
		case c == ']':
			s.i++
			if s.depth > 0 {
				s.depth--
			}
			return nil, tokOther
		case c == '/':
			s.i++
			s.word()
			return nil, tokOther
		case c == '{' || c == '}' || c == ')':
			s.i++
			return nil, tokOther
		default:
			w := s.word()
			if len(w) == 0 {
				s.i++
				continue
			}
			if w[0] == '-' || w[0] == '+' || w[0] == '.' || (w[0] >= '0' && w[0] <= '9') {
				return w, tokNumber
			}
			return w, tokOperator
		}
	}
	return nil, tokEOF
}

func (s *scanner) word() []byte {
	start := s.i
	for s.i < len(s.b) && !isPDFSpace(s.b[s.i]) && !isPDFDelim(s.b[s.i]) {
		s.i++
	}
	return s.b[start:s.i]
}

// literal reads a (string) with balanced parentheses and escapes.
func (s *scanner) literal() []byte {
	s.i++ // (
	out := s.buf[:0]
	depth := 1
	for s.i < len(s.b) {
		c := s.b[s.i]
		s.i++
		switch c {
		case '\\':
			if s.i >= len(s.b) {
				break
			}
			e := s.b[s.i]
			s.i++
			switch e {
			case 'n':
				out = append(out, '\n')
			case 'r':
				out = append(out, '\r')
			case 't':
				out = append(out, '\t')
			case 'b':
				out = append(out, '\b')
			case 'f':
				out = append(out, '\f')
			case '\r', '\n':
				if e == '\r' && s.i < len(s.b) && s.b[s.i] == '\n' {
					s.i++
				}
			default:
				if e >= '0' && e <= '7' {
					v := int(e - '0')
					for k := 0; k < 2 && s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '7'; k++ {
						v = v*8 + int(s.b[s.i]-'0')
						s.i++
					}
					out = append(out, byte(v))
				} else {
					out = append(out, e)
				}
			}
		case '(':
			depth++
			out = append(out, c)
		case ')':
			depth--
			if depth == 0 {
				s.buf = out
				return append([]byte(nil), out...)
			}
			out = append(out, c)
		default:
			out = append(out, c)
		}
	}
	s.buf = out
	return append([]byte(nil), out...)
}

// hex reads a <hex string>.
func (s *scanner) hex() []byte {
	s.i++ // <
	var out []byte
	var hi byte
	half := false
	for s.i < len(s.b) {
		c := s.b[s.i]
		s.i++
		if c == '>' {
			break
		}
		v, ok := hexVal(c)
		if !ok {
			continue
		}
		if half {
			out = append(out, hi<<4|v)
		} else {
			hi = v
		}
		half = !half
	}
	if half {
		out = append(out, hi<<4)
	}
	return out
}

func hexVal(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// skipInlineImage skips past an inline image's data (BI ... ID data EI).
func (s *scanner) skipInlineImage() {
	id := bytes.Index(s.b[s.i:], []byte("ID"))
	if id < 0 {
		s.i = len(s.b)
		return
	}
	s.i += id + 2
	for s.i < len(s.b) {
		end := bytes.Index(s.b[s.i:], []byte("EI"))
		if end < 0 {
			s.i = len(s.b)
			return
		}
		s.i += end + 2
		if end > 0 && isPDFSpace(s.b[s.i-3]) && (s.i >= len(s.b) || isPDFSpace(s.b[s.i])) {
			return
		}
	}
}
