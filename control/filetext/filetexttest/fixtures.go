// Package filetexttest generates the documents the file tests upload: real
// PDFs (text, encrypted, scanned, corrupt, over the page bound) and Word
// documents, made on the fly so no binary fixture is checked in.
package filetexttest

import (
	"archive/zip"
	"bytes"
	"compress/flate"
	"html"
	"image"
	"image/color"
	"image/png"
	"io"
	"strings"
	"testing"

	"github.com/go-pdf/fpdf"
	"github.com/stretchr/testify/require"
)

// PDF returns a PDF with one page per entry of pages, each showing its
// text in a standard font.
func PDF(t testing.TB, pages ...string) []byte {
	t.Helper()
	return pdfWith(t, nil, pages...)
}

func pdfWith(t testing.TB, setup func(*fpdf.Fpdf), pages ...string) []byte {
	t.Helper()
	f := fpdf.New("P", "mm", "A4", "")
	if setup != nil {
		setup(f)
	}
	f.SetFont("Helvetica", "", 12)
	for _, p := range pages {
		f.AddPage()
		for _, line := range strings.Split(p, "\n") {
			f.Cell(0, 8, line)
			f.Ln(8)
		}
	}
	var b bytes.Buffer
	require.NoError(t, f.Output(&b))
	return b.Bytes()
}

// EncryptedPDF returns a PDF that opens only with a user password.
func EncryptedPDF(t testing.TB) []byte {
	t.Helper()
	return pdfWith(t, func(f *fpdf.Fpdf) { f.SetProtection(fpdf.CnProtectPrint, "user-secret", "owner-secret") },
		"confidential text")
}

// ScannedPDF returns a PDF whose page is an image and no text, as a
// scanner makes.
func ScannedPDF(t testing.TB) []byte {
	t.Helper()
	f := fpdf.New("P", "mm", "A4", "")
	f.AddPage()
	f.RegisterImageOptionsReader("scan", fpdf.ImageOptions{ImageType: "PNG"}, bytes.NewReader(PNG(t)))
	f.ImageOptions("scan", 10, 10, 100, 100, false, fpdf.ImageOptions{ImageType: "PNG"}, 0, "")
	var b bytes.Buffer
	require.NoError(t, f.Output(&b))
	return b.Bytes()
}

// CorruptPDF returns bytes that start like a PDF and have no structure.
func CorruptPDF(t testing.TB) []byte {
	t.Helper()
	good := PDF(t, "soon to be broken")
	return append(append([]byte(nil), good[:len(good)/3]...), "\x00garbage without trailer"...)
}

// ManyPagesPDF returns a PDF of n short pages.
func ManyPagesPDF(t testing.TB, n int) []byte {
	t.Helper()
	pages := make([]string, n)
	for i := range pages {
		pages[i] = "p"
	}
	return PDF(t, pages...)
}

// PNG returns a small PNG image.
func PNG(t testing.TB) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, 16, 16))
	for x := 0; x < 16; x++ {
		img.Set(x, x, color.RGBA{R: 200, A: 255})
	}
	var b bytes.Buffer
	require.NoError(t, png.Encode(&b, img))
	return b.Bytes()
}

// DOCX returns a Word document with the paragraphs, then a table of rows.
func DOCX(t testing.TB, paragraphs []string, rows [][]string) []byte {
	t.Helper()
	var body strings.Builder
	for _, p := range paragraphs {
		body.WriteString(`<w:p><w:r><w:t xml:space="preserve">` + html.EscapeString(p) + `</w:t></w:r></w:p>`)
	}
	if len(rows) > 0 {
		body.WriteString(`<w:tbl>`)
		for _, r := range rows {
			body.WriteString(`<w:tr>`)
			for _, c := range r {
				body.WriteString(`<w:tc><w:p><w:r><w:t>` + html.EscapeString(c) + `</w:t></w:r></w:p></w:tc>`)
			}
			body.WriteString(`</w:tr>`)
		}
		body.WriteString(`</w:tbl>`)
	}
	return docxOf(t, body.String())
}

// DOCXBomb returns a Word document whose document part is tiny compressed
// and inflates to n bytes of markup.
func DOCXBomb(t testing.TB, n int) []byte {
	t.Helper()
	return docxOf(t, strings.Repeat(`<w:p><w:r><w:t>a</w:t></w:r></w:p>`, n/34+1))
}

func docxOf(t testing.TB, body string) []byte {
	t.Helper()
	var b bytes.Buffer
	z := zip.NewWriter(&b)
	z.RegisterCompressor(zip.Deflate, func(w io.Writer) (io.WriteCloser, error) {
		return flate.NewWriter(w, flate.BestCompression)
	})
	put := func(name, content string) {
		w, err := z.Create(name)
		require.NoError(t, err)
		_, err = w.Write([]byte(content))
		require.NoError(t, err)
	}
	put("[Content_Types].xml", `<?xml version="1.0" encoding="UTF-8"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">`+
		`<Default Extension="xml" ContentType="application/xml"/><Override PartName="/word/document.xml" `+
		`ContentType="application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/></Types>`)
	put("word/document.xml", `<?xml version="1.0" encoding="UTF-8" standalone="yes"?>`+
		`<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"><w:body>`+body+`</w:body></w:document>`)
	require.NoError(t, z.Close())
	return b.Bytes()
}

// LegacyDoc returns the start of a Word 97-2003 compound file: the OLE
// signature and a WordDocument stream name.
func LegacyDoc() []byte {
	b := []byte("\xD0\xCF\x11\xE0\xA1\xB1\x1A\xE1")
	b = append(b, make([]byte, 504)...)
	for _, c := range "WordDocument" {
		b = append(b, byte(c), 0)
	}
	return append(b, make([]byte, 512)...)
}
