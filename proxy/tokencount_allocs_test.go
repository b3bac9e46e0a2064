//go:build !race

package proxy

import (
	"testing"

	"github.com/bytedance/sonic"
)

// maxCountAllocsPerToken bounds what counting costs in allocations: the
// o200k_base pre-tokenizer (tiktoken-go's regexp2) allocates per piece, so
// the figure grows with the text, linearly and no faster. Measured: about
// 5.9 per input token on a 32 KiB conversation (docs/performance.md).
const maxCountAllocsPerToken = 6.5

func TestTokenCountAllocationBudget(t *testing.T) {
	f := newCountHarness(t)
	n, err := sonic.Get(f.ctx.Response.Body(), "input_tokens")
	if err != nil {
		t.Fatal(err)
	}
	toks, _ := n.Int64()
	allocs := testing.AllocsPerRun(20, func() { f.do(t) })
	perToken := allocs / float64(toks)
	t.Logf("allocations per 32 KiB count: %.0f (%.2f per token, %d tokens)", allocs, perToken, toks)
	if perToken > maxCountAllocsPerToken {
		t.Fatalf("%.2f allocations per token, budget %.1f", perToken, maxCountAllocsPerToken)
	}
}
