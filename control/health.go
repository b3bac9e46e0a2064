package control

import (
	"context"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/edgegw/gateway/hotpath"
	"github.com/edgegw/gateway/storage"
)

// health is liveness only: it answers as soon as the listener is up and
// touches nothing else.
func (a *API) health(ctx *fasthttp.RequestCtx, _ *hotpath.Call) error {
	return writeJSON(ctx, fasthttp.StatusOK, map[string]string{"status": "ok", "commit": a.Commit})
}

type readiness struct {
	Status              string `json:"status"`
	Database            string `json:"database"`
	SchemaVersion       int32  `json:"schema_version"`
	BinarySchemaVersion int32  `json:"binary_schema_version"`
	Draining            bool   `json:"draining,omitempty"`
}

// ready is 200 only when the database answers and its schema is at least
// this binary's, and 503 while draining.
func (a *API) ready(ctx *fasthttp.RequestCtx, _ *hotpath.Call) error {
	r := readiness{Status: "ready", Database: "ok", BinarySchemaVersion: storage.BinaryVersion()}
	qctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	v, err := a.DB.SchemaVersion(qctx)
	switch {
	case err != nil:
		r.Status, r.Database = "unavailable", "unreachable"
	case v < r.BinarySchemaVersion:
		r.Status, r.SchemaVersion = "unavailable", v
	default:
		r.SchemaVersion = v
	}
	if a.draining.Load() {
		r.Status, r.Draining = "unavailable", true
	}
	status := fasthttp.StatusOK
	if r.Status != "ready" {
		status = fasthttp.StatusServiceUnavailable
	}
	ctx.Response.Header.Set("Cache-Control", "no-store")
	return writeJSON(ctx, status, r)
}
