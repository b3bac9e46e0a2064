//go:build !race

package proxy

import (
	"testing"

	"github.com/bytedance/sonic"
)

// maxCountAllocs bounds what counting a 32 KiB conversation costs in
// allocations. The encoder allocates nothing per piece or per token (its
// pre-tokenizer is a scanner over the text, its merge works in pooled
// scratch), so what remains is decoding the request and writing the
// answer: measured 130 (docs/performance.md).
const maxCountAllocs = 140

func TestTokenCountAllocationBudget(t *testing.T) {
	f := newCountHarness(t)
	n, err := sonic.Get(f.ctx.Response.Body(), "input_tokens")
	if err != nil {
		t.Fatal(err)
	}
	toks, _ := n.Int64()
	allocs := testing.AllocsPerRun(20, func() { f.do(t) })
	t.Logf("allocations per 32 KiB count: %.0f (%d tokens)", allocs, toks)
	if allocs > maxCountAllocs {
		t.Fatalf("%.0f allocations per count, budget %d", allocs, maxCountAllocs)
	}
}
