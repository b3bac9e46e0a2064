package codec

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSignalFields(t *testing.T) {
	rec := AppendRecallField(nil, []MemorySignal{{Scope: "personal", Key: "tone"},
		{Scope: "vault", Key: "k\"", VaultID: "v1", VaultName: "Team"}, {Scope: "vault", Key: "x", VaultID: "v2"}})
	rules := AppendRulesField(nil, 3, []string{"org", "vault"})
	capt := AppendCaptureField(nil, []MemorySignal{{Scope: "personal", Key: "editor"}})
	obj := SpliceFields([]byte(`{"request_id":"r"}`), 0, append(append(rec, rules...), capt...))
	var got map[string]any
	require.NoError(t, json.Unmarshal(obj, &got), "%s", obj)
	require.Equal(t, []any{
		map[string]any{"scope": "personal", "key": "tone"},
		map[string]any{"scope": "vault", "key": "k\"", "vault_id": "v1", "vault_name": "Team"},
		map[string]any{"scope": "vault", "key": "x", "vault_id": "v2"},
	}, got["memory_recall"])
	require.Equal(t, map[string]any{"count": 3.0, "rulesets": []any{"org", "vault"}}, got["rules_applied"])
	require.Equal(t, map[string]any{"count": 1.0, "memories": []any{map[string]any{"scope": "personal", "key": "editor"}}}, got["memory_capture"])
	require.Equal(t, "r", got["request_id"])

	frame := SpliceFields([]byte("event: finish\ndata: {\"a\":1}\n\n"), 2, []byte(`,"b":2`))
	require.Equal(t, "event: finish\ndata: {\"a\":1,\"b\":2}\n\n", string(frame))
	require.Equal(t, "abc", string(SpliceFields([]byte("abc"), 0, []byte(`,"b":2`))), "not an object: unchanged")
}
