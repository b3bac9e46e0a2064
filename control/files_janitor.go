package control

import (
	"context"
	"log/slog"
	"time"

	"github.com/edgegw/gateway/storage"
)

// DefaultFileJanitorEvery is the time between janitor runs: well inside
// the 15 minutes within which a deleted or expired file's bytes must go.
const DefaultFileJanitorEvery = time.Minute

// DefaultFileJanitorBatch is how many files one janitor transaction
// deletes.
const DefaultFileJanitorBatch = 200

// FileJanitor deletes the bytes and records of deleted, expired and
// abandoned files, and mends what processes of an older release left
// behind once none is connected (storage.MendAfterOlderProcesses). Every
// gateway process may run it; each batch holds a PostgreSQL advisory
// lock, so one process works at a time.
type FileJanitor struct {
	// Files is the records and the store. Required.
	Files *storage.Files
	// Log receives one line per run that deleted something, and errors;
	// never a filename.
	Log *slog.Logger
	// Every is the time between runs; zero or negative disables the job.
	Every time.Duration
	// Batch bounds one transaction. Default DefaultFileJanitorBatch.
	Batch int
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// RunOnce deletes every file due at j.Now(); ran is false when another
// process held the lock.
func (j *FileJanitor) RunOnce(ctx context.Context) (deleted int, ran bool, err error) {
	now, batch := time.Now, j.Batch
	if j.Now != nil {
		now = j.Now
	}
	if batch <= 0 {
		batch = DefaultFileJanitorBatch
	}
	deleted, ran, err = j.Files.SweepFiles(ctx, now(), batch)
	if err != nil {
		return deleted, ran, err
	}
	mended, err := j.Files.DB.MendAfterOlderProcesses(ctx)
	if mended && j.Log != nil {
		j.Log.Info("mended what processes of an older release left behind")
	}
	return deleted, ran, err
}

// Run runs the janitor at once and then every j.Every until ctx ends.
func (j *FileJanitor) Run(ctx context.Context) {
	if j.Every <= 0 {
		return
	}
	t := time.NewTicker(j.Every)
	defer t.Stop()
	for {
		qctx, cancel := context.WithTimeout(ctx, retentionRunTimeout)
		deleted, _, err := j.RunOnce(qctx)
		cancel()
		switch {
		case err != nil && ctx.Err() == nil:
			j.Log.Error("file janitor failed", "err", err, "deleted", deleted)
		case deleted > 0:
			j.Log.Info("file janitor", "deleted", deleted)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
