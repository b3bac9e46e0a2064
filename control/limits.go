package control

import (
	"context"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/edgegw/gateway/codec"
	"github.com/edgegw/gateway/hotpath"
	"github.com/edgegw/gateway/hotpath/meter"
)

// registerLimits adds GET /api/v1/limits. It peeks at the request window
// instead of counting in it and writes no ledger row: reading one's limits
// costs and writes nothing, yet a full window still refuses it.
func (a *API) registerLimits(r Registrar) {
	if a.Limits == nil {
		return
	}
	r.Handle(fasthttp.MethodGet, "/api/v1/limits", hotpath.Access{Name: "limits", Auth: hotpath.AuthUser,
		Family: hotpath.FamilyLimits, Rate: hotpath.RatePeek, Unlogged: true}, a.limits)
}

// usd is an amount in pico-USD written as an exact JSON number of USD.
type usd int64

func (u usd) MarshalJSON() ([]byte, error) { return codec.AppendDecimal(nil, int64(u), 12), nil }

// rfc3339 is a Unix second written as an RFC 3339 UTC time, or null for 0.
type rfc3339 int64

func (t rfc3339) MarshalJSON() ([]byte, error) {
	if t == 0 {
		return []byte("null"), nil
	}
	return []byte(`"` + time.Unix(int64(t), 0).UTC().Format(time.RFC3339) + `"`), nil
}

type windowView struct {
	Limit         int64   `json:"limit"`
	Remaining     int64   `json:"remaining"`
	ResetsAt      rfc3339 `json:"resets_at"`
	WindowSeconds int64   `json:"window_seconds"`
}

type chatLimits struct {
	PerKey        windowView `json:"per_key"`
	PerOrg        windowView `json:"per_org"`
	MaxConcurrent int64      `json:"max_concurrent_requests"`
}

type poolView struct {
	Cap       int64   `json:"cap"`
	Used      int64   `json:"used"`
	Remaining int64   `json:"remaining"`
	ResetsAt  rfc3339 `json:"resets_at"`
	State     string  `json:"state"`
}

type tokenPool struct {
	Monthly       poolView `json:"monthly"`
	Burst         poolView `json:"burst"`
	State         string   `json:"state"`
	BlockedModels []string `json:"blocked_models"`
	Unit          string   `json:"unit"`
	Mira          poolView `json:"mira"`
}

type creditsView struct {
	Granted    usd     `json:"granted"`
	Adjustment usd     `json:"adjustment"`
	Used       usd     `json:"used"`
	Remaining  usd     `json:"remaining"`
	ResetsAt   rfc3339 `json:"resets_at"`
}

type capView struct {
	Cap       usd     `json:"cap"`
	Spent     usd     `json:"spent"`
	Remaining usd     `json:"remaining"`
	ResetsAt  rfc3339 `json:"resets_at"`
}

type limitsView struct {
	Object     string `json:"object"`
	Bucket     string `json:"bucket"`
	Metered    *bool  `json:"metered,omitempty"`
	Tier       string `json:"tier"`
	RateLimits struct {
		Chat chatLimits `json:"chat"`
	} `json:"rate_limits"`
	TokenPool         *tokenPool   `json:"token_pool,omitempty"`
	Credits           *creditsView `json:"credits,omitempty"`
	KeySpendCap       *capView     `json:"key_spend_cap,omitempty"`
	WorkspaceSpendCap *capView     `json:"workspace_spend_cap,omitempty"`
}

var errLimitsUnavailable = codec.NewError(codec.CodeLimitsUnavailable,
	"The usage counters cannot be read right now; retry shortly.")

