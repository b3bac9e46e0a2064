package control

import (
	"encoding/base64"
	"errors"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/bytedance/sonic"
	"github.com/valyala/fasthttp"

	"github.com/edgegw/gateway/codec"
	"github.com/edgegw/gateway/hotpath"
	"github.com/edgegw/gateway/storage"
)

// EvalChat is the chat pipeline as evals use it. cmd wires proxy.Chat and
// proxy.CompileSchema behind it; control never imports proxy.
type EvalChat interface {
	// Check validates a chat request body as the chat routes do, for a
	// request under version (pinned: the client sent that pin).
	Check(p *hotpath.Principal, body []byte, version codec.Version, pinned bool) *codec.Error
	// Complete runs one non-streaming turn through the pipeline and records
	// its ledger row under route with requestID.
	Complete(p *hotpath.Principal, body []byte, requestID, route string) hotpath.TurnResult
	// CompileSchema compiles a JSON schema with the structured-output
	// validator; a refusal is invalid_schema.
	CompileSchema(raw []byte) (OutputSchema, *codec.Error)
	// Models lists the model ids a chat request may name.
	Models() []string
}

// OutputSchema checks a reply against a compiled schema.
type OutputSchema interface {
	Check(output []byte) *codec.Error
}

// Refusals of the eval routes.
var (
	ErrEvalSuiteNotFound = codec.NewError(codec.CodeEvalSuiteNotFound, "No such eval suite.")
	ErrEvalCaseNotFound  = codec.NewError(codec.CodeEvalCaseNotFound, "No such case in this eval suite.")
	ErrEvalRunNotFound   = codec.NewError(codec.CodeEvalRunNotFound, "No such eval run.")
	ErrEvalSuiteSlug     = codec.NewError(codec.CodeEvalSuiteSlugExists, "slug: an eval suite with this slug already exists in the workspace.")

	errEvalCursor     = convInvalid("cursor: not a cursor this list issued.")
	errEvalEmptyPatch = convInvalid("Send at least one field to change; an empty patch changes nothing.")
	errEvalSuiteFull  = convInvalid("A suite holds at most " + strconv.Itoa(storage.MaxEvalCases) + " cases.")
	errEvalSuiteEmpty = convInvalid("The suite has no cases; add cases before starting a run.")
	errEvalMismatch   = convInvalid("baseline: must be a run of the same suite.")
	errEvalBaseline   = convInvalid("baseline: required, the id of the run to compare with.")
)

// Bounds of the eval inputs (docs/evals.md).
const (
	evalNameMax        = 200
	evalSlugMax        = 64
	evalDescriptionMax = 2000
	evalCaseMax        = 64 << 10
	evalAssertionsMax  = 16
	evalValueMax       = 4096
	evalPatternMax     = 512
	evalImportLines    = 1000
	evalImportBytes    = 8 << 20
	evalListMax        = 100
	evalListDefault    = 50
)

