package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestControlPlaneTypeErrorsNameTheField: the keys route answers a wrong
// type with the field and the type it takes, not "not valid JSON", and
// matches keys case-sensitively.
func TestControlPlaneTypeErrorsNameTheField(t *testing.T) {
	ta := startTestApp(t)
	tn := newTenant(t, ta.dbURL, "kim@example.com", "--scopes", "org,chat")

	r := ta.call(t, "POST", "/api/v1/keys", tn.key, map[string]any{"read_only": "yes"})
	require.Equal(t, 400, r.status, "%s", r.raw)
	require.Equal(t, "invalid_request", r.body["code"])
	require.Equal(t, "read_only: must be a boolean, got a string.", r.body["error"])

	r = ta.call(t, "POST", "/api/v1/keys", tn.key, map[string]any{"allowed_scopes": "chat"})
	require.Equal(t, 400, r.status, "%s", r.raw)
	require.Equal(t, "allowed_scopes: must be an array, got a string.", r.body["error"])

	// "READ_ONLY" is not read_only: the key is minted writable.
	r = ta.call(t, "POST", "/api/v1/keys", tn.key, map[string]any{"READ_ONLY": true, "allowed_scopes": []string{"chat"}})
	require.Equal(t, 201, r.status, "%s", r.raw)
	require.NotEqual(t, true, r.body["read_only"])
}
