package main

import (
	"math"
	"slices"
	"time"
)

// SharedResult is what one mode of the shared scenario achieved. The JSON names are the -json
// output's; each figure's unit is in its name (_s: seconds, _pct: percent), and docs/demo.md says which
// way is better.
type SharedResult struct {
	Scenario string `json:"scenario"` // "shared"
	Mode     string `json:"mode"`
	// InteractiveP50, P95 and Max are the assistant's latencies: from a question's workflow start to
	// its answer. Lower is better.
	InteractiveP50 float64 `json:"interactive_p50_s"`
	InteractiveP95 float64 `json:"interactive_p95_s"`
	InteractiveMax float64 `json:"interactive_max_s"`
	// ProviderAnswerP95 is the provider's own latency for an answer (the HTTP call alone), p95: what no
	// throttle can take away.
	ProviderAnswerP95 float64 `json:"provider_answer_p95_s"`
	// Batch is from the backfill's start to its last tenant's result; BatchFloor is the least time the
	// quota allows for the tokens and requests of the run (see sharedFloor). Lower is better, and
	// Batch cannot be below BatchFloor.
	Batch      float64 `json:"batch_s"`
	BatchFloor float64 `json:"batch_floor_s"`
	// RateLimited counts the provider's 429s; Retries the Temporal attempts beyond the first;
	// WastedCalls the provider calls that did no work (refused or abandoned). Lower is better.
	RateLimited int64 `json:"rate_limited"`
	Retries     int64 `json:"retries"`
	WastedCalls int64 `json:"wasted_calls"`
	// QuotaShare is the tokens the provider accepted until the backfill ended, as a percent of the
	// quota over that time. Higher is better, up to the provider's burst (above 100% at first: the
	// bucket starts full).
	QuotaShare float64 `json:"quota_share_pct"`
	// SmallestTenant's backfill took SmallestTenantDone; SmallestTenantFair is when it would end with
	// exactly its fair share (1/tenants) of the quota the backfill has: the largest tenant must not
	// push it later than that. LargestTenantDone is the largest tenant's. Lower is better.
	SmallestTenant     string  `json:"smallest_tenant"`
	SmallestTenantDone float64 `json:"smallest_tenant_s"`
	SmallestTenantFair float64 `json:"smallest_tenant_fair_s"`
	LargestTenantDone  float64 `json:"largest_tenant_s"`
	// InputErrorMean and InputErrorMax are the route estimate's error on input tokens: openaicost's
	// count of a call's prompt against the provider's, the absolute difference in percent of the
	// provider's count, mean and largest over the run's successful calls. CharsDiv4ErrorMean and
	// CharsDiv4ErrorMax are what the chars/4 heuristic's would have been on the same calls (computed,
	// not run). Lower is better.
	InputErrorMean     float64 `json:"input_estimate_error_mean_pct"`
	InputErrorMax      float64 `json:"input_estimate_error_max_pct"`
	CharsDiv4ErrorMean float64 `json:"chars_div4_error_mean_pct"`
	CharsDiv4ErrorMax  float64 `json:"chars_div4_error_max_pct"`
	// Summaries and Answers count what completed, out of Docs and Questions.
	Summaries int `json:"summaries"`
	Docs      int `json:"docs"`
	Answers   int `json:"answers"`
	Questions int `json:"questions"`

	// For the report: tokens per minute over time, and every answer's latency in seconds.
	TPM       []Point   `json:"-"`
	Latencies []float64 `json:"-"`
	// Explain are the explanations sampled in the sluice mode with -explain-sample, and
	// ExplainFailures the sampler's failed reads.
	Explain         []explainSample `json:"-"`
	ExplainFailures int             `json:"-"`
}

