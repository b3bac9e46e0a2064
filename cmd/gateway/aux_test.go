package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestAuxSmoke(t *testing.T) {
	ta := startTestApp(t)
	ten := newTenant(t, ta.dbURL, "aux@example.com")
	r := ta.call(t, "POST", "/api/v1/embeddings", ten.key, map[string]any{"model": "gw-embed", "input": []any{"a", "b c"}})
	t.Logf("%d %s", r.status, r.raw[:min(len(r.raw), 300)])
	r = ta.call(t, "POST", "/api/v1/rerank", ten.key, map[string]any{"model": "gw-rerank", "query": "cat", "documents": []any{"dog", "cat food", "a cat"}})
	t.Logf("%d %s", r.status, r.raw)
	r = ta.call(t, "POST", "/api/v1/moderations", ten.key, map[string]any{"model": "gw-guard", "input": []any{"hello", "I will murder", "[[sim:unsafe=S7]]"}})
	t.Logf("%d %s", r.status, r.raw)
	require.Equal(t, 200, r.status)
}
