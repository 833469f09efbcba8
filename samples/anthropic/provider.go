package main

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"time"
)

// ProviderConfig is the fake provider's quota and speed.
type ProviderConfig struct {
	// RPM, ITPM and OTPM are the requests, input tokens and output tokens per minute the account
	// allows, each a continuously refilled bucket.
	RPM, ITPM, OTPM float64
	// BurstSeconds is how many seconds' worth of each quota a bucket holds when full: a per-minute
	// quota is enforced over shorter windows, so a full minute's worth at once is never allowed.
	BurstSeconds float64
	// BaseLatency and PerOutputToken make a call's latency: BaseLatency + PerOutputToken x its output
	// tokens.
	BaseLatency, PerOutputToken time.Duration
	// OutputBase and OutputPerInput make an answer's length: OutputBase + OutputPerInput x the tokens
	// of the last user message, capped at the request's max_tokens.
	OutputBase     int64
	OutputPerInput float64
	// HeadersAfterAdjustment writes a successful response's rate-limit headers after the unused
	// max_tokens went back to the output bucket, rather than before. Anthropic does not say which it
	// does (a streamed response's headers leave before any output exists, so they cannot include
	// it). Sluice counts a call's give-back when it completes, after it read the headers: with this
	// set, it counts it twice until the next response's headers correct it, which can let one call
	// through that the provider refuses.
	HeadersAfterAdjustment bool
}

// bucket is a continuously refilled bucket: level units at at.
type bucket struct {
	level float64
	at    time.Time
}

func (b *bucket) refill(now time.Time, rate, capacity float64) {
	if b.at.IsZero() {
		b.level, b.at = capacity, now
		return
	}
	if now.After(b.at) {
		b.level = math.Min(capacity, b.level+rate*now.Sub(b.at).Seconds())
		b.at = now
	}
}