// result computes the run's figures once every workflow has ended.
func (r *sharedRun) result(work sharedWork) SharedResult {
	r.mu.Lock()
	defer r.mu.Unlock()
	var batch time.Duration
	for _, at := range r.tenantAt {
		batch = max(batch, at)
	}
	lat := make([]float64, len(r.latency))
	for i, d := range r.latency {
		lat[i] = d.Seconds()
	}
	slices.Sort(lat)
	var answerCalls []float64
	for _, d := range r.llm.answerCalls.all() {
		answerCalls = append(answerCalls, d.Seconds())
	}
	slices.Sort(answerCalls)
	ps := r.provider.Stats()
	tl := r.provider.Timeline(r.start, 500*time.Millisecond, 10*time.Second)
	bySize := slices.SortedFunc(slices.Values(r.cfg.Tenants), func(a, b Tenant) int { return a.Docs - b.Docs })
	small, large := bySize[0].Name, bySize[len(bySize)-1].Name
	inputs := r.llm.inputs.all()
	estMean, estMax := inputError(inputs, func(c inputCount) int64 { return c.Estimate })
	c4Mean, c4Max := inputError(inputs, func(c inputCount) int64 { return c.CharsDiv4 })
	return SharedResult{
		Scenario: "shared", Mode: r.mode,
		InteractiveP50: round(quantile(lat, 0.5), 2), InteractiveP95: round(quantile(lat, 0.95), 2),
		InteractiveMax: round(quantile(lat, 1), 2), ProviderAnswerP95: round(quantile(answerCalls, 0.95), 2),
		Batch: round(batch.Seconds(), 1), BatchFloor: round(sharedFloor(r.cfg, work), 1),
		RateLimited: ps.RateLimited, Retries: r.llm.retries.Load(), WastedCalls: ps.Requests - ps.Succeeded,
		QuotaShare:     round(100*float64(r.provider.AcceptedBy(r.start.Add(batch)))/(r.cfg.TPM*batch.Minutes()), 1),
		SmallestTenant: small, SmallestTenantDone: round(r.tenantAt[small].Seconds(), 1),
		SmallestTenantFair: round(fairShare(r.cfg, work, small), 1), LargestTenantDone: round(r.tenantAt[large].Seconds(), 1),
		InputErrorMean: round(estMean, 2), InputErrorMax: round(estMax, 2),
		CharsDiv4ErrorMean: round(c4Mean, 2), CharsDiv4ErrorMax: round(c4Max, 2),
		Summaries: r.batchN, Docs: docCount(work), Answers: r.answered, Questions: len(work.questions),
		TPM: tl, Latencies: lat,
	}
}

// sharedFloor is the least time in which the quota lets the run's calls through: the provider's
// buckets start full, and after that tokens and requests arrive at the quota's rate. The tokens are
// the provider's own count of every summary and every answer (the answers arrive while the backfill
// runs).
func sharedFloor(cfg SharedConfig, work sharedWork) float64 {
	tokens, requests := sum(work.answerTokens), float64(len(work.answerTokens))
	for _, ts := range work.docTokens {
		tokens += sum(ts)
		requests += float64(len(ts))
	}
	tokenRate, requestRate := cfg.TPM/60, cfg.RPM/60
	byTokens := math.Max(0, tokens-tokenRate*cfg.Provider.BurstSeconds) / tokenRate
	byRequests := math.Max(0, requests-math.Floor(requestRate*cfg.Provider.BurstSeconds)) / requestRate
	return math.Max(byTokens, byRequests)
}

// fairShare is when tenant's backfill ends if it gets exactly 1/len(Tenants) of the tokens the
// backfill has (the quota less the answers' tokens), from the start: its tokens x tenants / that rate.
func fairShare(cfg SharedConfig, work sharedWork, tenant string) float64 {
	own, answers := sum(work.docTokens[tenant]), sum(work.answerTokens)
	answerRate := 0.0
	if span := (cfg.Delay + time.Duration(len(work.questions))*cfg.Every).Seconds(); span > 0 {
		answerRate = answers / span
	}
	return own * float64(len(cfg.Tenants)) / (cfg.TPM/60 - answerRate)
}

func docCount(work sharedWork) int {
	n := 0
	for _, ds := range work.docs {
		n += len(ds)
	}
	return n
}

// quantile returns the q-quantile of sorted (nearest rank), or 0 for none.
func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}
