// Package control is the gateway's control plane: plain handlers over
// storage for identity, keys and (in later layers) the collaboration
// resources. Clarity wins over allocations here.
package control

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/bytedance/sonic"
	"github.com/valyala/fasthttp"

	"github.com/edgegw/gateway/codec"
	"github.com/edgegw/gateway/control/filetext"
	"github.com/edgegw/gateway/hotpath"
	"github.com/edgegw/gateway/hotpath/memory"
	"github.com/edgegw/gateway/hotpath/meter"
	"github.com/edgegw/gateway/storage"
)

// Registrar is the route table the handlers are registered in.
type Registrar interface {
	Handle(method, path string, a hotpath.Access, h func(*fasthttp.RequestCtx, *hotpath.Call) error)
}

// Invalidator drops keys from this process's cache at once: one by its
// hash, or every record (after a change that can touch many keys, such as
// a role or a workspace cap). Other processes hear of the same change
// through PostgreSQL.
type Invalidator interface {
	Invalidate(h hotpath.TokenHash)
	Reset()
}

// API holds the control plane's dependencies.
type API struct {
	DB     *storage.DB
	Keys   Invalidator
	Log    *slog.Logger
	Commit string
	// Limits is the enforcement state GET /api/v1/limits reads; nil leaves
	// the route out.
	Limits *meter.Limits
	// SignIn configures device login, native OAuth and the approval page.
	SignIn SignInConfig
	// LoginLimiter paces the public sign-in routes per client address; nil
	// uses an in-process limiter of SignIn.RateLimit per minute.
	LoginLimiter LoginLimiter
	// Evals configures the eval routes and this process's runner.
	Evals EvalConfig
	// Mail configures the invitation messages.
	Mail MailConfig
	// Outbox is woken when an invitation's message is written; nil leaves
	// delivery to the next poll (or to the operator, when no SMTP server
	// is configured).
	Outbox Waker
	// Files configures the file routes; without a Store they are left out.
	Files    FilesConfig
	fileText *filetext.Reader
	// Status builds GET /api/status; nil leaves the route out.
	Status *Status
	// Embed computes the gw-embed vector stored beside a memory written by
	// hand; nil (or a failing tier) stores it without one, and recall then
	// finds it by its words.
	Embed    memory.Embedder
	signin   *signIn
	draining atomic.Bool
}

// Register adds the control plane's routes.
func (a *API) Register(r Registrar) {
	r = dependencyRoutes{r}
	public := func(name string) hotpath.Access { return hotpath.Access{Name: name} }
	user := func(name string, f hotpath.Family) hotpath.Access {
		return hotpath.Access{Name: name, Auth: hotpath.AuthUser, Family: f}
	}
	probe := func(name string) hotpath.Access { return hotpath.Access{Name: name, Untraced: true} }
	r.Handle(fasthttp.MethodGet, "/api/health", probe("health"), a.health)
	r.Handle(fasthttp.MethodGet, "/api/ready", probe("ready"), a.ready)
	if a.Status != nil {
		r.Handle(fasthttp.MethodGet, "/api/status", public("status"), a.status)
	}
	r.Handle(fasthttp.MethodGet, "/api/v1/me", user("me", hotpath.FamilyNone), a.me)
	r.Handle(fasthttp.MethodGet, "/api/v1/service-token/self",
		hotpath.Access{Name: "service_token_self", Auth: hotpath.AuthService}, a.serviceTokenSelf)
	r.Handle(fasthttp.MethodGet, "/api/v1/keys", user("keys_list", hotpath.FamilyOrg), a.listKeys)
	r.Handle(fasthttp.MethodPost, "/api/v1/keys", user("keys_create", hotpath.FamilyOrg), a.createKey)
	r.Handle(fasthttp.MethodDelete, "/api/v1/keys/{id}", user("keys_revoke", hotpath.FamilyOrg), a.revokeKey)
	r.Handle(fasthttp.MethodPost, "/api/v1/keys/{id}/rotate", user("keys_rotate", hotpath.FamilyOrg), a.rotateKey)
	a.registerLogs(r)
	a.registerFeedback(r)
	a.registerLimits(r)
	a.registerConversations(r)
	a.registerOrg(r)
	a.registerProfile(r)
	a.registerWorkspaces(r)
	a.registerPrompts(r)
	a.registerFiles(r)
	a.registerEvals(r)
	a.registerVaults(r)
	a.registerMemories(r)
	a.registerRules(r)
	a.registerSignIn(r)
}

