package control

import (
	"bufio"
	"context"
	"encoding/json"
	"strconv"
	"time"

	"github.com/bytedance/sonic"
	"github.com/valyala/fasthttp"

	"github.com/edgegw/gateway/hotpath"
	"github.com/edgegw/gateway/storage"
)

// Run options' bounds (docs/evals.md, Routes).
const (
	evalConcurrencyMax     = 16
	evalConcurrencyDefault = 4
	evalRepeatMax          = 5
)

type evalCountsJSON struct {
	Total     int `json:"total"`
	Queued    int `json:"queued"`
	Running   int `json:"running"`
	Passed    int `json:"passed"`
	Failed    int `json:"failed"`
	Errored   int `json:"errored"`
	Cancelled int `json:"cancelled"`
}

type evalScoreJSON struct {
	Passed   int      `json:"passed"`
	Total    int      `json:"total"`
	PassRate *float64 `json:"pass_rate"`
}

type evalRunJSON struct {
	ID           string                   `json:"id"`
	Object       string                   `json:"object"`
	SuiteID      string                   `json:"suite_id"`
	Tier         string                   `json:"tier"`
	Status       string                   `json:"status"`
	Reason       *string                  `json:"reason"`
	Concurrency  int                      `json:"concurrency"`
	Repeat       int                      `json:"repeat"`
	OnBudget     string                   `json:"on_budget"`
	Counts       evalCountsJSON           `json:"counts"`
	PassRate     *float64                 `json:"pass_rate"`
	Cost         costJSON                 `json:"cost"`
	InputTokens  int64                    `json:"input_tokens"`
	OutputTokens int64                    `json:"output_tokens"`
	Assertions   map[string]evalScoreJSON `json:"assertions"`
	CreatedAt    string                   `json:"created_at"`
	StartedAt    *string                  `json:"started_at"`
	FinishedAt   *string                  `json:"finished_at"`
}

func runJSON(r storage.EvalRun) evalRunJSON {
	c := r.Counts
	out := evalRunJSON{ID: r.ID, Object: "eval.run", SuiteID: r.SuiteID, Tier: r.Tier, Status: r.Status, Reason: r.Reason,
		Concurrency: r.Concurrency, Repeat: r.Repeats, OnBudget: r.OnBudget,
		Counts: evalCountsJSON{Total: c.Total, Queued: c.Queued, Running: c.Running, Passed: c.Passed, Failed: c.Failed,
			Errored: c.Errored, Cancelled: c.Cancelled},
		PassRate: rate(c.Passed, c.Passed+c.Failed+c.Errored), Cost: evalCost(r.CostPico),
		InputTokens: r.InputTokens, OutputTokens: r.OutputTokens, Assertions: map[string]evalScoreJSON{},
		CreatedAt: evalTime(r.CreatedAt), StartedAt: evalOptTime(r.StartedAt), FinishedAt: evalOptTime(r.FinishedAt)}
	for t, s := range r.Assertions {
		out.Assertions[t] = evalScoreJSON{Passed: s.Passed, Total: s.Total, PassRate: rate(s.Passed, s.Total)}
	}
	return out
}

func (a *API) createEvalRun(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
	f, cerr := parseConvFields(ctx.PostBody())
	if cerr != nil {
		return cerr
	}
	for k := range f {
		switch k {
		case "tier", "concurrency", "repeat", "on_budget":
		default:
			return convInvalid(k + ": not an option of a run (tier, concurrency, repeat, on_budget).")
		}
	}
	opt := storage.EvalRunOptions{Concurrency: evalConcurrencyDefault, Repeats: 1, OnBudget: "continue"}
	tier, cerr := f.str("tier")
	if cerr != nil {
		return cerr
	}
	if tier != nil {
		if cerr = a.checkEvalTier("tier", *tier); cerr != nil {
			return cerr
		}
		opt.Tier = *tier
	}
	intField := func(name string, lo, hi int, dst *int) error {
		if !f.given(name) {
			return nil
		}
		var n int
		if err := sonic.Unmarshal(f[name], &n); err != nil || n < lo || n > hi {
			return convInvalid(name + ": must be an integer from " + strconv.Itoa(lo) + " to " + strconv.Itoa(hi) + ".")
		}
		*dst = n
		return nil
	}
	if err := intField("concurrency", 1, evalConcurrencyMax, &opt.Concurrency); err != nil {
		return err
	}
	if err := intField("repeat", 1, evalRepeatMax, &opt.Repeats); err != nil {
		return err
	}
	onBudget, cerr := f.str("on_budget")
	if cerr != nil {
		return cerr
	}
	if onBudget != nil {
		if *onBudget != "continue" && *onBudget != "stop" {
			return convInvalid("on_budget: must be continue or stop.")
		}
		opt.OnBudget = *onBudget
	}
	qctx, cancel := queryContext()
	defer cancel()
	o, suiteID := evalOwner(c), pathParam(ctx, "id")
	if opt.Tier == "" {
		s, err := a.DB.EvalSuite(qctx, o, suiteID)
		if err != nil {
			return evalError(err, ErrEvalSuiteNotFound)
		}
		opt.Tier = s.Tier
	}
	r, err := a.DB.CreateEvalRun(qctx, o, suiteID, c.User.KeyID, opt)
	if err != nil {
		return evalError(err, ErrEvalSuiteNotFound)
	}
	a.evalRunner().Wake()
	return writeJSON(ctx, fasthttp.StatusAccepted, runJSON(r))
}

