package control

import (
	"context"
	"log/slog"
	"time"

	"github.com/edgegw/gateway/storage"
)

// DefaultRetentionBatch is how many expired conversations one transaction
// of the retention job deletes.
const DefaultRetentionBatch = 500

// retentionRunTimeout bounds one run, however short the interval: a run
// that outlasts the interval only makes the next tick wait.
const retentionRunTimeout = 10 * time.Minute

// Retention is the job that deletes conversations whose retention deadline
// has passed. Every gateway process may run it: each batch runs under a
// PostgreSQL advisory lock, so one process deletes at a time and the
// others find the lock taken and wait for their next turn.
type Retention struct {
	// DB is the database. Required.
	DB *storage.DB
	// Log receives one line per run that deleted something, and errors;
	// never a title or a message.
	Log *slog.Logger
	// Every is the time between runs; zero or negative disables the job.
	Every time.Duration
	// Batch bounds one transaction. Default DefaultRetentionBatch.
	Batch int
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// RunOnce deletes every conversation expired at r.Now(). It reports how
// many it deleted, and whether it ran (false: another process held the
// lock).
func (r *Retention) RunOnce(ctx context.Context) (deleted int, ran bool, err error) {
	now, batch := time.Now, r.Batch
	if r.Now != nil {
		now = r.Now
	}
	if batch <= 0 {
		batch = DefaultRetentionBatch
	}
	return r.DB.DeleteExpiredConversations(ctx, now(), batch)
}

// Run runs the job at once and then every r.Every until ctx ends.
func (r *Retention) Run(ctx context.Context) {
	if r.Every <= 0 {
		return
	}
	t := time.NewTicker(r.Every)
	defer t.Stop()
	for {
		qctx, cancel := context.WithTimeout(ctx, retentionRunTimeout)
		deleted, _, err := r.RunOnce(qctx)
		cancel()
		switch {
		case err != nil && ctx.Err() == nil:
			r.Log.Error("conversation retention failed", "err", err, "deleted", deleted)
		case deleted > 0:
			r.Log.Info("conversation retention", "deleted", deleted)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
