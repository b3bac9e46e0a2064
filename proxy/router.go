package proxy

import (
	"slices"
	"strings"

	"github.com/fasthttp/router"
	"github.com/valyala/fasthttp"

	"github.com/edgegw/gateway/codec"
	"github.com/edgegw/gateway/hotpath"
)

// Envelope selects the error envelope a route answers in.
type Envelope uint8

const (
	// EnvelopeAPI is the gateway's own envelope: code, error, request_id, details.
	EnvelopeAPI Envelope = iota
	// EnvelopeOpenAI is {error:{message,type,param,code}} for the /v1 routes.
	EnvelopeOpenAI
	// EnvelopeAnthropic is {type:error,error:{type,message},request_id} for
	// the Anthropic-compatible routes under /v1/messages. Its routes also
	// take the key in x-api-key.
	EnvelopeAnthropic
	// EnvelopeOAuth is the gateway's own envelope as the sign-in routes
	// answer it (docs/signin.md): error is the OAuth error code, the text
	// is in error_description, and no answer may be cached.
	EnvelopeOAuth
)

// envelopeOf picks the envelope from the path: the Anthropic-compatible
// family lives under /v1/messages, the OpenAI-compatible family under the
// rest of /v1, the sign-in routes answer OAuth clients, everything else is
// the gateway's own.
func envelopeOf(path string) Envelope {
	switch {
	case path == "/v1/messages" || strings.HasPrefix(path, "/v1/messages/"):
		return EnvelopeAnthropic
	case strings.HasPrefix(path, "/v1/"):
		return EnvelopeOpenAI
	case isSignInPath(path):
		return EnvelopeOAuth
	}
	return EnvelopeAPI
}

// isSignInPath reports the paths of device login and native OAuth, under
// /api/v1 and /api/v2: POST /api/v1/device/code, /api/v1/device/token and
// /api/v1/auth/oauth/*.
func isSignInPath(path string) bool {
	rest, ok := strings.CutPrefix(path, "/api/v1/")
	if !ok {
		rest, ok = strings.CutPrefix(path, "/api/v2/")
	}
	return ok && (rest == "device/code" || rest == "device/token" || strings.HasPrefix(rest, "auth/oauth/"))
}

// Router is the route table of both planes behind one Edge.
type Router struct {
	edge *Edge
	r    *router.Router
}

// NewRouter returns an empty route table. Unknown routes and wrong methods
// are answered in the envelope of the path's family.
func NewRouter(edge *Edge) *Router {
	r := router.New()
	r.RedirectTrailingSlash = false // an API answers what was asked, never a redirect
	r.RedirectFixedPath = false
	r.HandleMethodNotAllowed = true
	// OPTIONS is answered like any other method a route does not serve
	// (405 with Allow): the gateway does not serve browsers cross-origin,
	// where a key in a page would be anyone's (docs/http.md).
	r.HandleOPTIONS = false
	rt := &Router{edge: edge, r: r}
	notFound := func(code *codec.Error) fasthttp.RequestHandler {
		h := func(ctx *fasthttp.RequestCtx, c *hotpath.Call) error { return code }
		api := edge.Wrap("", hotpath.Access{Name: "unmatched"}, EnvelopeAPI, h)
		openai := edge.Wrap("", hotpath.Access{Name: "unmatched"}, EnvelopeOpenAI, h)
		anthropic := edge.Wrap("", hotpath.Access{Name: "unmatched"}, EnvelopeAnthropic, h)
		oauth := edge.Wrap("", hotpath.Access{Name: "unmatched"}, EnvelopeOAuth, h)
		return func(ctx *fasthttp.RequestCtx) {
			switch envelopeOf(string(ctx.Path())) {
			case EnvelopeOpenAI:
				openai(ctx)
			case EnvelopeAnthropic:
				anthropic(ctx)
			case EnvelopeOAuth:
				oauth(ctx)
			default:
				api(ctx)
			}
		}
	}
	r.NotFound = notFound(codec.ErrNotFound)
	notAllowed := notFound(codec.ErrMethodNotAllowed)
	r.MethodNotAllowed = func(ctx *fasthttp.RequestCtx) {
		// The router lists OPTIONS among a route's methods; the gateway
		// answers it 405 like any method a route does not serve.
		allow := strings.Split(string(ctx.Response.Header.Peek("Allow")), ", ")
		allow = slices.DeleteFunc(allow, func(m string) bool { return m == fasthttp.MethodOptions })
		ctx.Response.Header.Set("Allow", strings.Join(allow, ", "))
		notAllowed(ctx)
	}
	return rt
}

// Handle registers a route. A path under /api/v1/ is served under /api/v2/
// too, by the same handler; use HandleOnly for a path whose /api/v2 twin is
// a different route (chat).
func (rt *Router) Handle(method, path string, a hotpath.Access, h func(*fasthttp.RequestCtx, *hotpath.Call) error) {
	rt.HandleOnly(method, path, a, h)
	if rest, ok := strings.CutPrefix(path, "/api/v1/"); ok {
		rt.HandleOnly(method, "/api/v2/"+rest, a, h)
	}
}

// HandleOnly registers a route at exactly one path.
func (rt *Router) HandleOnly(method, path string, a hotpath.Access, h func(*fasthttp.RequestCtx, *hotpath.Call) error) {
	rt.r.Handle(method, path, rt.edge.Wrap(method, a, envelopeOf(path), h))
}

// Handler returns the fasthttp handler serving the table, behind the HTTP
// layer's checks.
func (rt *Router) Handler() fasthttp.RequestHandler { return rt.edge.guard(rt.r.Handler) }

// HandleEitherVendor registers a route that OpenAI's and Anthropic's
// clients both call (the model list): a request carrying anthropic-version
// is served as on the Anthropic routes — its key may come in x-api-key,
// its errors are Anthropic's — and any other as on the OpenAI routes.
func (rt *Router) HandleEitherVendor(method, path string, a hotpath.Access, h func(*fasthttp.RequestCtx, *hotpath.Call) error) {
	openai := rt.edge.Wrap(method, a, EnvelopeOpenAI, h)
	anthropic := rt.edge.Wrap(method, a, EnvelopeAnthropic, h)
	rt.r.Handle(method, path, func(ctx *fasthttp.RequestCtx) {
		if fromAnthropic(ctx) {
			anthropic(ctx)
			return
		}
		openai(ctx)
	})
}
