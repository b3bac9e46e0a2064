package storage_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/hotpath"
	"github.com/edgegw/gateway/hotpath/memory"
	"github.com/edgegw/gateway/storage"
	"github.com/edgegw/gateway/storage/storetest"
)

// A turn uses at most three mentioned vaults: the first three that are
// readable, distinct and not the active vault, in the order given.
// Unreadable, malformed and repeated mentions (in any letter case) are
// dropped before counting, and the mentions past the third are not marked.
func TestMentionsUseTheFirstThreeReadable(t *testing.T) {
	ctx := context.Background()
	db := storetest.DB(t)
	org, ada := seed(t, db)
	eve, err := db.CreateUser(ctx, "eve@example.com", org.ID, hotpath.RoleMember)
	require.NoError(t, err)
	vault := func(owner, name string) string {
		v, err := db.CreateVault(ctx, org.ID, owner, storage.VaultFields{Name: &name})
		require.NoError(t, err)
		_, err = db.WriteMemory(ctx, org.ID, owner, storage.MemoryWrite{Scope: memory.ScopeVault, VaultID: v.ID,
			Key: "note", Value: "notes of " + name, Source: "manual"})
		require.NoError(t, err)
		return v.ID
	}
	active := vault(ada.ID, "Active")
	v := []string{vault(ada.ID, "One"), vault(ada.ID, "Two"), vault(ada.ID, "Three"), vault(ada.ID, "Four")}
	hidden := vault(eve.ID, "Eve's") // ada cannot read it

	mentions := []string{"garbage", active, strings.ToUpper(active), hidden, v[0], strings.ToUpper(v[0]), v[1], v[2], v[3]}
	cands, err := db.Candidates(ctx, memory.Caller{OrgID: org.ID, UserID: ada.ID, VaultID: active, Mentions: mentions}, "notes")
	require.NoError(t, err)
	marked := map[string]bool{}
	for _, c := range cands {
		if c.Scope == memory.ScopeVault {
			marked[c.VaultName] = c.Mentioned
		}
	}
	require.Equal(t, map[string]bool{"Active": false, "One": true, "Two": true, "Three": true, "Four": false}, marked)
}
