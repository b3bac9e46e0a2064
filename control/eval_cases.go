package control

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strconv"
	"strings"

	"github.com/bytedance/sonic"
	"github.com/valyala/fasthttp"

	"github.com/edgegw/gateway/codec"
	"github.com/edgegw/gateway/hotpath"
	"github.com/edgegw/gateway/storage"
)

// evalCase is a case as stored and shown (docs/evals.md, Case).
type evalCase struct {
	Name           string          `json:"name,omitempty"`
	Messages       json.RawMessage `json:"messages"`
	Tools          json.RawMessage `json:"tools,omitempty"`
	ResponseFormat json.RawMessage `json:"response_format,omitempty"`
	Assertions     []evalAssertion `json:"assertions"`
}

// evalAssertion is one expectation of a case's reply.
type evalAssertion struct {
	Type       string          `json:"type"`
	Value      *string         `json:"value,omitempty"`
	IgnoreCase bool            `json:"ignore_case,omitempty"`
	Pattern    string          `json:"pattern,omitempty"`
	Schema     json.RawMessage `json:"schema,omitempty"`
	Name       string          `json:"name,omitempty"`
	Arguments  json.RawMessage `json:"arguments,omitempty"`
	Rubric     string          `json:"rubric,omitempty"`
	Tier       string          `json:"tier,omitempty"`
}

// The fields each assertion type takes besides type.
var assertionFields = map[string][]string{
	"equals":       {"value"},
	"contains":     {"value", "ignore_case"},
	"not_contains": {"value", "ignore_case"},
	"regex":        {"pattern"},
	"json_schema":  {"schema"},
	"tool_call":    {"name", "arguments"},
	"judge":        {"rubric", "tier"},
}

var toolName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// parseEvalCase reads and checks one case for key p: its chat fields as the
// chat route checks them, then its assertions. prefix names where the case
// came from in a refusal ("line 7: ").
// parseEvalCase reads one case for the request c: its chat fields are
// checked under c's key and Gateway-Version pin, as a chat request of c's
// would be.
func (a *API) parseEvalCase(c *hotpath.Call, f convFields, prefix string) (evalCase, *codec.Error) {
	var ec evalCase
	bad := func(msg string) *codec.Error { return convInvalid(prefix + msg) }
	for k := range f {
		switch k {
		case "name", "messages", "tools", "response_format", "assertions":
		default:
			return ec, bad(k + ": not a field of an eval case (name, messages, tools, response_format, assertions).")
		}
	}
	name, cerr := f.str("name")
	if cerr != nil {
		return ec, bad(cerr.Message)
	}
	if name != nil {
		if len(*name) > evalNameMax {
			return ec, bad("name: at most " + strconv.Itoa(evalNameMax) + " bytes.")
		}
		ec.Name = *name
	}
	if !f.given("messages") {
		return ec, bad("messages: required, the chat request's messages.")
	}
	if ec.Messages, cerr = storedJSON(prefix+"messages", f["messages"]); cerr != nil {
		return ec, cerr
	}
	if f.given("tools") {
		if ec.Tools, cerr = storedJSON(prefix+"tools", f["tools"]); cerr != nil {
			return ec, cerr
		}
	}
	if f.given("response_format") {
		if ec.ResponseFormat, cerr = storedJSON(prefix+"response_format", f["response_format"]); cerr != nil {
			return ec, cerr
		}
	}
	// The chat fields are checked by the chat pipeline's own validation,
	// as a request for any tier would be: the run's tier is not known yet.
	free := *c.User
	free.Models = nil
	if cerr := a.Evals.Chat.Check(&free, ec.chatBody("auto"), c.Version, c.Pinned); cerr != nil {
		e := *cerr
		e.Message = prefix + e.Message
		return ec, &e
	}
	if f.given("assertions") {
		var raws []json.RawMessage
		if err := sonic.Unmarshal(f["assertions"], &raws); err != nil {
			return ec, bad("assertions: must be an array of objects.")
		}
		if len(raws) > evalAssertionsMax {
			return ec, bad("assertions: at most " + strconv.Itoa(evalAssertionsMax) + " per case.")
		}
		for i, raw := range raws {
			as, cerr := a.parseAssertion(raw, prefix+"assertions["+strconv.Itoa(i)+"]")
			if cerr != nil {
				return ec, cerr
			}
			ec.Assertions = append(ec.Assertions, as)
		}
	}
	if ec.Assertions == nil {
		ec.Assertions = []evalAssertion{}
	}
	return ec, nil
}

