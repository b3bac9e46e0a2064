//go:build !race

package proxy

import (
	"testing"
)

// The aux routes' allocation budgets per request through the whole
// handler with a canned upstream: the measured figures (docs/performance.md)
// and a margin of two, so that a regression fails. They do not grow with
// the size of the vectors or verdicts.
func TestAuxRequestAllocationBudget(t *testing.T) {
	cases := []struct {
		name, path, body string
		canned           []byte
		budget           float64
	}{
		{"embeddings", "/api/v1/embeddings", `{"model":"gw-embed","input":` + auxInputs() + `}`, cannedEmbeddings(), 7},
		{"rerank", "/api/v1/rerank", `{"model":"gw-rerank","query":"lorem ipsum","documents":` + auxInputs() + `}`, []byte(cannedRerank), 8},
		{"moderation", "/api/v1/moderations", `{"model":"gw-guard","input":"lorem ipsum dolor sit amet"}`, []byte(cannedGuard), 13},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newAuxHarness(t, c.path, c.body, c.canned)
			allocs := testing.AllocsPerRun(200, func() { f.do(t) })
			t.Logf("allocations per %s request: %.0f", c.name, allocs)
			if allocs > c.budget {
				t.Fatalf("%.0f allocations, budget %.0f", allocs, c.budget)
			}
		})
	}
}
