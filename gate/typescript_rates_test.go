package gate_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/sluicehq/sluice/gate"
	"github.com/sluicehq/sluice/internal/testkit/testdb"
	"github.com/sluicehq/sluice/throttle"
)

// A request rate and a token budget hold across TypeScript workflows (through the gate) and Go
// activities (through the plugin) on one limit: in every span of seconds, the requests and tokens
// admitted stay within the burst plus the rate over the span, read from the limit's usage history
// (the instants of the database's clock at each admission, by the second).
func TestGate_TypeScriptRatesHoldWithGo(t *testing.T) {
	t.Parallel()
	node := requireNode(t)
	const (
		rps, burst             = 4, 2
		tokensPerSec, tokBurst = 100, 100
		perCall                = 50 // the TypeScript call reports 30 + 20; the Go call reserves 50
		calls                  = 6  // of each language
	)
	e := newEnv(t, throttle.Limit{Key: "svc", RequestsPerSecond: rps, Burst: burst,
		TokensPerMinute: tokensPerSec * 60, TokenBurst: tokBurst})
	e.startGate(t, gate.Options{})
	e.startAppCosting(t, "svc", perCall)
	hp := e.startHTTPProvider(t)
	tsQueue := "ts-" + testdb.NewSchemaName()
	e.startTSWorker(t, node, tsQueue, hp.URL)

	var runs []client.WorkflowRun
	for range calls {
		runs = append(runs, e.startTS(t, tsQueue, "llmCall", tsCallInput{GateTaskQueue: e.gateQueue, Caller: "ts",
			Request: gate.AcquireRequest{Version: gate.ContractVersion, Limits: []string{"svc"}, Tokens: perCall}}))
	}
	routed := e.start(t, RoutedCalls, calls)
	for _, run := range runs {
		var out tsCallOutput
		require.NoError(t, run.Get(context.Background(), &out))
		require.Equal(t, usage, out.Usage)
	}
	require.NoError(t, routed.Get(context.Background(), nil))

	// The usage history, by second: what was admitted (and, had a call reported less than it
	// reserved, given back: none did).
	rows, err := e.pool.Query(context.Background(), fmt.Sprintf(`SELECT extract(epoch FROM second)::bigint, requests, tokens
		FROM %s.sluice_usage WHERE key = 'svc' ORDER BY second`, e.schema))
	require.NoError(t, err)
	type sec struct{ at, requests, tokens int64 }
	var secs []sec
	for rows.Next() {
		var s sec
		require.NoError(t, rows.Scan(&s.at, &s.requests, &s.tokens))
		secs = append(secs, s)
	}
	require.NoError(t, rows.Err())
	var requests, tokens int64
	for _, s := range secs {
		requests, tokens = requests+s.requests, tokens+s.tokens
	}
	require.EqualValues(t, 2*calls, requests, "every call admitted once: %v", secs)
	require.EqualValues(t, 2*calls*perCall, tokens, "every call's tokens counted: %v", secs)
	var topR, topTk int64 // the largest second's
	for _, s := range secs {
		topR, topTk = max(topR, s.requests), max(topTk, s.tokens)
	}
	t.Logf("FIGURES rate %d/s (burst %d), %d tokens/s (burst %d): the largest second admitted %d requests and %d tokens "+
		"(usage rows, the database's clock); the busiest second at the provider saw %d calls; %d calls admitted in %d distinct seconds; 429s %d",
		rps, burst, tokensPerSec, tokBurst, topR, topTk, e.prov.peakSecond(), requests, len(secs), hp.limited.Load())
	for i := range secs {
		var r, tk int64
		for j := i; j < len(secs); j++ {
			r, tk = r+secs[j].requests, tk+secs[j].tokens
			span := secs[j].at - secs[i].at + 1 // the admissions of seconds i..j lie within this many seconds
			require.LessOrEqual(t, r, burst+rps*span, "requests in seconds %d..%d: %v", secs[i].at, secs[j].at, secs)
			require.LessOrEqual(t, tk, tokBurst+tokensPerSec*span, "tokens in seconds %d..%d: %v", secs[i].at, secs[j].at, secs)
		}
	}
	e.inFlightBack(t, "svc")
}
