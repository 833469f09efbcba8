package main

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ProviderConfig is the fake provider's quota and speed.
type ProviderConfig struct {
	// TPM and RPM are the tokens-per-minute and requests-per-minute quotas.
	TPM, RPM float64
	// BurstSeconds is how many seconds' worth of each quota a bucket holds when full (providers enforce
	// per-minute quotas over shorter windows, so a full minute's worth at once is never allowed).
	BurstSeconds float64
	// BaseLatency and PerToken make a call's latency: BaseLatency + PerToken x completion tokens.
	BaseLatency, PerToken time.Duration
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

// tokenEvent is a number of tokens the provider accepted at an instant, for the sliding TPM figure.
type tokenEvent struct {
	at     time.Time
	tokens int64
}

// Provider is a fake OpenAI-compatible chat completions API that enforces its quotas the way real
// providers do: a request bucket and a token bucket, both continuously refilled. A call is charged
// one request whether or not it succeeds, and its prompt tokens (counted as OpenAI counts them, in
// the encoding of the request's model: PromptTokens) plus its max_tokens at admission; the unused
// part of max_tokens is given back when the call completes (as Anthropic adjusts its output-token
// estimate at the end of a request). A call that does not fit gets 429 with Retry-After and
// retry-after-ms; every response carries OpenAI's x-ratelimit-* headers. A model the tokenizer does
// not know gets 404, as OpenAI answers for a model that does not exist.
type Provider struct {
	cfg ProviderConfig
	srv *httptest.Server

	mu        sync.Mutex
	req, tok  bucket
	requests  int64 // calls received
	limited   int64 // 429s sent
	succeeded int64 // 200s sent
	inflight  int64
	tokens    int64        // tokens accepted: prompt + completion of the calls that succeeded
	events    []tokenEvent // the recent accepted calls, for TokensPerMinute
	history   []tokenEvent // every accepted call, for Timeline
	arrivals  []time.Time  // when each call came, refused ones included, for PeakRequests
}

// NewProvider starts a provider on a local port.
func NewProvider(cfg ProviderConfig) *Provider {
	p := &Provider{cfg: cfg}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", p.chatCompletions)
	p.srv = httptest.NewServer(mux)
	return p
}

// URL is the provider's base URL, for option.WithBaseURL.
func (p *Provider) URL() string { return p.srv.URL + "/v1/" }

// Close stops the provider.
func (p *Provider) Close() { p.srv.Close() }

func (p *Provider) tokenRate() float64     { return p.cfg.TPM / 60 }
func (p *Provider) requestRate() float64   { return p.cfg.RPM / 60 }
func (p *Provider) tokenCapacity() float64 { return math.Max(1, p.cfg.TPM/60*p.cfg.BurstSeconds) }
func (p *Provider) requestCapacity() float64 {
	return math.Max(1, math.Floor(p.cfg.RPM/60*p.cfg.BurstSeconds))
}

// ProviderStats are the provider's counters.
type ProviderStats struct {
	Requests, RateLimited, Succeeded, Inflight, Tokens int64
}

// Stats returns the provider's counters.
func (p *Provider) Stats() ProviderStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return ProviderStats{Requests: p.requests, RateLimited: p.limited, Succeeded: p.succeeded, Inflight: p.inflight, Tokens: p.tokens}
}

// TokensPerMinute is the rate of accepted tokens over the last window.
func (p *Provider) TokensPerMinute(window time.Duration) float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	since := time.Now().Add(-window)
	i := 0
	for i < len(p.events) && p.events[i].at.Before(since) {
		i++
	}
	p.events = p.events[i:]
	var sum int64
	for _, e := range p.events {
		sum += e.tokens
	}
	return float64(sum) / window.Minutes()
}

type chatRequest struct {
	Model    string `json:"model"`
	Messages []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
		Name    string          `json:"name"`
	} `json:"messages"`
	MaxTokens           int64 `json:"max_tokens"`
	MaxCompletionTokens int64 `json:"max_completion_tokens"`
}

// text returns a message's content: a string, or the text parts of an array.
func text(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Text string `json:"text"`
	}
	_ = json.Unmarshal(raw, &parts)
	var b strings.Builder
	for _, part := range parts {
		b.WriteString(part.Text)
	}
	return b.String()
}

// Point is one sample of a series over time: At seconds after its start, V the value.
type Point struct {
	At float64 `json:"at"`
	V  float64 `json:"v"`
}

// AcceptedBy is the tokens of the calls that ended by t.
func (p *Provider) AcceptedBy(t time.Time) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	var sum int64
	for _, e := range p.history {
		if !e.at.After(t) {
			sum += e.tokens
		}
	}
	return sum
}

// Timeline is the accepted tokens per minute over time: every step from start until the last
// accepted call, the tokens of the calls that ended in the trailing window, scaled to a minute.
func (p *Provider) Timeline(start time.Time, step, window time.Duration) []Point {
	p.mu.Lock()
	h := slices.Clone(p.history)
	p.mu.Unlock()
	if len(h) == 0 {
		return nil
	}
	var out []Point
	lo, hi := 0, 0
	var sum int64
	for at := start; !at.After(h[len(h)-1].at.Add(step)); at = at.Add(step) {
		for hi < len(h) && !h[hi].at.After(at) {
			sum += h[hi].tokens
			hi++
		}
		for lo < hi && !h[lo].at.After(at.Add(-window)) {
			sum -= h[lo].tokens
			lo++
		}
		out = append(out, Point{At: at.Sub(start).Seconds(), V: float64(sum) / window.Minutes()})
	}
	return out
}

