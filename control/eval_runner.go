package control

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edgegw/gateway/codec"
	"github.com/edgegw/gateway/hotpath"
	"github.com/edgegw/gateway/storage"
)

// EvalConfig configures the eval routes.
type EvalConfig struct {
	// Chat is the chat pipeline runs go through; nil leaves the eval
	// routes out.
	Chat EvalChat
	// Runner works runs in this process; nil leaves them to other
	// processes (the routes still queue them).
	Runner *EvalRunner
}

// EvalRunner works the eval queue in PostgreSQL: it claims items of any
// run, runs them through the chat pipeline under the key that started the
// run, judges the replies and writes the results (docs/evals.md,
// Execution). Every gateway process may run one; they share the work.
type EvalRunner struct {
	DB   *storage.DB
	Chat EvalChat
	Log  *slog.Logger
	// Workers is how many items this process runs at once; 0 runs none.
	Workers int
	// FleetConcurrency caps the items running at once across every
	// process. Default 32.
	FleetConcurrency int
	// Lease is how long a claim lives without a heartbeat. Default 30s.
	Lease time.Duration
	// Poll is how often an idle runner looks for work. Default 500ms.
	Poll time.Duration
	// Ledger, when set, is flushed before each result is written, so that
	// a run's cost, the sum of its ledger rows, is whole once its last
	// result is: the run's end event and reads carry it.
	Ledger interface{ Flush(context.Context) error }

	once    sync.Once
	wake    chan struct{}
	errLogs hotpath.LogLimiter
}

func (r *EvalRunner) init() {
	r.once.Do(func() {
		r.wake = make(chan struct{}, 1)
		if r.FleetConcurrency <= 0 {
			r.FleetConcurrency = 32
		}
		if r.Lease <= 0 {
			r.Lease = 30 * time.Second
		}
		if r.Poll <= 0 {
			r.Poll = 500 * time.Millisecond
		}
	})
}

func (a *API) evalRunner() *EvalRunner { return a.Evals.Runner }

// Wake has an idle runner look for work now (a run was just queued).
func (r *EvalRunner) Wake() {
	if r == nil {
		return
	}
	r.init()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Run claims and works items until ctx ends, then waits for the items it
// holds to finish (each is bounded by its tier's deadline).
func (r *EvalRunner) Run(ctx context.Context) {
	r.init()
	if r.Workers <= 0 {
		return
	}
	slots := make(chan struct{}, r.Workers)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		cctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
		it, err := r.DB.ClaimEvalItem(cctx, r.Lease, r.FleetConcurrency)
		cancel()
		if err != nil || it == nil {
			<-slots
			if err != nil {
				r.logError("cannot claim eval work", err)
			}
			select {
			case <-ctx.Done():
				return
			case <-r.wake:
			case <-time.After(r.Poll):
			}
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.work(it)
			<-slots
			r.Wake()
		}()
	}
}

func (r *EvalRunner) logError(msg string, err error) {
	if ok, n := r.errLogs.Allow(); ok {
		r.Log.Error(msg, "err", err, "suppressed", n)
	}
}

// work runs one claimed item and writes its result while the claim holds.
func (r *EvalRunner) work(it *storage.EvalItem) {
	var lost atomic.Bool
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(r.Lease / 3)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
				held, err := r.DB.ExtendEvalLease(ctx, it, r.Lease)
				cancel()
				if err == nil && !held {
					lost.Store(true)
					return
				}
			}
		}
	}()
	out, stopRun, ok := r.execute(it)
	close(stop)
	<-done
	if !ok || lost.Load() {
		return // the claim lapses and another attempt takes the item
	}
	ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
	defer cancel()
	if r.Ledger != nil {
		// A row the ledger cannot write now waits in its spool; the
		// result is written anyway, and the cost catches up on replay.
		if err := r.Ledger.Flush(ctx); err != nil {
			r.logError("cannot flush the ledger before an eval result", err)
		}
	}
	if _, err := r.DB.FinishEvalItem(ctx, it, out, stopRun); err != nil {
		r.logError("cannot write eval result", err)
	}
}

// budgetCodes are the refusals on_budget applies to.
var budgetCodes = map[codec.Code]bool{codec.CodeBudgetExhausted: true, codec.CodeKeySpendCapExceeded: true,
	codec.CodeWorkspaceSpendCapExceeded: true, codec.CodeCreditsExhausted: true}

// transientCodes are refusals retried within one claim.
var transientCodes = map[codec.Code]bool{codec.CodeRateLimited: true, codec.CodeUpstreamOverloaded: true,
	codec.CodeModelUnavailable: true}

// evalTurnTries bounds the calls of one turn (the first and its retries).
const evalTurnTries = 3