// untilFull is how long the bucket takes to refill to capacity.
func (b *bucket) untilFull(rate, capacity float64) time.Duration {
	return seconds(math.Max(0, capacity-b.level) / rate)
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// dimension is one of the provider's quotas: its name in the anthropic-ratelimit-* headers, its
// per-minute limit and its bucket.
type dimension struct {
	name     string
	perMin   float64
	capacity float64
	b        bucket
}

func (d *dimension) rate() float64            { return d.perMin / 60 }
func (d *dimension) refill(now time.Time)     { d.b.refill(now, d.rate(), d.capacity) }
func (d *dimension) giveBack(n float64)       { d.b.level = math.Min(d.capacity, d.b.level+n) }
func (d *dimension) untilFull() time.Duration { return d.b.untilFull(d.rate(), d.capacity) }
func (d *dimension) waitFor(need float64) (w time.Duration) {
	need = math.Min(need, d.capacity) // a call larger than the bucket is admitted when it is full
	if d.b.level >= need {
		return 0
	}
	return seconds((need - d.b.level) / d.rate())
}

// Provider is a fake of Anthropic's Messages API (POST /v1/messages and /v1/messages/count_tokens)
// that enforces an account's three quotas the way Anthropic documents them: requests, input tokens
// and output tokens per minute, each a continuously refilled bucket.
//
// At admission a call is charged one request, its input tokens (the uncached ones and those written
// to the prompt cache; tokens read from the cache do not count), and its max_tokens as the estimate
// of its output; when it completes, the unused part of max_tokens is given back. A call that does not
// fit gets 429 with retry-after (whole seconds) and a rate_limit_error body, and still counts its
// request. Every response carries the anthropic-ratelimit-* headers, resets in RFC 3339; those of an
// answer are as of the moment it is ready, before its unused max_tokens go back (see
// ProviderConfig.HeadersAfterAdjustment).
//
// Input tokens are counted by a stand-in tokenizer (countText: a token per word and per punctuation
// mark), the same for count_tokens and for the charge, so that an estimate made with count_tokens is
// exact. count_tokens itself is not rate limited here.
type Provider struct {
	cfg ProviderConfig
	srv *httptest.Server

	mu            sync.Mutex
	req, in, out  dimension
	cache         map[string]bool // cacheable prefixes written to the prompt cache
	log           usageLog
	limited       int64 // 429s sent
	inflight      int64
	countRequests int64 // count_tokens calls
	ids           int64
}

// NewProvider starts a provider on a local port.
func NewProvider(cfg ProviderConfig) *Provider {
	bs := cfg.BurstSeconds
	p := &Provider{
		cfg:   cfg,
		req:   dimension{name: "requests", perMin: cfg.RPM, capacity: math.Max(1, math.Floor(cfg.RPM/60*bs))},
		in:    dimension{name: "input-tokens", perMin: cfg.ITPM, capacity: math.Max(1, cfg.ITPM/60*bs)},
		out:   dimension{name: "output-tokens", perMin: cfg.OTPM, capacity: math.Max(1, cfg.OTPM/60*bs)},
		cache: map[string]bool{},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/messages", p.messages)
	mux.HandleFunc("POST /v1/messages/count_tokens", p.countTokens)
	p.srv = httptest.NewServer(mux)
	return p
}

// URL is the provider's base URL, for option.WithBaseURL.
func (p *Provider) URL() string { return p.srv.URL }

// Close stops the provider.
func (p *Provider) Close() { p.srv.Close() }

// Bursts are the capacities of the provider's buckets: requests, input and output tokens.
func (p *Provider) Bursts() (requests, input, output float64) {
	return p.req.capacity, p.in.capacity, p.out.capacity
}

// ProviderStats are the provider's counters.
type ProviderStats struct {
	RateLimited, Succeeded, Inflight, CountRequests int64
}

// Stats returns the provider's counters.
func (p *Provider) Stats() ProviderStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return ProviderStats{RateLimited: p.limited, Succeeded: p.log.succeeded(), Inflight: p.inflight, CountRequests: p.countRequests}
}

// countTokens answers POST /v1/messages/count_tokens with the input tokens the provider would count
// for the same request: {"input_tokens": N}.
func (p *Provider) countTokens(w http.ResponseWriter, r *http.Request) {
	req, err := decodeRequest(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", err.Error())
		return
	}
	p.mu.Lock()
	p.countRequests++
	p.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]int64{"input_tokens": req.prompt().total()})
}

// messages answers POST /v1/messages.
func (p *Provider) messages(w http.ResponseWriter, r *http.Request) {
	req, err := decodeRequest(r)
	if err == nil && req.MaxTokens < 1 {
		err = fmt.Errorf("max_tokens: must be at least 1, got %d", req.MaxTokens)
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", err.Error())
		return
	}
	pr := req.prompt()
	natural := p.cfg.OutputBase + int64(p.cfg.OutputPerInput*float64(pr.last))
	output, stop := min(req.MaxTokens, natural), "end_turn"
	if natural > req.MaxTokens {
		stop = "max_tokens"
	}

	p.mu.Lock()
	u, call, wait := p.admit(time.Now(), req, pr)
	if wait > 0 {
		p.limited++
		p.setHeaders(w.Header(), time.Now())
		p.mu.Unlock()
		w.Header().Set("retry-after", strconv.Itoa(int(math.Ceil(wait.Seconds()))))
		writeError(w, http.StatusTooManyRequests, "rate_limit_error", fmt.Sprintf(
			"This request would exceed your organization's rate limit (%.0f requests, %.0f input tokens, %.0f output tokens per minute). Please try again in %s.",
			p.cfg.RPM, p.cfg.ITPM, p.cfg.OTPM, wait.Round(time.Millisecond)))
		return
	}
	p.mu.Unlock()

	// The model "generates" the answer.
	t := time.NewTimer(p.cfg.BaseLatency + time.Duration(output)*p.cfg.PerOutputToken)
	select {
	case <-t.C:
	case <-r.Context().Done(): // the caller went away: the whole charge stands, nothing is given back
		t.Stop()
		p.mu.Lock()
		p.inflight--
		p.log.complete(call, time.Now(), req.MaxTokens, false)
		p.mu.Unlock()
		return
	}

	p.mu.Lock()
	now := time.Now()
	p.inflight--
	p.log.complete(call, now, output, true)
	if !p.cfg.HeadersAfterAdjustment {
		p.setHeaders(w.Header(), now)
	}
	// Anthropic estimates a call's output from max_tokens at its start and adjusts the estimate to
	// the real output at its end: the unused part goes back to the bucket.
	p.out.refill(now)
	p.out.giveBack(float64(req.MaxTokens - output))
	if p.cfg.HeadersAfterAdjustment {
		p.setHeaders(w.Header(), now)
	}
	p.ids++
	id := p.ids
	p.mu.Unlock()
	u.OutputTokens = output
	writeMessage(w, id, req.Model, stop, u)
}