// DefaultMaxTokens is what a call without max_tokens reserves.
const DefaultMaxTokens = 1024

func (p *Provider) chatCompletions(w http.ResponseWriter, r *http.Request) {
	var req chatRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "could not parse the JSON body: "+err.Error())
		return
	}
	msgs := make([]promptMessage, len(req.Messages))
	var user string
	for i, m := range req.Messages {
		msgs[i] = promptMessage{Role: m.Role, Content: text(m.Content), Name: m.Name}
		if m.Role == "user" {
			user = msgs[i].Content
		}
	}
	prompt, err := PromptTokens(req.Model, msgs)
	if err != nil {
		writeError(w, http.StatusNotFound, "model_not_found", fmt.Sprintf("The model `%s` does not exist or you do not have access to it.", req.Model))
		return
	}
	maxTokens := cmpOr(req.MaxCompletionTokens, req.MaxTokens, DefaultMaxTokens)
	completion := CompletionTokens(prompt, maxTokens)
	charge := float64(prompt + maxTokens)

	p.mu.Lock()
	now := time.Now()
	p.requests++
	p.arrivals = append(p.arrivals, now)
	p.req.refill(now, p.requestRate(), p.requestCapacity())
	p.tok.refill(now, p.tokenRate(), p.tokenCapacity())
	var wait time.Duration
	switch {
	case p.req.level < 1:
		wait = seconds((1 - p.req.level) / p.requestRate())
	default:
		p.req.level-- // a refused call still counts as a request
		// A call larger than the bucket is admitted when the bucket is full.
		if need := math.Min(charge, p.tokenCapacity()); p.tok.level < need {
			wait = seconds((need - p.tok.level) / p.tokenRate())
		}
	}
	if wait > 0 {
		p.limited++
		p.setHeaders(w.Header())
		p.mu.Unlock()
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(wait.Seconds()))))
		w.Header().Set("retry-after-ms", strconv.FormatInt((wait+time.Millisecond-1).Milliseconds(), 10))
		writeError(w, http.StatusTooManyRequests, "rate_limit_exceeded",
			fmt.Sprintf("Rate limit reached for requests or tokens: limit %.0f RPM, %.0f TPM. Please try again in %s.", p.cfg.RPM, p.cfg.TPM, wait.Round(time.Millisecond)))
		return
	}
	p.tok.level -= charge
	p.inflight++
	p.mu.Unlock()

	// The model "generates" the summary.
	t := time.NewTimer(p.cfg.BaseLatency + time.Duration(completion)*p.cfg.PerToken)
	canceled := false
	select {
	case <-t.C:
	case <-r.Context().Done():
		t.Stop()
		canceled = true
	}

	p.mu.Lock()
	p.inflight--
	now = time.Now()
	p.tok.refill(now, p.tokenRate(), p.tokenCapacity())
	p.req.refill(now, p.requestRate(), p.requestCapacity())
	if canceled { // the caller went away: the whole charge stands, nothing is returned
		p.mu.Unlock()
		return
	}
	// The output estimate is adjusted to the real output.
	p.tok.level = math.Min(p.tokenCapacity(), p.tok.level+float64(maxTokens-completion))
	p.succeeded++
	p.tokens += prompt + completion
	p.events = append(p.events, tokenEvent{at: now, tokens: prompt + completion})
	p.history = append(p.history, tokenEvent{at: now, tokens: prompt + completion})
	p.setHeaders(w.Header())
	p.mu.Unlock()

	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"id":      fmt.Sprintf("chatcmpl-%d", now.UnixNano()),
		"object":  "chat.completion",
		"created": now.Unix(),
		"model":   req.Model,
		"choices": []map[string]any{{
			"index":         0,
			"message":       map[string]any{"role": "assistant", "content": summarise(user, completion)},
			"finish_reason": "stop",
		}},
		"usage": map[string]int64{"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
	})
}

// setHeaders writes OpenAI's rate-limit headers as of the buckets' state. p.mu is held.
func (p *Provider) setHeaders(h http.Header) {
	h.Set("x-ratelimit-limit-requests", strconv.FormatFloat(p.cfg.RPM, 'f', -1, 64))
	h.Set("x-ratelimit-limit-tokens", strconv.FormatFloat(p.cfg.TPM, 'f', -1, 64))
	h.Set("x-ratelimit-remaining-requests", strconv.FormatInt(int64(math.Max(0, p.req.level)), 10))
	h.Set("x-ratelimit-remaining-tokens", strconv.FormatInt(int64(math.Max(0, p.tok.level)), 10))
	h.Set("x-ratelimit-reset-requests", p.req.untilFull(p.requestRate(), p.requestCapacity()).Round(time.Millisecond).String())
	h.Set("x-ratelimit-reset-tokens", p.tok.untilFull(p.tokenRate(), p.tokenCapacity()).Round(time.Millisecond).String())
}

func writeError(w http.ResponseWriter, status int, typ, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": msg, "type": typ, "code": typ}})
}

// summarise makes a short "summary": the first words of the document and how long the real one was.
func summarise(doc string, tokens int64) string {
	words := strings.Fields(doc)
	if len(words) > 8 {
		words = words[:8]
	}
	return fmt.Sprintf("%s... (%d tokens of summary)", strings.Join(words, " "), tokens)
}

func cmpOr(vs ...int64) int64 {
	for _, v := range vs {
		if v > 0 {
			return v
		}
	}
	return 0
}