// execute runs the case and its judges. ok false means the item could not
// be worked now (the database failed, or the claim was lost) and is left
// to its lease. stopRun names why the whole run must end, if it must.
func (r *EvalRunner) execute(it *storage.EvalItem) (out storage.EvalOutcome, stopRun string, ok bool) {
	ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
	p, err := r.DB.LookupKeyByID(ctx, it.Run.KeyID)
	cancel()
	switch {
	case errors.Is(err, hotpath.ErrKeyNotFound):
		return storage.EvalOutcome{Status: "errored", ErrorCode: codec.CodeUnauthorized.String()}, "key_revoked", true
	case err != nil:
		r.logError("cannot look up an eval run's key", err)
		return out, "", false
	}
	if cerr := p.Refusal(time.Now().Unix()); cerr != nil {
		reason := "key_revoked"
		if cerr.Code == codec.CodeAccountSuspended {
			reason = cerr.Code.String()
		}
		return storage.EvalOutcome{Status: "errored", ErrorCode: cerr.Code.String()}, reason, true
	}
	var ec evalCase
	if err := json.Unmarshal(it.Body, &ec); err != nil {
		return storage.EvalOutcome{Status: "errored", ErrorCode: codec.CodeInternalError.String()}, "", true
	}
	base := "eval-" + it.ID + "-" + strconv.Itoa(it.Attempt)
	res, ok := r.turn(it, p, ec.chatBody(it.Run.Tier), base, "eval_case", &out)
	if !ok {
		return out, "", false
	}
	out.LatencyMS = res.Latency.Milliseconds()
	if res.Err == nil || res.Err.Code == codec.CodeStructuredOutputUnsatisfied {
		reply := res.Content
		out.Reply = &reply
		if len(res.ToolCalls) > 0 {
			out.ToolCalls = res.ToolCalls
		}
	}
	if res.Err != nil {
		out.Status, out.ErrorCode = "errored", res.Err.Code.String()
		if budgetCodes[res.Err.Code] && it.Run.OnBudget == "stop" {
			stopRun = out.ErrorCode
		}
		return out, stopRun, true
	}
	verdicts := make([]evalVerdictJSON, 0, len(ec.Assertions))
	passed := true
	judges := 0
	for _, as := range ec.Assertions {
		var v evalVerdictJSON
		if as.Type == "judge" {
			tier := as.Tier
			if tier == "" {
				tier = it.Run.Tier
			}
			jres, ok := r.turn(it, p, judgeBody(tier, &ec, &res, as.Rubric), base+"-j"+strconv.Itoa(judges), "eval_judge", &out)
			judges++
			if !ok {
				return out, "", false
			}
			if jres.Err != nil {
				// No verdict: the result is errored with the judge's code.
				out.Status, out.ErrorCode = "errored", jres.Err.Code.String()
				if budgetCodes[jres.Err.Code] && it.Run.OnBudget == "stop" {
					stopRun = out.ErrorCode
				}
				verdicts = append(verdicts, evalVerdictJSON{Type: as.Type, Reason: "the judge gave no verdict: " + out.ErrorCode})
				out.Verdicts, _ = json.Marshal(verdicts)
				return out, stopRun, true
			}
			v = judgeVerdict(jres.Content)
		} else {
			v = r.assess(&as, &res)
		}
		passed = passed && v.Passed
		verdicts = append(verdicts, v)
	}
	out.Verdicts, _ = json.Marshal(verdicts)
	out.Status = "failed"
	if passed {
		out.Status = "passed"
	}
	return out, "", true
}

// turn makes one pipeline call, retrying transient refusals, each call
// under its own request id noted on the item first. Tokens and cost add up
// in out. ok is false when the claim was lost or the database failed.
func (r *EvalRunner) turn(it *storage.EvalItem, p *hotpath.Principal, body []byte, requestID, route string, out *storage.EvalOutcome) (res hotpath.TurnResult, ok bool) {
	for try := 0; ; try++ {
		id := requestID
		if try > 0 {
			id += "-r" + strconv.Itoa(try)
		}
		ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
		held, err := r.DB.NoteEvalRequest(ctx, it, id)
		cancel()
		if err != nil || !held {
			if err != nil {
				r.logError("cannot note an eval request", err)
			}
			return res, false
		}
		res = r.Chat.Complete(p, body, id, route)
		if res.Err != nil && res.Err.Code == codec.CodeServerShuttingDown {
			// This process cut the call as it shut down: not the case's
			// result. Its lease brings it to another process.
			return res, false
		}
		out.InputTokens += res.InputTokens
		out.OutputTokens += res.OutputTokens
		out.CostPico += res.CostPico
		if res.Err == nil || !transientCodes[res.Err.Code] || try+1 == evalTurnTries {
			return res, true
		}
		wait := time.Duration(res.Err.Detail.RetryAfter) * time.Second
		time.Sleep(min(max(wait, 200*time.Millisecond), 5*time.Second))
	}
}
