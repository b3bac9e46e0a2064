package filetext

import (
	"context"
	"strings"
	"testing"

	"github.com/edgegw/gateway/control/filetext/filetexttest"
)

func benchmarkRead(b *testing.B, data []byte, name string) {
	r := NewReader(Config{})
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if res := r.Read(context.Background(), data, name); res.Status != "ready" {
			b.Fatalf("status %s %s", res.Status, res.Reason)
		}
	}
}

// BenchmarkReadPDF reads a 20-page PDF of prose.
func BenchmarkReadPDF(b *testing.B) {
	pages := make([]string, 20)
	for i := range pages {
		pages[i] = strings.Repeat("The analytical engine weaves algebraic patterns.\n", 40)
	}
	benchmarkRead(b, filetexttest.PDF(b, pages...), "a.pdf")
}

// BenchmarkReadDOCX reads a Word document of 800 paragraphs and a table.
func BenchmarkReadDOCX(b *testing.B) {
	paras := make([]string, 800)
	for i := range paras {
		paras[i] = "The analytical engine weaves algebraic patterns."
	}
	benchmarkRead(b, filetexttest.DOCX(b, paras, [][]string{{"a", "b"}, {"c", "d"}}), "a.docx")
}
