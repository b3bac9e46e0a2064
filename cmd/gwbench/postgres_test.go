package main

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/bench/load"
	"github.com/edgegw/gateway/storage/storetest"
)

// The PostgreSQL that make test starts runs on this machine: local finds
// its postmaster, the parent of the backend serving the connection. A
// server that cannot be reached is not measured.
func TestLocalPostgres(t *testing.T) {
	url := storetest.DatabaseURL(t)
	p, ok := localPostgres(context.Background(), url)
	require.True(t, ok)
	require.Equal(t, "postgres", p.Name)
	require.False(t, p.Own || p.Alone, "measured beside the targets, with its backends")
	s, err := load.ReadProcStat(p.PID)
	require.NoError(t, err)
	require.Equal(t, "postgres", s.Comm)
	u, err := load.ReadProcTree(p.PID)
	require.NoError(t, err)
	require.Greater(t, u.Processes, 1, "the postmaster's tree holds its backends and workers")

	_, ok = localPostgres(context.Background(), "postgres://nobody@127.0.0.1:1/none?connect_timeout=1")
	require.False(t, ok)
}
