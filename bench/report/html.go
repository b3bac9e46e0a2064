package report

import (
	"fmt"
	"html"
	"io"
	"strings"
)

const htmlStyle = `body{font-family:system-ui,-apple-system,'Segoe UI',Helvetica,Arial,sans-serif;margin:2rem auto;max-width:1000px;padding:0 1rem;color:#1a1a1a;background:#fff}
h1{font-size:1.4rem;margin:0 0 .3rem}
h2{font-size:1.1rem;margin:2rem 0 .5rem}
p.meta{color:#595959;margin:0 0 1rem}
pre{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12.5px;line-height:1.4;background:#f7f7f7;border:1px solid #e3e3e3;border-radius:4px;padding:1rem;overflow-x:auto}
figure{margin:1rem 0}
figure svg{max-width:100%;height:auto;border:1px solid #e3e3e3;border-radius:4px}
table.cpu{border-collapse:collapse;font-size:13px}
table.cpu th,table.cpu td{padding:.2rem .6rem;border-bottom:1px solid #e3e3e3;text-align:right}
table.cpu th:nth-child(-n+2),table.cpu td:nth-child(-n+2){text-align:left}
p.note{color:#595959;font-size:12.5px}
`

// WriteHTML writes one self-contained HTML page: the plots of every metric
// some target recorded and of resident memory when it was sampled, inline,
// a table of the CPU and memory of the processes measured beside the
// targets, when there are any, and the text summary in a <pre>. It loads
// nothing from elsewhere.
func WriteHTML(w io.Writer, c *Comparison) error {
	if err := check(c); err != nil {
		return err
	}
	var text strings.Builder
	if err := WriteText(&text, c); err != nil {
		return err
	}
	var b strings.Builder
	name := c.scenarioName()
	b.WriteString("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n")
	b.WriteString(`<meta name="viewport" content="width=device-width, initial-scale=1">` + "\n")
	fmt.Fprintf(&b, "<title>%s: bench report</title>\n", html.EscapeString(name))
	fmt.Fprintf(&b, "<style>\n%s</style>\n</head>\n<body>\n", htmlStyle)
	fmt.Fprintf(&b, "<h1>%s</h1>\n", html.EscapeString(name))
	var meta []string
	for _, r := range c.Results {
		meta = append(meta, targetName(r, len(meta)))
	}
	line := "target: " + meta[0]
	if len(meta) > 1 {
		line = "targets: " + strings.Join(meta, ", ") + " (baseline " + meta[0] + ")"
	}
	if c.Machine != "" {
		line += " · " + c.Machine
	}
	if !c.When.IsZero() {
		line += " · " + c.When.UTC().Format("2006-01-02 15:04:05 MST")
	}
	fmt.Fprintf(&b, "<p class=\"meta\">%s</p>\n", html.EscapeString(line))

	for _, m := range metrics {
		if !m.hasData(c) {
			continue
		}
		fmt.Fprintf(&b, "<figure id=\"%s\">\n", m.name)
		renderSVG(&b, c, m)
		b.WriteString("</figure>\n")
	}
	if hasRSS(c) {
		fmt.Fprintf(&b, "<figure id=\"%s\">\n", MetricMemory)
		renderMemorySVG(&b, c)
		b.WriteString("</figure>\n")
	}
	d := newDocument(c)
	if rows := cpuRows(d); rows != nil {
		b.WriteString("<h2 id=\"cpu\">CPU and memory</h2>\n")
		htmlTable(&b, cpuHeads, rows, cpuNote)
		if rows := busyRows(d); rows != nil {
			b.WriteString("<h2 id=\"cpus\">CPUs</h2>\n")
			htmlTable(&b, busyHeads, rows, busyNote)
		}
	}
	b.WriteString("<h2>Summary</h2>\n<pre>")
	b.WriteString(html.EscapeString(text.String()))
	b.WriteString("</pre>\n</body>\n</html>\n")
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("cannot write HTML report: %w", err)
	}
	return nil
}

// htmlTable writes a table of the CPU class, and its note.
func htmlTable(b *strings.Builder, heads []string, rows [][]string, note string) {
	b.WriteString("<table class=\"cpu\">\n<tr>")
	for _, h := range heads {
		fmt.Fprintf(b, "<th>%s</th>", html.EscapeString(h))
	}
	b.WriteString("</tr>\n")
	for _, r := range rows {
		b.WriteString("<tr>")
		for _, cell := range r {
			fmt.Fprintf(b, "<td>%s</td>", html.EscapeString(cell))
		}
		b.WriteString("</tr>\n")
	}
	fmt.Fprintf(b, "</table>\n<p class=\"note\">%s</p>\n", html.EscapeString(note))
}