func (a *API) listEvalRuns(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
	suiteID := pathParam(ctx, "id")
	limit, cur, cerr := evalPaging(ctx, "runs", suiteID)
	if cerr != nil {
		return cerr
	}
	qctx, cancel := queryContext()
	defer cancel()
	list, err := a.DB.ListEvalRuns(qctx, evalOwner(c), suiteID, limit, cur.page())
	if err != nil {
		return evalError(err, ErrEvalSuiteNotFound)
	}
	data := make([]evalRunJSON, len(list))
	for i := range list {
		data[i] = runJSON(list[i])
	}
	return writeJSON(ctx, fasthttp.StatusOK, evalList(data, limit, func(*evalRunJSON) evalCursor {
		last := list[len(list)-1]
		return evalCursor{Kind: "runs", Scope: suiteID, AtUS: last.CreatedAt.UnixMicro(), ID: last.ID}
	}))
}

func (a *API) readEvalRun(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
	qctx, cancel := queryContext()
	defer cancel()
	r, err := a.DB.EvalRun(qctx, evalOwner(c), pathParam(ctx, "run_id"))
	if err != nil {
		return evalError(err, ErrEvalRunNotFound)
	}
	return writeJSON(ctx, fasthttp.StatusOK, runJSON(r))
}

func (a *API) cancelEvalRun(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
	qctx, cancel := queryContext()
	defer cancel()
	r, err := a.DB.CancelEvalRun(qctx, evalOwner(c), pathParam(ctx, "run_id"))
	if err != nil {
		return evalError(err, ErrEvalRunNotFound)
	}
	return writeJSON(ctx, fasthttp.StatusOK, runJSON(r))
}

type evalVerdictJSON struct {
	Type   string `json:"type"`
	Passed bool   `json:"passed"`
	Reason string `json:"reason"`
}

type evalResultJSON struct {
	ID           string            `json:"id"`
	Object       string            `json:"object"`
	CaseID       string            `json:"case_id"`
	Repeat       int               `json:"repeat"`
	Status       string            `json:"status"`
	ErrorCode    *string           `json:"error_code"`
	Reply        *string           `json:"reply"`
	ToolCalls    json.RawMessage   `json:"tool_calls"`
	Assertions   []evalVerdictJSON `json:"assertions"`
	InputTokens  int64             `json:"input_tokens"`
	OutputTokens int64             `json:"output_tokens"`
	Cost         costJSON          `json:"cost"`
	LatencyMS    int64             `json:"latency_ms"`
	Attempts     int               `json:"attempts"`
	FinishedAt   *string           `json:"finished_at"`
}

var evalResultStatuses = map[string]bool{"": true, "queued": true, "running": true, "passed": true, "failed": true,
	"errored": true, "cancelled": true}

func (a *API) listEvalResults(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
	runID := pathParam(ctx, "run_id")
	status := string(ctx.QueryArgs().Peek("status"))
	if !evalResultStatuses[status] {
		return convInvalid("status: must be queued, running, passed, failed, errored or cancelled.")
	}
	limit, cur, cerr := evalPaging(ctx, "results:"+status, runID)
	if cerr != nil {
		return cerr
	}
	var after *storage.EvalResultPage
	if cur != nil {
		after = &storage.EvalResultPage{Seq: cur.Seq, Repeat: cur.Repeat}
	}
	qctx, cancel := queryContext()
	defer cancel()
	list, err := a.DB.EvalResults(qctx, evalOwner(c), runID, status, limit, after)
	if err != nil {
		return evalError(err, ErrEvalRunNotFound)
	}
	data := make([]evalResultJSON, len(list))
	for i, r := range list {
		d := evalResultJSON{ID: r.ID, Object: "eval.result", CaseID: r.CaseID, Repeat: r.Repeat, Status: r.Status,
			ErrorCode: r.ErrorCode, Reply: r.Reply, ToolCalls: r.ToolCalls, Assertions: []evalVerdictJSON{},
			InputTokens: r.InputTokens, OutputTokens: r.OutputTokens, Cost: evalCost(r.CostPico), LatencyMS: r.LatencyMS,
			Attempts: r.Attempts, FinishedAt: evalOptTime(r.FinishedAt)}
		if len(d.ToolCalls) == 0 {
			d.ToolCalls = jsonNull
		}
		if len(r.Verdicts) > 0 {
			_ = json.Unmarshal(r.Verdicts, &d.Assertions)
		}
		data[i] = d
	}
	return writeJSON(ctx, fasthttp.StatusOK, evalList(data, limit, func(*evalResultJSON) evalCursor {
		last := list[len(list)-1]
		return evalCursor{Kind: "results:" + status, Scope: runID, Seq: last.Seq, Repeat: last.Repeat}
	}))
}