// registerEvals adds the eval routes; without a chat pipeline they are left
// out.
func (a *API) registerEvals(r Registrar) {
	if a.Evals.Chat == nil {
		return
	}
	read := func(name string) hotpath.Access {
		return hotpath.Access{Name: name, Auth: hotpath.AuthUser, Family: hotpath.FamilyEvals}
	}
	write := func(name string) hotpath.Access {
		return hotpath.Access{Name: name, Auth: hotpath.AuthUser, Family: hotpath.FamilyEvals, Billable: true}
	}
	const suites = "/api/v1/evals/suites"
	const runs = "/api/v1/evals/runs"
	r.Handle(fasthttp.MethodPost, suites, write("evals_suites_create"), a.createEvalSuite)
	r.Handle(fasthttp.MethodGet, suites, read("evals_suites_list"), a.listEvalSuites)
	r.Handle(fasthttp.MethodGet, suites+"/{id}", read("evals_suites_read"), a.readEvalSuite)
	r.Handle(fasthttp.MethodPatch, suites+"/{id}", write("evals_suites_update"), a.updateEvalSuite)
	r.Handle(fasthttp.MethodDelete, suites+"/{id}", write("evals_suites_delete"), a.deleteEvalSuite)
	r.Handle(fasthttp.MethodPost, suites+"/{id}/cases", write("evals_cases_create"), a.createEvalCase)
	r.Handle(fasthttp.MethodPost, suites+"/{id}/cases:import", write("evals_cases_import"), a.importEvalCases)
	r.Handle(fasthttp.MethodGet, suites+"/{id}/cases", read("evals_cases_list"), a.listEvalCases)
	r.Handle(fasthttp.MethodGet, suites+"/{id}/cases/{case_id}", read("evals_cases_read"), a.readEvalCase)
	r.Handle(fasthttp.MethodPatch, suites+"/{id}/cases/{case_id}", write("evals_cases_update"), a.updateEvalCase)
	r.Handle(fasthttp.MethodDelete, suites+"/{id}/cases/{case_id}", write("evals_cases_delete"), a.deleteEvalCase)
	r.Handle(fasthttp.MethodPost, suites+"/{id}/runs", write("evals_runs_create"), a.createEvalRun)
	r.Handle(fasthttp.MethodGet, suites+"/{id}/runs", read("evals_runs_list"), a.listEvalRuns)
	r.Handle(fasthttp.MethodGet, runs+"/{run_id}", read("evals_runs_read"), a.readEvalRun)
	r.Handle(fasthttp.MethodGet, runs+"/{run_id}/results", read("evals_runs_results"), a.listEvalResults)
	r.Handle(fasthttp.MethodPost, runs+"/{run_id}/cancel", write("evals_runs_cancel"), a.cancelEvalRun)
	r.Handle(fasthttp.MethodGet, runs+"/{run_id}/compare", read("evals_runs_compare"), a.compareEvalRuns)
	r.Handle(fasthttp.MethodGet, runs+"/{run_id}/events", read("evals_runs_events"), a.evalRunEvents)
}

// evalOwner is the caller's eval space: its key's organization and
// workspace.
func evalOwner(c *hotpath.Call) storage.EvalOwner {
	return storage.EvalOwner{OrgID: c.User.OrgID, WorkspaceID: c.User.WorkspaceID}
}

// evalError maps the eval queries' errors to their codes.
func evalError(err error, notFound *codec.Error) error {
	switch {
	case errors.Is(err, storage.ErrEvalCaseNotFound):
		return ErrEvalCaseNotFound
	case errors.Is(err, storage.ErrEvalRunNotFound):
		return ErrEvalRunNotFound
	case errors.Is(err, storage.ErrNotFound):
		return ErrEvalSuiteNotFound
	case errors.Is(err, storage.ErrConflict):
		return ErrEvalSuiteSlug
	case errors.Is(err, storage.ErrEvalSuiteFull):
		return errEvalSuiteFull
	case errors.Is(err, storage.ErrEvalSuiteEmpty):
		return errEvalSuiteEmpty
	case errors.Is(err, storage.ErrEvalRunMismatch):
		return errEvalMismatch
	}
	return storageError(err, notFound)
}

// evalTime is RFC 3339 UTC to the second, like every timestamp of the API
// (docs/ledger.md); cursors keep the microseconds.
func evalTime(t time.Time) string { return t.UTC().Format(time.RFC3339) }

func evalOptTime(t *time.Time) *string {
	if t == nil {
		return nil
	}
	s := evalTime(*t)
	return &s
}

// Cursors: base64url (unpadded) of a JSON object naming the list it was
// issued for (kind and, for a run's results, the run) and the position.
type evalCursor struct {
	Kind   string `json:"k"`
	Scope  string `json:"s,omitempty"`
	AtUS   int64  `json:"t,omitempty"`
	ID     string `json:"i,omitempty"`
	Seq    int    `json:"q,omitempty"`
	Repeat int    `json:"r,omitempty"`
}

func (c evalCursor) encode() string {
	b, _ := sonic.Marshal(c)
	return base64.RawURLEncoding.EncodeToString(b)
}