// Drain makes /api/ready answer 503 so load balancers stop sending traffic
// before the listener closes.
func (a *API) Drain() { a.draining.Store(true) }

// queryTimeout bounds one request's database work.
const queryTimeout = 5 * time.Second

// queryContext is the context a handler's queries run under. It is not
// derived from the fasthttp RequestCtx: that one is recycled after the
// handler returns and is not safe as a parent once the server shuts down.
func queryContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), queryTimeout)
}

// writeList answers 200 with a list envelope: {"object":"list","data":…}.
func writeList(ctx *fasthttp.RequestCtx, data any) error {
	return writeJSON(ctx, fasthttp.StatusOK, map[string]any{"object": "list", "data": data})
}

func writeJSON(ctx *fasthttp.RequestCtx, status int, v any) error {
	body, err := sonic.Marshal(v)
	if err != nil {
		return err
	}
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.SetBody(body)
	return nil
}

// storageError maps storage's sentinels to the route's codes: notFound for
// ErrNotFound and ErrNotMember, 503 service_unavailable for a database that
// cannot answer (unavailable); anything else is returned as it is and
// answered internal_error by the edge.
func storageError(err error, notFound *codec.Error) error {
	if errors.Is(err, storage.ErrNotFound) || errors.Is(err, storage.ErrNotMember) {
		return notFound
	}
	return unavailable(err)
}

// unavailable answers an error that says the database (or another
// dependency) cannot answer right now as 503 service_unavailable, which the
// client may send again, and returns any other error as it is.
func unavailable(err error) error {
	if storage.Unavailable(err) {
		return codec.ErrServiceUnavailable
	}
	return err
}

// dependencyRoutes registers every handler behind unavailable, so that a
// route returning its storage error as it is answers a database that is
// down with 503, like one that maps it through storageError.
type dependencyRoutes struct{ Registrar }

func (r dependencyRoutes) Handle(method, path string, a hotpath.Access, h func(*fasthttp.RequestCtx, *hotpath.Call) error) {
	r.Registrar.Handle(method, path, a, func(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
		return unavailable(h(ctx, c))
	})
}

// keySyncTimeout bounds how long a change to keys, memberships, roles or
// caps waits for every process of the fleet to apply it before answering.
const keySyncTimeout = 2 * time.Second

// keysChanged drops hashes from this process's key cache and returns once
// every process of the fleet has applied what the request just committed
// to them (fleetSees): the next request, on whichever process, obeys it
// (spec: key validity, "401 from the next request").
func (a *API) keysChanged(hashes ...hotpath.TokenHash) {
	for _, h := range hashes {
		a.Keys.Invalidate(h)
	}
	a.fleetSees()
}

// allKeysChanged is keysChanged for a change that reaches every cached
// record (a role, a workspace cap): this process distrusts its whole cache.
func (a *API) allKeysChanged() {
	a.Keys.Reset()
	a.fleetSees()
}

// fleetSees returns once every process of the fleet has applied what the
// request just committed to keys, memberships, roles or caps. A process that does not answer within keySyncTimeout (stopped in its
// tracks) no longer holds the answer back; it applies the change on its
// own notification. A release from before sync markers is not waited for
// (storage.SyncKeys).
func (a *API) fleetSees() {
	ctx, cancel := context.WithTimeout(context.Background(), keySyncTimeout)
	defer cancel()
	if acked, n, err := a.DB.SyncKeys(ctx); err != nil {
		a.Log.Warn("key change not confirmed by every process", "answered", acked, "processes", n, "err", err)
	}
}
