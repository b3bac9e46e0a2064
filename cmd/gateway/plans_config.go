package main

import (
	"fmt"
	"sort"

	"github.com/edgegw/gateway/hotpath/meter"
)

// planConfig is one plan in the config file. Omitted fields keep the
// default plan's values.
type planConfig struct {
	RequestsPerMinute    *int64 `yaml:"requests_per_minute"`
	OrgRequestsPerMinute *int64 `yaml:"org_requests_per_minute"`
	TokenCountsPerMinute *int64 `yaml:"token_counts_per_minute"`
	MaxConcurrent        *int64 `yaml:"max_concurrent_requests"`
	PoolMonthly          *int64 `yaml:"pool_monthly_tokens"`
	PoolBurst            *int64 `yaml:"pool_burst_tokens"`
	MiraMonthlyRequests  *int64 `yaml:"mira_monthly_requests"`
	LowPercent           *int64 `yaml:"low_percent"`
}

// defaultPlans is the limits configuration when the file says nothing: one
// plan, "default".
func (st *settings) defaultPlans() {
	st.Plans = []meter.Plan{meter.DefaultPlan()}
	st.DefaultPlan = "default"
}

// applyPlans reads the file's plans over the default one. A plan named
// "default" replaces the built-in one's values it names.
func (st *settings) applyPlans(fc fileConfig) error {
	names := make([]string, 0, len(fc.Plans))
	for name := range fc.Plans {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		pc := fc.Plans[name]
		p := meter.DefaultPlan()
		p.Name = name
		set(&p.RequestsPerMinute, pc.RequestsPerMinute)
		set(&p.OrgRequestsPerMinute, pc.OrgRequestsPerMinute)
		set(&p.TokenCountsPerMinute, pc.TokenCountsPerMinute)
		set(&p.MaxConcurrent, pc.MaxConcurrent)
		set(&p.PoolMonthly, pc.PoolMonthly)
		set(&p.PoolBurst, pc.PoolBurst)
		set(&p.MiraMonthlyRequests, pc.MiraMonthlyRequests)
		set(&p.LowPercent, pc.LowPercent)
		if err := p.Validate(); err != nil {
			return fmt.Errorf("config plans.%s.%w", name, err)
		}
		if name == "default" {
			st.Plans[0] = p
		} else {
			st.Plans = append(st.Plans, p)
		}
	}
	if fc.DefaultPlan != "" {
		if _, ok := fc.Plans[fc.DefaultPlan]; !ok && fc.DefaultPlan != "default" {
			return fmt.Errorf("config default_plan: %q is not a plan in the file", fc.DefaultPlan)
		}
		st.DefaultPlan = fc.DefaultPlan
	}
	return nil
}