// evalPaging reads limit and cursor; the cursor must be of kind and scope.
func evalPaging(ctx *fasthttp.RequestCtx, kind, scope string) (int, *evalCursor, *codec.Error) {
	args := ctx.QueryArgs()
	limit := evalListDefault
	if raw := args.Peek("limit"); raw != nil {
		n, err := strconv.Atoi(string(raw))
		if err != nil || n < 1 || n > evalListMax {
			return 0, nil, convInvalid("limit: must be an integer from 1 to " + strconv.Itoa(evalListMax) + ".")
		}
		limit = n
	}
	raw := args.Peek("cursor")
	if len(raw) == 0 {
		return limit, nil, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(string(raw))
	var c evalCursor
	if err != nil || sonic.Unmarshal(b, &c) != nil || c.Kind != kind || c.Scope != scope {
		return 0, nil, errEvalCursor
	}
	// The position must be one a list could have issued: outside what the
	// columns hold it would fail the query instead of paging.
	if strings.HasPrefix(kind, "results:") {
		if c.Seq < 0 || c.Seq > math.MaxInt32 || c.Repeat < 0 || c.Repeat > math.MaxInt32 {
			return 0, nil, errEvalCursor
		}
	} else if _, ok := storage.CursorTime(c.AtUS); !ok || !storage.ValidUUID(c.ID) {
		return 0, nil, errEvalCursor
	}
	return limit, &c, nil
}

func (c *evalCursor) page() *storage.EvalPage {
	if c == nil {
		return nil
	}
	return &storage.EvalPage{At: time.UnixMicro(c.AtUS), ID: c.ID}
}

type evalListJSON[T any] struct {
	Object     string  `json:"object"`
	Data       []T     `json:"data"`
	NextCursor *string `json:"next_cursor"`
}

func evalList[T any](data []T, limit int, next func(last *T) evalCursor) evalListJSON[T] {
	out := evalListJSON[T]{Object: "list", Data: data}
	if out.Data == nil {
		out.Data = []T{}
	}
	if len(data) == limit && limit > 0 {
		s := next(&data[len(data)-1]).encode()
		out.NextCursor = &s
	}
	return out
}

// costJSON is an amount in USD, as the request log shows it.
type costJSON struct {
	Amount   json12 `json:"amount"`
	Currency string `json:"currency"`
}

// json12 is picoUSD written as a decimal number of dollars.
type json12 int64

func (p json12) MarshalJSON() ([]byte, error) { return codec.AppendDecimal(nil, int64(p), 12), nil }

func evalCost(pico int64) costJSON { return costJSON{Amount: json12(pico), Currency: "USD"} }

// rate is passed / total to four places; nil when total is 0.
func rate(passed, total int) *float64 {
	if total == 0 {
		return nil
	}
	r := math.Round(float64(passed)/float64(total)*10000) / 10000
	return &r
}

// The suite routes.

type evalSuiteJSON struct {
	ID          string `json:"id"`
	Object      string `json:"object"`
	Name        string `json:"name"`
	Slug        string `json:"slug"`
	Description string `json:"description"`
	Tier        string `json:"tier"`
	CaseCount   int    `json:"case_count"`
	CreatedAt   string `json:"created_at"`
	UpdatedAt   string `json:"updated_at"`
}

func suiteJSON(s storage.EvalSuite) evalSuiteJSON {
	return evalSuiteJSON{ID: s.ID, Object: "eval.suite", Name: s.Name, Slug: s.Slug, Description: s.Description,
		Tier: s.Tier, CaseCount: s.CaseCount, CreatedAt: evalTime(s.CreatedAt), UpdatedAt: evalTime(s.UpdatedAt)}
}

// checkEvalTier accepts a chat model id.
func (a *API) checkEvalTier(field, tier string) *codec.Error {
	for _, m := range a.Evals.Chat.Models() {
		if m == tier {
			return nil
		}
	}
	return convInvalid(field + ": must be one of " + strings.Join(a.Evals.Chat.Models(), ", ") + ".")
}

// suiteFields reads and checks a suite body's fields; create requires name.
func (a *API) suiteFields(f convFields, create bool) (p storage.EvalSuitePatch, cerr *codec.Error) {
	for k := range f {
		switch k {
		case "name", "slug", "description", "tier":
		default:
			return p, convInvalid(k + ": not a field of an eval suite (name, slug, description, tier).")
		}
	}
	if p.Name, cerr = f.str("name"); cerr != nil {
		return p, cerr
	}
	switch {
	case p.Name == nil && (create || f.present("name")):
		return p, convInvalid("name: required, 1 to " + strconv.Itoa(evalNameMax) + " bytes.")
	case p.Name != nil && (len(*p.Name) == 0 || len(*p.Name) > evalNameMax || strings.TrimSpace(*p.Name) == ""):
		return p, convInvalid("name: must be 1 to " + strconv.Itoa(evalNameMax) + " bytes, not only spaces.")
	}
	if p.Slug, cerr = f.str("slug"); cerr != nil {
		return p, cerr
	}
	if p.Slug == nil && create {
		s := storage.Slugify(*p.Name)
		if len(s) > evalSlugMax {
			s = strings.TrimRight(s[:evalSlugMax], "-")
		}
		if s == "" {
			return p, convInvalid("slug: the name gives no slug (it has no letters or digits); send one.")
		}
		p.Slug = &s
	}
	if p.Slug != nil && (*p.Slug == "" || len(*p.Slug) > evalSlugMax || storage.Slugify(*p.Slug) != *p.Slug) {
		return p, convInvalid("slug: lowercase letters, digits and single hyphens, at most " + strconv.Itoa(evalSlugMax) + " bytes.")
	}
	if p.Description, cerr = f.str("description"); cerr != nil {
		return p, cerr
	}
	if p.Description != nil && len(*p.Description) > evalDescriptionMax {
		return p, convInvalid("description: at most " + strconv.Itoa(evalDescriptionMax) + " bytes.")
	}
	if p.Tier, cerr = f.str("tier"); cerr != nil {
		return p, cerr
	}
	if p.Tier != nil {
		if cerr = a.checkEvalTier("tier", *p.Tier); cerr != nil {
			return p, cerr
		}
	}
	return p, nil
}

func (a *API) createEvalSuite(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
	f, cerr := parseConvFields(ctx.PostBody())
	if cerr != nil {
		return cerr
	}
	p, cerr := a.suiteFields(f, true)
	if cerr != nil {
		return cerr
	}
	desc, tier := "", "auto"
	if p.Description != nil {
		desc = *p.Description
	}
	if p.Tier != nil {
		tier = *p.Tier
	}
	qctx, cancel := queryContext()
	defer cancel()
	s, err := a.DB.CreateEvalSuite(qctx, evalOwner(c), *p.Name, *p.Slug, desc, tier)
	if err != nil {
		return evalError(err, ErrEvalSuiteNotFound)
	}
	return writeJSON(ctx, fasthttp.StatusCreated, suiteJSON(s))
}

func (a *API) listEvalSuites(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
	limit, cur, cerr := evalPaging(ctx, "suites", "")
	if cerr != nil {
		return cerr
	}
	qctx, cancel := queryContext()
	defer cancel()
	list, err := a.DB.ListEvalSuites(qctx, evalOwner(c), limit, cur.page())
	if err != nil {
		return evalError(err, ErrEvalSuiteNotFound)
	}
	data := make([]evalSuiteJSON, len(list))
	for i, s := range list {
		data[i] = suiteJSON(s)
	}
	return writeJSON(ctx, fasthttp.StatusOK, evalList(data, limit, func(last *evalSuiteJSON) evalCursor {
		s := list[len(list)-1]
		return evalCursor{Kind: "suites", AtUS: s.CreatedAt.UnixMicro(), ID: s.ID}
	}))
}

func (a *API) readEvalSuite(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
	qctx, cancel := queryContext()
	defer cancel()
	s, err := a.DB.EvalSuite(qctx, evalOwner(c), pathParam(ctx, "id"))
	if err != nil {
		return evalError(err, ErrEvalSuiteNotFound)
	}
	return writeJSON(ctx, fasthttp.StatusOK, suiteJSON(s))
}

func (a *API) updateEvalSuite(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
	f, cerr := parseConvFields(ctx.PostBody())
	if cerr != nil {
		return cerr
	}
	if len(f) == 0 {
		return errEvalEmptyPatch
	}
	p, cerr := a.suiteFields(f, false)
	if cerr != nil {
		return cerr
	}
	qctx, cancel := queryContext()
	defer cancel()
	s, err := a.DB.UpdateEvalSuite(qctx, evalOwner(c), pathParam(ctx, "id"), p)
	if err != nil {
		return evalError(err, ErrEvalSuiteNotFound)
	}
	return writeJSON(ctx, fasthttp.StatusOK, suiteJSON(s))
}

func (a *API) deleteEvalSuite(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
	qctx, cancel := queryContext()
	defer cancel()
	if err := a.DB.DeleteEvalSuite(qctx, evalOwner(c), pathParam(ctx, "id")); err != nil {
		return evalError(err, ErrEvalSuiteNotFound)
	}
	ctx.SetStatusCode(fasthttp.StatusNoContent)
	return nil
}
