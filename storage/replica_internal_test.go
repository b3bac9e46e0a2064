package storage

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// fakeRow answers Scan with fixed values.
type fakeRow []any

func (r fakeRow) Scan(dest ...any) error {
	if len(dest) != len(r) {
		return errors.New("wrong column count")
	}
	for i, d := range dest {
		switch d := d.(type) {
		case *string:
			*d = r[i].(string)
		case *bool:
			*d = r[i].(bool)
		}
	}
	return nil
}

// fakeServer answers QueryRow with the next of its rows.
type fakeServer struct{ rows []fakeRow }

func (f *fakeServer) Query(context.Context, string, ...any) (pgx.Rows, error) {
	return nil, errors.New("unused")
}
func (f *fakeServer) QueryRow(context.Context, string, ...any) pgx.Row {
	r := f.rows[0]
	f.rows = f.rows[1:]
	return r
}

func TestParseLSN(t *testing.T) {
	for s, want := range map[string]uint64{"0/0": 0, "16/B374D848": 0x16<<32 | 0xB374D848, "FFFFFFFF/FFFFFFFF": 1<<64 - 1} {
		got, err := parseLSN(s)
		require.NoError(t, err, s)
		require.Equal(t, want, got, s)
	}
	for _, bad := range []string{"", "16", "x/1", "1/", "100000000/0"} {
		_, err := parseLSN(bad)
		require.Error(t, err, bad)
	}
}

// TestReplicaLag walks the staleness arithmetic through a replica that
// keeps up, falls behind and catches up, on an injected clock.
func TestReplicaLag(t *testing.T) {
	now := time.Unix(1000, 0)
	clock := func() time.Time { return now }
	w := lagWatch{keep: 6, maxLag: time.Second}
	check := func(primary, replica string) time.Duration {
		lag, err := w.check(context.Background(), &fakeServer{rows: []fakeRow{{primary}}},
			&fakeServer{rows: []fakeRow{{true, replica}}}, clock)
		require.NoError(t, err)
		now = now.Add(250 * time.Millisecond)
		return lag
	}
	// Behind the only sample there is: staleness unknown, so over the bound.
	require.Greater(t, check("0/100", "0/50"), time.Second)
	require.Zero(t, check("0/200", "0/200"), "caught up")
	require.Zero(t, check("0/200", "0/200"), "an idle primary: still caught up")
	require.Equal(t, 250*time.Millisecond, check("0/300", "0/200"), "has what the previous sample had")
	require.Equal(t, 500*time.Millisecond, check("0/400", "0/250"), "has what the sample before that had")
	require.Equal(t, 750*time.Millisecond, check("0/500", "0/250"))
	// Behind every kept sample: older than the oldest, and over the bound.
	for range 4 {
		check("0/600", "0/250")
	}
	require.Greater(t, check("0/700", "0/250"), time.Second)
	require.Zero(t, check("0/700", "0/700"), "caught up again")
}

// CheckReplica measures db's read URL once, as the watcher does.
func CheckReplica(ctx context.Context, db *DB) error {
	w := lagWatch{keep: 4, maxLag: time.Second}
	_, err := w.check(ctx, db.Pool, db.replica.pool, time.Now)
	return err
}