func compact(raw json.RawMessage) json.RawMessage {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return raw
	}
	return b.Bytes()
}

// storedJSON is a field kept as sent, compacted; the case is stored as
// jsonb, which refuses some of what JSON allows (codec.JSONUnstorable).
func storedJSON(field string, raw json.RawMessage) (json.RawMessage, *codec.Error) {
	b := compact(raw)
	if why := codec.JSONUnstorable(b); why != "" {
		return nil, convInvalid(field + ": " + why)
	}
	return b, nil
}

func (a *API) parseAssertion(raw json.RawMessage, at string) (evalAssertion, *codec.Error) {
	var as evalAssertion
	f, cerr := parseConvFields(raw)
	if cerr != nil || len(bytes.TrimSpace(raw)) == 0 {
		return as, convInvalid(at + ": must be an object with a type.")
	}
	typ, cerr := f.str("type")
	if cerr != nil || typ == nil {
		return as, convInvalid(at + ".type: required, one of equals, contains, not_contains, regex, json_schema, tool_call, judge.")
	}
	fields, ok := assertionFields[*typ]
	if !ok {
		return as, convInvalid(at + ".type: " + strconv.Quote(*typ) +
			" is not an assertion type (equals, contains, not_contains, regex, json_schema, tool_call, judge).")
	}
	as.Type = *typ
	for k := range f {
		if k != "type" && !contains(fields, k) {
			return as, convInvalid(at + "." + k + ": not a field of a " + as.Type + " assertion (" + strings.Join(fields, ", ") + ").")
		}
	}
	text := func(name string, max int, required bool) (string, *codec.Error) {
		s, cerr := f.str(name)
		switch {
		case cerr != nil:
			return "", convInvalid(at + "." + cerr.Message)
		case s == nil && required:
			return "", convInvalid(at + "." + name + ": required.")
		case s != nil && len(*s) > max:
			return "", convInvalid(at + "." + name + ": at most " + strconv.Itoa(max) + " bytes.")
		case s == nil:
			return "", nil
		}
		return *s, nil
	}
	switch as.Type {
	case "equals", "contains", "not_contains":
		v, cerr := text("value", evalValueMax, true)
		if cerr != nil {
			return as, cerr
		}
		as.Value = &v
		if as.IgnoreCase, cerr = f.boolean("ignore_case"); cerr != nil {
			return as, convInvalid(at + "." + cerr.Message)
		}
	case "regex":
		if as.Pattern, cerr = text("pattern", evalPatternMax, true); cerr != nil {
			return as, cerr
		}
		if _, err := regexp.Compile(as.Pattern); err != nil {
			return as, convInvalid(at + ".pattern: not a valid RE2 expression (" + err.Error() + ").")
		}
	case "json_schema":
		if !f.given("schema") {
			return as, convInvalid(at + ".schema: required, a JSON schema.")
		}
		if as.Schema, cerr = storedJSON(at+".schema", f["schema"]); cerr != nil {
			return as, cerr
		}
		if _, cerr := a.Evals.Chat.CompileSchema(as.Schema); cerr != nil {
			return as, schemaAt(at+".schema", cerr)
		}
	case "tool_call":
		if as.Name, cerr = text("name", 64, true); cerr != nil {
			return as, cerr
		}
		if !toolName.MatchString(as.Name) {
			return as, convInvalid(at + ".name: a function name, 1 to 64 of A-Z, a-z, 0-9, _ and -.")
		}
		if f.given("arguments") {
			if as.Arguments, cerr = storedJSON(at+".arguments", f["arguments"]); cerr != nil {
				return as, cerr
			}
			if _, cerr := a.Evals.Chat.CompileSchema(as.Arguments); cerr != nil {
				return as, schemaAt(at+".arguments", cerr)
			}
		}
	case "judge":
		if as.Rubric, cerr = text("rubric", evalValueMax, true); cerr != nil {
			return as, cerr
		}
		if strings.TrimSpace(as.Rubric) == "" {
			return as, convInvalid(at + ".rubric: must not be empty.")
		}
		if as.Tier, cerr = text("tier", 32, false); cerr != nil {
			return as, cerr
		}
		if as.Tier != "" {
			if cerr := a.checkEvalTier(at+".tier", as.Tier); cerr != nil {
				return as, cerr
			}
		}
	}
	return as, nil
}

