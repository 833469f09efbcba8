package main

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/throttle"
)

// testProvider starts a provider with a small account, closed at the end of the test, and a client
// of it. The latency is nil so that calls end at once.
func testProvider(t *testing.T, cfg ProviderConfig) (*Provider, anthropic.Client) {
	t.Helper()
	p := NewProvider(cfg)
	t.Cleanup(p.Close)
	return p, NewClient(p.URL())
}

var smallAccount = ProviderConfig{RPM: 60, ITPM: 60_000, OTPM: 600, BurstSeconds: 60, OutputBase: 20, OutputPerInput: 0.1}

func call(ctx context.Context, c anthropic.Client, doc Document, maxTokens int64) (*anthropic.Message, *http.Response, error) {
	var resp *http.Response
	msg, err := c.Messages.New(ctx, anthropic.MessageNewParams{Model: model, MaxTokens: maxTokens, System: system(), Messages: userMessages(doc)},
		option.WithResponseInto(&resp))
	return msg, resp, err
}

func TestProvider_CountTokensAndCache(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p, c := testProvider(t, smallAccount)
	docs := Documents(2, 50, 100, 1)
	require.NoError(t, CountInputTokens(ctx, c, docs))
	sys := countText(systemPrompt)

	first, _, err := call(ctx, c, docs[0], 100)
	require.NoError(t, err)
	second, _, err := call(ctx, c, docs[1], 100)
	require.NoError(t, err)

	// The first call writes the system prompt to the cache, the second reads it; count_tokens counts
	// the whole prompt either way.
	require.Equal(t, sys, first.Usage.CacheCreationInputTokens)
	require.Zero(t, first.Usage.CacheReadInputTokens)
	require.Equal(t, docs[0].InputTokens, first.Usage.InputTokens+sys)
	require.Zero(t, second.Usage.CacheCreationInputTokens)
	require.Equal(t, sys, second.Usage.CacheReadInputTokens)
	require.Equal(t, docs[1].InputTokens, second.Usage.InputTokens+sys)
	require.Equal(t, anthropic.StopReasonEndTurn, first.StopReason)
	require.Equal(t, first.Usage.OutputTokens, countText(first.Content[0].Text))

	// ITPM is charged the uncached input and the cache write, not the cache read.
	p.mu.Lock()
	calls := append([]callRecord(nil), p.log.calls...)
	p.mu.Unlock()
	require.Len(t, calls, 2)
	require.Equal(t, docs[0].InputTokens, calls[0].input)
	require.Equal(t, docs[1].InputTokens-sys, calls[1].input)
}

func TestProvider_HeadersAndGiveBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p, c := testProvider(t, smallAccount)
	doc := Documents(1, 50, 50, 2)[0]
	before := time.Now()
	msg, resp, err := call(ctx, c, doc, 300)
	require.NoError(t, err)
	output := msg.Usage.OutputTokens
	require.Less(t, output, int64(300))

	info := throttle.ParseRateLimitHeaders(resp.Header, time.Now())
	require.InDelta(t, 60, info.RequestsLimit, 0)
	require.InDelta(t, 60_000, info.InputTokens.Limit, 0)
	require.InDelta(t, 600, info.OutputTokens.Limit, 0)
	// Written when the answer was ready, before the unused max_tokens went back: the whole
	// max_tokens is spent (the bucket refills 10 tokens a second from 600).
	require.True(t, info.OutputTokens.HasRemaining)
	require.InDelta(t, 300, info.OutputTokens.Remaining, 10*time.Since(before).Seconds()+1)
	require.True(t, info.OutputTokens.Reset.After(before))
	// tokens-* repeats the budget with fewer tokens remaining: output.
	require.Equal(t, info.OutputTokens.Limit, info.TokensLimit)
	// The unused part has gone back since.
	p.mu.Lock()
	p.out.refill(time.Now())
	level := p.out.b.level
	p.mu.Unlock()
	require.InDelta(t, 600-output, level, 10*time.Since(before).Seconds()+1)
}

func TestProvider_RateLimited(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p, c := testProvider(t, smallAccount)
	doc := Documents(1, 50, 50, 3)[0]
	// The output bucket holds 600: a call reserving 600 empties it (for an instant: the unused part
	// comes back when it ends), and one reserving 600 more cannot fit until it refills.
	_, _, err := call(ctx, c, doc, 600)
	require.NoError(t, err)
	p.mu.Lock()
	emptied := time.Now()
	p.out.refill(emptied)
	p.out.b.level = 0 // as if that call had used all of it
	p.mu.Unlock()
	_, _, err = call(ctx, c, doc, 600)
	refilled := time.Since(emptied).Seconds() // at most this long at 10 a second before the provider decided
	var apiErr *anthropic.Error
	require.True(t, errors.As(err, &apiErr), "%v", err)
	require.Equal(t, http.StatusTooManyRequests, apiErr.StatusCode)
	require.Equal(t, "rate_limit_error", string(apiErr.Type()))
	secs, err := strconv.Atoi(apiErr.Response.Header.Get("retry-after"))
	require.NoError(t, err)
	// 600 tokens at 10 a second, less what refilled before the call arrived: however slow the machine.
	require.GreaterOrEqual(t, float64(secs), 60-refilled)
	require.LessOrEqual(t, secs, 60)
	require.Equal(t, "0", apiErr.Response.Header.Get("anthropic-ratelimit-output-tokens-remaining"))

	st := p.Stats()
	require.Equal(t, int64(1), st.RateLimited)
	require.Equal(t, int64(1), st.Succeeded)
	p.mu.Lock()
	defer p.mu.Unlock()
	require.Len(t, p.log.requests, 2, "a refused call counts its request")
}

func TestUseOf(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	dims := [3]*dimension{
		{perMin: 60, capacity: 5},     // 1 request a second
		{perMin: 600, capacity: 50},   // 10 input tokens a second
		{perMin: 1200, capacity: 100}, // 20 output tokens a second
	}
	l := &usageLog{}
	l.request(t0.Add(-time.Second)) // before the busy period: not counted
	for i, at := range []time.Time{t0, t0.Add(5 * time.Second), t0.Add(10 * time.Second)} {
		l.request(at)
		l.complete(l.admit(at, 40, 50, 100), at.Add(time.Second), int64(50+i*25), true)
	}
	u := useOf(l, dims)
	require.Equal(t, 10*time.Second, u.Busy)
	require.Equal(t, Share{Used: 3, Quota: 5 + 10}, u.Requests)
	require.Equal(t, Share{Used: 120, Quota: 50 + 100}, u.Input)
	require.Equal(t, Share{Used: 50 + 75 + 100, Quota: 100 + 200}, u.Output)
	require.InDelta(t, 75, u.Output.Pct(), 1e-9)
	require.Equal(t, Use{}, useOf(&usageLog{}, dims))
}

func TestCountText(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want int64
	}{
		{"", 0},
		{"Hello, world.", 4},
		{"  Document 12.\n\nthe  quota ", 5},
		{"x+y=z", 5},
	} {
		require.Equal(t, tc.want, countText(tc.in), "%q", tc.in)
	}
}
