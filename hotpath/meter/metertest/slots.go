package metertest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/hotpath/meter"
)

// The helpers below reach a store only through the calls production makes,
// Admit and Finish, so that a test written with them proves that path.

// TakeSlot admits a request that only takes one of limit slots named key:
// ok is false when all are held.
func TakeSlot(t testing.TB, c meter.Counters, now time.Time, key string, limit int64) (lease meter.Lease, ok bool) {
	t.Helper()
	res, err := c.Admit(context.Background(), now, &meter.Admission{LeaseKey: key, LeaseLimit: limit}, new(meter.Reservation))
	require.NoError(t, err)
	return res.Lease, res.Refused == meter.AdmitOK
}

// FreeSlot gives a slot back: a Finish with nothing to settle.
func FreeSlot(t testing.TB, c meter.Counters, lease meter.Lease) {
	t.Helper()
	require.NoError(t, c.Finish(context.Background(), lease, new(meter.Reservation), nil))
}

// InFlight is the number of slots held under key. An admission with a limit
// of n takes a slot exactly when fewer than n are held, so the first limit
// that admits is one more than the slots held; the probe's slot is given
// back at once.
func InFlight(t testing.TB, c meter.Counters, now time.Time, key string) int64 {
	t.Helper()
	for n := int64(1); n <= 1<<16; n++ {
		if lease, ok := TakeSlot(t, c, now, key, n); ok {
			FreeSlot(t, c, lease)
			return n - 1
		}
	}
	t.Fatalf("more than %d slots held under %s", 1<<16, key)
	return 0
}

// Reserve admits a request that only reserves amounts against budgets,
// recording the reservation in r. It returns the index of the first budget
// that would go over its cap, or -1 when everything was reserved.
func Reserve(ctx context.Context, c meter.Counters, now time.Time, budgets []meter.Budget, amounts []int64, r *meter.Reservation) (refused int, err error) {
	res, err := c.Admit(ctx, now, &meter.Admission{Budgets: budgets, Amounts: amounts}, r)
	if err != nil {
		return -1, err
	}
	if res.Refused == meter.AdmitBudget {
		return res.Budget, nil
	}
	return -1, nil
}

// Settle settles r to actual: a Finish with no slot to give back.
func Settle(ctx context.Context, c meter.Counters, r *meter.Reservation, actual []int64) error {
	return c.Finish(ctx, meter.Lease{}, r, actual)
}