// schemaAt renames a schema refusal for the field it came from.
func schemaAt(field string, cerr *codec.Error) *codec.Error {
	e := *cerr
	msg := e.Message
	if i := strings.Index(msg, ": "); i >= 0 && strings.HasPrefix(msg, "response_format") {
		msg = msg[i+2:]
	}
	e.Message = field + ": " + msg
	return &e
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// chatBody is the case as a chat request for model.
func (ec *evalCase) chatBody(model string) []byte {
	req := struct {
		Model          string          `json:"model"`
		Messages       json.RawMessage `json:"messages"`
		Tools          json.RawMessage `json:"tools,omitempty"`
		ResponseFormat json.RawMessage `json:"response_format,omitempty"`
	}{model, ec.Messages, ec.Tools, ec.ResponseFormat}
	b, _ := json.Marshal(req)
	return b
}

type evalCaseJSON struct {
	ID             string          `json:"id"`
	Object         string          `json:"object"`
	SuiteID        string          `json:"suite_id"`
	Name           string          `json:"name"`
	Messages       json.RawMessage `json:"messages"`
	Tools          json.RawMessage `json:"tools"`
	ResponseFormat json.RawMessage `json:"response_format"`
	Assertions     []evalAssertion `json:"assertions"`
	CreatedAt      string          `json:"created_at"`
	UpdatedAt      string          `json:"updated_at"`
}

var jsonNull = json.RawMessage("null")

func caseJSON(c storage.EvalCase) evalCaseJSON {
	var ec evalCase
	_ = json.Unmarshal(c.Body, &ec)
	out := evalCaseJSON{ID: c.ID, Object: "eval.case", SuiteID: c.SuiteID, Name: ec.Name, Messages: ec.Messages,
		Tools: ec.Tools, ResponseFormat: ec.ResponseFormat, Assertions: ec.Assertions,
		CreatedAt: evalTime(c.CreatedAt), UpdatedAt: evalTime(c.UpdatedAt)}
	if out.Tools == nil {
		out.Tools = jsonNull
	}
	if out.ResponseFormat == nil {
		out.ResponseFormat = jsonNull
	}
	if out.Assertions == nil {
		out.Assertions = []evalAssertion{}
	}
	return out
}

// caseBody parses and checks one case body, returning it encoded for
// storage.
func (a *API) caseBody(c *hotpath.Call, body []byte, prefix string) ([]byte, *codec.Error) {
	if len(body) > evalCaseMax {
		return nil, convInvalid(prefix + "A case is at most " + strconv.Itoa(evalCaseMax) + " bytes of JSON.")
	}
	f, cerr := parseConvFields(body)
	if cerr != nil {
		e := *cerr
		e.Message = prefix + e.Message
		return nil, &e
	}
	ec, cerr := a.parseEvalCase(c, f, prefix)
	if cerr != nil {
		return nil, cerr
	}
	b, _ := json.Marshal(ec)
	return b, nil
}

func (a *API) createEvalCase(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
	b, cerr := a.caseBody(c, ctx.PostBody(), "")
	if cerr != nil {
		return cerr
	}
	qctx, cancel := queryContext()
	defer cancel()
	cs, err := a.DB.CreateEvalCases(qctx, evalOwner(c), pathParam(ctx, "id"), [][]byte{b})
	if err != nil {
		return evalError(err, ErrEvalSuiteNotFound)
	}
	return writeJSON(ctx, fasthttp.StatusCreated, caseJSON(cs[0]))
}

// importEvalCases adds JSON Lines of cases, all or none.
func (a *API) importEvalCases(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
	body := ctx.PostBody()
	if len(body) > evalImportBytes {
		return convInvalid("An import is at most " + strconv.Itoa(evalImportBytes) + " bytes.")
	}
	var bodies [][]byte
	line := 0
	for rest := body; len(rest) > 0; {
		var l []byte
		l, rest, _ = bytes.Cut(rest, []byte{'\n'})
		line++
		if len(bytes.TrimSpace(l)) == 0 {
			continue
		}
		if len(bodies) == evalImportLines {
			return convInvalid("An import holds at most " + strconv.Itoa(evalImportLines) + " cases.")
		}
		b, cerr := a.caseBody(c, l, "line "+strconv.Itoa(line)+": ")
		if cerr != nil {
			return cerr
		}
		bodies = append(bodies, b)
	}
	if len(bodies) == 0 {
		return convInvalid("The body holds no case: send JSON Lines, one case per line.")
	}
	qctx, cancel := queryContext()
	defer cancel()
	cs, err := a.DB.CreateEvalCases(qctx, evalOwner(c), pathParam(ctx, "id"), bodies)
	if err != nil {
		return evalError(err, ErrEvalSuiteNotFound)
	}
	data := make([]evalCaseJSON, len(cs))
	for i := range cs {
		data[i] = caseJSON(cs[i])
	}
	return writeJSON(ctx, fasthttp.StatusCreated, map[string]any{"object": "list", "data": data, "imported": len(data)})
}

func (a *API) listEvalCases(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
	suiteID := pathParam(ctx, "id")
	limit, cur, cerr := evalPaging(ctx, "cases", suiteID)
	if cerr != nil {
		return cerr
	}
	qctx, cancel := queryContext()
	defer cancel()
	list, err := a.DB.ListEvalCases(qctx, evalOwner(c), suiteID, limit, cur.page())
	if err != nil {
		return evalError(err, ErrEvalSuiteNotFound)
	}
	data := make([]evalCaseJSON, len(list))
	for i := range list {
		data[i] = caseJSON(list[i])
	}
	return writeJSON(ctx, fasthttp.StatusOK, evalList(data, limit, func(*evalCaseJSON) evalCursor {
		last := list[len(list)-1]
		return evalCursor{Kind: "cases", Scope: suiteID, AtUS: last.CreatedAt.UnixMicro(), ID: last.ID}
	}))
}

func (a *API) readEvalCase(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
	qctx, cancel := queryContext()
	defer cancel()
	cs, err := a.DB.EvalCase(qctx, evalOwner(c), pathParam(ctx, "id"), pathParam(ctx, "case_id"))
	if err != nil {
		return evalError(err, ErrEvalCaseNotFound)
	}
	return writeJSON(ctx, fasthttp.StatusOK, caseJSON(cs))
}

// updateEvalCase replaces the fields sent and checks the whole case again.
func (a *API) updateEvalCase(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
	patch, cerr := parseConvFields(ctx.PostBody())
	if cerr != nil {
		return cerr
	}
	if len(patch) == 0 {
		return errEvalEmptyPatch
	}
	qctx, cancel := queryContext()
	defer cancel()
	o, suiteID, caseID := evalOwner(c), pathParam(ctx, "id"), pathParam(ctx, "case_id")
	cur, err := a.DB.EvalCase(qctx, o, suiteID, caseID)
	if err != nil {
		return evalError(err, ErrEvalCaseNotFound)
	}
	f, _ := parseConvFields(cur.Body)
	for k, v := range patch {
		if convIsNull(v) {
			delete(f, k)
			continue
		}
		f[k] = v
	}
	merged, _ := json.Marshal(f)
	b, cerr := a.caseBody(c, merged, "")
	if cerr != nil {
		return cerr
	}
	cs, err := a.DB.UpdateEvalCase(qctx, o, suiteID, caseID, b)
	if err != nil {
		return evalError(err, ErrEvalCaseNotFound)
	}
	return writeJSON(ctx, fasthttp.StatusOK, caseJSON(cs))
}

func (a *API) deleteEvalCase(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
	qctx, cancel := queryContext()
	defer cancel()
	if err := a.DB.DeleteEvalCase(qctx, evalOwner(c), pathParam(ctx, "id"), pathParam(ctx, "case_id")); err != nil {
		return evalError(err, ErrEvalCaseNotFound)
	}
	ctx.SetStatusCode(fasthttp.StatusNoContent)
	return nil
}
