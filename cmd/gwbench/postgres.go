package main

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/edgegw/gateway/bench/load"
)

// postgresProc names PostgreSQL among the processes a run measures, as
// --pid postgres=PID does.
const postgresProc = "postgres"

// localPostgres finds the postmaster of the PostgreSQL at dbURL when it
// runs on this machine, so that local measures it beside every target
// without --pid: the gateway's ledger writes cost PostgreSQL CPU on the
// same cores the targets are measured on. The backend serving this
// connection is a child of the postmaster; a server elsewhere (or in
// another PID namespace) has no such process here and is not measured.
func localPostgres(ctx context.Context, dbURL string) (load.Proc, bool) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return load.Proc{}, false
	}
	defer conn.Close(context.Background())
	var backend int
	if err := conn.QueryRow(ctx, "select pg_backend_pid()").Scan(&backend); err != nil {
		return load.Proc{}, false
	}
	s, err := load.ReadProcStat(backend)
	if err != nil || s.Comm != "postgres" {
		return load.Proc{}, false
	}
	parent, err := load.ReadProcStat(s.PPID)
	if err != nil || parent.Comm != "postgres" {
		return load.Proc{}, false
	}
	return load.Proc{Name: postgresProc, PID: parent.PID}, true
}