type evalDiffJSON struct {
	CaseID         string `json:"case_id"`
	Change         string `json:"change"`
	Passed         int    `json:"passed"`
	Total          int    `json:"total"`
	BaselinePassed int    `json:"baseline_passed"`
	BaselineTotal  int    `json:"baseline_total"`
}

func (a *API) compareEvalRuns(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
	baseline := string(ctx.QueryArgs().Peek("baseline"))
	if baseline == "" {
		return errEvalBaseline
	}
	qctx, cancel := queryContext()
	defer cancel()
	run, base, diffs, err := a.DB.CompareEvalRuns(qctx, evalOwner(c), pathParam(ctx, "run_id"), baseline)
	if err != nil {
		return evalError(err, ErrEvalRunNotFound)
	}
	rj, bj := runJSON(run), runJSON(base)
	out := struct {
		Object           string         `json:"object"`
		RunID            string         `json:"run_id"`
		BaselineID       string         `json:"baseline_id"`
		PassRate         *float64       `json:"pass_rate"`
		BaselinePassRate *float64       `json:"baseline_pass_rate"`
		PassRateDelta    *float64       `json:"pass_rate_delta"`
		Regressions      int            `json:"regressions"`
		Fixes            int            `json:"fixes"`
		Data             []evalDiffJSON `json:"data"`
	}{Object: "eval.comparison", RunID: run.ID, BaselineID: base.ID, PassRate: rj.PassRate,
		BaselinePassRate: bj.PassRate, Data: []evalDiffJSON{}}
	if rj.PassRate != nil && bj.PassRate != nil {
		d := float64(int64((*rj.PassRate-*bj.PassRate)*10000+sign(*rj.PassRate-*bj.PassRate)*0.5)) / 10000
		out.PassRateDelta = &d
	}
	for _, d := range diffs {
		change := "fixed"
		if d.Passed < d.Total {
			change = "regressed"
			out.Regressions++
		} else {
			out.Fixes++
		}
		out.Data = append(out.Data, evalDiffJSON{CaseID: d.CaseID, Change: change, Passed: d.Passed, Total: d.Total,
			BaselinePassed: d.BaselinePassed, BaselineTotal: d.BaselineTotal})
	}
	return writeJSON(ctx, fasthttp.StatusOK, out)
}

func sign(f float64) float64 {
	if f < 0 {
		return -1
	}
	return 1
}

// evalEventsEvery is how often the events stream reads the run.
const evalEventsEvery = 250 * time.Millisecond

// evalRunEvents streams a run's progress until it ends (docs/evals.md,
// Events).
func (a *API) evalRunEvents(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
	o, runID := evalOwner(c), pathParam(ctx, "run_id")
	qctx, cancel := queryContext()
	first, err := a.DB.EvalRun(qctx, o, runID)
	cancel()
	if err != nil {
		return evalError(err, ErrEvalRunNotFound)
	}
	ctx.SetContentType("text/event-stream")
	ctx.Response.Header.Set("Cache-Control", "no-store")
	db, log, draining := a.DB, a.Log, &a.draining
	ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
		run := first
		var last []byte
		quiet := time.Now()
		for {
			ended := run.Status == storage.EvalRunCompleted || run.Status == storage.EvalRunFailed ||
				run.Status == storage.EvalRunCancelled
			body, _ := sonic.Marshal(runJSON(run))
			switch {
			case ended:
				writeEvent(w, "end", body)
				_ = w.Flush()
				return
			case string(body) != string(last):
				writeEvent(w, "progress", body)
				last, quiet = body, time.Now()
				if w.Flush() != nil {
					return
				}
			case time.Since(quiet) > 15*time.Second:
				_, _ = w.WriteString(": keep-alive\n\n")
				quiet = time.Now()
				if w.Flush() != nil {
					return
				}
			}
			time.Sleep(evalEventsEvery)
			if draining.Load() {
				// The process is shutting down: the client reconnects to
				// another and reads on from the run's state there.
				return
			}
			qctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
			next, err := db.EvalRun(qctx, o, runID)
			cancel()
			if err != nil {
				// Deleted with its suite, or the database is gone: end the
				// stream without an end event; the client reads the run.
				log.Warn("eval events stream ended early", "run_id", runID, "err", err)
				return
			}
			run = next
		}
	})
	return nil
}

func writeEvent(w *bufio.Writer, name string, data []byte) {
	_, _ = w.WriteString("event: ")
	_, _ = w.WriteString(name)
	_, _ = w.WriteString("\ndata: ")
	_, _ = w.Write(data)
	_, _ = w.WriteString("\n\n")
}
