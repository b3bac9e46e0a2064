package filetext

import (
	"archive/zip"
	"bytes"
	"encoding/xml"
	"errors"
	"io"
)

const docxDocument = "word/document.xml"

// maxZipEntries bounds the entries of a .docx looked through.
const maxZipEntries = 10_000

// isDOCX reports a zip whose entries include the WordprocessingML document.
func isDOCX(data []byte) bool {
	z, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil || len(z.File) > maxZipEntries {
		return false
	}
	for _, f := range z.File {
		if f.Name == docxDocument {
			return true
		}
	}
	return false
}

var errTooLarge = errors.New("the document decompresses past its bound")

// boundedReader fails once more than left bytes were read: a zip entry
// whose size was declared small but inflates past the bound (a zip bomb)
// stops there.
type boundedReader struct {
	r    io.Reader
	left int64
}

func (b *boundedReader) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, errTooLarge
	}
	if int64(len(p)) > b.left {
		p = p[:b.left+1]
	}
	n, err := b.r.Read(p)
	b.left -= int64(n)
	if b.left < 0 {
		return 0, errTooLarge
	}
	return n, err
}

// readDOCX reads the paragraphs and tables of word/document.xml in reading
// order: a paragraph ends a line, a table cell a tab, a table row a line.
func readDOCX(data []byte, cfg *Config) docResult {
	z, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil || len(z.File) > maxZipEntries {
		return docResult{reason: ReasonCorrupt}
	}
	var doc *zip.File
	for _, f := range z.File {
		if f.Name == docxDocument {
			doc = f
		}
		if f.Flags&0x1 != 0 {
			return docResult{reason: ReasonEncrypted}
		}
	}
	if doc == nil {
		return docResult{reason: ReasonCorrupt}
	}
	rc, err := doc.Open()
	if err != nil {
		return docResult{reason: ReasonCorrupt}
	}
	defer rc.Close()
	br := &boundedReader{r: rc, left: cfg.MaxDecodedBytes}
	dec := xml.NewDecoder(br)
	var out []byte
	inText := false
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if errors.Is(err, errTooLarge) {
			return docResult{reason: ReasonUnreadable}
		}
		if err != nil {
			return docResult{reason: ReasonCorrupt}
		}
		switch t := tok.(type) {
		case xml.StartElement:
			if t.Name.Space != wordML && t.Name.Space != "" {
				continue
			}
			switch t.Name.Local {
			case "t":
				inText = true
			case "tab":
				out = append(out, '\t')
			case "br", "cr":
				out = append(out, '\n')
			}
		case xml.EndElement:
			if t.Name.Space != wordML && t.Name.Space != "" {
				continue
			}
			switch t.Name.Local {
			case "t":
				inText = false
			case "p":
				out = append(out, '\n')
			case "tc":
				// The cell's last paragraph ended a line; a cell ends
				// with a tab instead.
				out = append(bytes.TrimSuffix(out, []byte{'\n'}), '\t')
			case "tr":
				out = append(bytes.TrimSuffix(out, []byte{'\t'}), '\n')
			}
		case xml.CharData:
			if inText {
				out = append(out, t...)
			}
		}
	}
	return docResult{text: string(out)}
}

const wordML = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