// admit charges a call's request, input and max_tokens if all three fit, and returns its usage (all
// but the output), its entry in the log, and 0; or, when it does not fit, how long until it would.
// p.mu is held.
func (p *Provider) admit(now time.Time, req *messagesRequest, pr promptCount) (usage, int, time.Duration) {
	for _, d := range []*dimension{&p.req, &p.in, &p.out} {
		d.refill(now)
	}
	if w := p.req.waitFor(1); w > 0 {
		return usage{}, 0, w
	}
	p.req.b.level-- // a refused call still counts as a request
	p.log.request(now)
	u := usage{InputTokens: pr.total() - pr.cacheable}
	if pr.cacheable > 0 {
		if p.cache[pr.cacheKey] {
			u.CacheReadInputTokens = pr.cacheable
		} else {
			u.CacheCreationInputTokens = pr.cacheable
		}
	}
	input := float64(u.InputTokens + u.CacheCreationInputTokens) // cache reads do not count toward ITPM
	if w := max(p.in.waitFor(input), p.out.waitFor(float64(req.MaxTokens))); w > 0 {
		return usage{}, 0, w
	}
	p.in.b.level -= input
	p.out.b.level -= float64(req.MaxTokens)
	if pr.cacheable > 0 {
		p.cache[pr.cacheKey] = true
	}
	p.inflight++
	return u, p.log.admit(now, int64(input), pr.total(), req.MaxTokens), 0
}

// setHeaders writes Anthropic's rate-limit headers as of the buckets' state at now. The
// anthropic-ratelimit-tokens-* family repeats the more restrictive of the input and output budgets:
// the one with fewer tokens remaining. p.mu is held.
func (p *Provider) setHeaders(h http.Header, now time.Time) {
	set := func(family string, d *dimension) {
		d.refill(now)
		h.Set("anthropic-ratelimit-"+family+"-limit", strconv.FormatFloat(d.perMin, 'f', 0, 64))
		h.Set("anthropic-ratelimit-"+family+"-remaining", strconv.FormatFloat(math.Max(0, math.Floor(d.b.level)), 'f', 0, 64))
		// RFC 3339 has whole seconds here: round the reset up, so that it is never early.
		reset := now.Add(d.untilFull() + time.Second - 1).Truncate(time.Second)
		h.Set("anthropic-ratelimit-"+family+"-reset", reset.UTC().Format(time.RFC3339))
	}
	set(p.req.name, &p.req)
	set(p.in.name, &p.in)
	set(p.out.name, &p.out)
	if p.in.b.level <= p.out.b.level {
		set("tokens", &p.in)
	} else {
		set("tokens", &p.out)
	}
	h.Set("request-id", fmt.Sprintf("req_fake_%d", now.UnixNano()))
}

// writeError writes an Anthropic error body: {"type":"error","error":{"type":...,"message":...}}.
func writeError(w http.ResponseWriter, status int, typ, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"type": "error", "error": map[string]string{"type": typ, "message": msg}})
}