// limits answers the caller's limits from the state enforcement uses.
func (a *API) limits(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
	p, l := c.User, a.Limits
	pl := l.PlanOf(p)
	now := time.Now()
	qctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()

	key, org, err := l.PeekWindows(qctx, now, p)
	if err != nil {
		return errLimitsUnavailable
	}
	v := limitsView{Object: "limits", Bucket: p.Kind.Bucket(), Tier: pl.Name}
	if p.Kind == hotpath.KindDeveloper {
		t := true
		v.Metered = &t
	}
	window := int64(meter.RateWindow / time.Second)
	v.RateLimits.Chat = chatLimits{
		PerKey:        windowView{key.Limit, key.Remaining, rfc3339(key.ResetAt), window},
		PerOrg:        windowView{org.Limit, org.Remaining, rfc3339(org.ResetAt), window},
		MaxConcurrent: pl.MaxConcurrent,
	}

	// Every budget that applies, read in one call.
	var budgets []meter.Budget
	add := func(b meter.Budget) int { budgets = append(budgets, b); return len(budgets) - 1 }
	keyCap, wsCap, credits, monthly, burst, mira := -1, -1, -1, -1, -1, -1
	if p.SpendCapMicros >= 0 {
		keyCap = add(meter.Budget{Kind: meter.BudgetKeySpend, Subject: p.KeyID, Cap: meter.PicoUSD(p.SpendCapMicros), Tenant: p.OrgID})
	}
	if p.WorkspaceID != "" && p.WorkspaceCapMicros >= 0 {
		wsCap = add(meter.Budget{Kind: meter.BudgetWorkspaceSpend, Subject: p.WorkspaceID, Cap: meter.PicoUSD(p.WorkspaceCapMicros), Tenant: p.OrgID})
	}
	if p.Kind == hotpath.KindHeadless {
		credits = add(meter.Budget{Kind: meter.BudgetCredits, Subject: p.KeyID, Cap: meter.PicoUSD(p.CreditsCapMicros()), Tenant: p.OrgID})
	}
	if meter.Subscription(p) {
		monthly = add(meter.Budget{Kind: meter.BudgetPoolMonthly, Subject: p.OrgID, Cap: pl.PoolMonthly, Tenant: p.OrgID})
		burst = add(meter.Budget{Kind: meter.BudgetPoolBurst, Subject: p.OrgID, Cap: pl.PoolBurst, Tenant: p.OrgID})
		mira = add(meter.Budget{Kind: meter.BudgetMiraRequests, Subject: p.OrgID, Cap: pl.MiraMonthlyRequests, Tenant: p.OrgID})
	}
	st := make([]meter.BudgetState, len(budgets))
	if len(budgets) > 0 {
		if err := l.Counters().Usage(qctx, now, budgets, st); err != nil {
			return errLimitsUnavailable
		}
	}
	month := rfc3339(meter.NextMonth(now).Unix())
	money := func(i int) *capView {
		b, s := budgets[i], st[i]
		return &capView{Cap: usd(b.Cap), Spent: usd(s.Used), Remaining: usd(max(b.Cap-s.Used, 0)), ResetsAt: month}
	}
	if keyCap >= 0 {
		v.KeySpendCap = money(keyCap)
	}
	if wsCap >= 0 {
		v.WorkspaceSpendCap = money(wsCap)
	}
	if credits >= 0 {
		granted := meter.PicoUSD(max(p.CreditsMicros, 0))
		v.Credits = &creditsView{Granted: usd(granted), Adjustment: usd(meter.PicoUSD(p.CreditsAdjustMicros)),
			Used: usd(st[credits].Used), Remaining: usd(max(budgets[credits].Cap-st[credits].Used, 0))}
	}
	if monthly >= 0 {
		pool := func(i int, reset rfc3339) poolView {
			b, s := budgets[i], st[i]
			if reset == 0 {
				reset = rfc3339(s.ResetAt)
			}
			return poolView{Cap: b.Cap, Used: s.Used, Remaining: max(b.Cap-s.Used, 0), ResetsAt: reset,
				State: pl.State(s.Used, b.Cap).String()}
		}
		tp := &tokenPool{Monthly: pool(monthly, month), Burst: pool(burst, 0), Mira: pool(mira, month),
			Unit: "weighted_tokens", BlockedModels: []string{}}
		worst := max(pl.State(st[monthly].Used, pl.PoolMonthly), pl.State(st[burst].Used, pl.PoolBurst))
		tp.State = worst.String()
		if worst == meter.PoolBlocked {
			tp.BlockedModels = append(tp.BlockedModels, l.PooledTiers()...)
		}
		if pl.State(st[mira].Used, pl.MiraMonthlyRequests) == meter.PoolBlocked {
			tp.BlockedModels = append(tp.BlockedModels, l.RequestCappedTiers()...)
		}
		v.TokenPool = tp
	}
	return writeJSON(ctx, fasthttp.StatusOK, v)
}
