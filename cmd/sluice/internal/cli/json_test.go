package cli_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/cmd/sluice/internal/cli"
	"github.com/sluicehq/sluice/pgqueue"
)

// --json prints pgqueue's read model in its own JSON names, and nothing of a ticket that operators
// must not see: status and limits a pgqueue.KeyStatus's and LimitStatus's, tickets pgqueue.Tickets,
// with the waits in seconds beside them.
func TestCLI_JSON(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	jsonOf := func(t *testing.T, v any, args ...string) string {
		t.Helper()
		code, out, errOut := f.run(t, append([]string{"--json"}, args...)...)
		require.Equal(t, cli.ExitOK, code, errOut)
		require.NoError(t, json.Unmarshal([]byte(out), v), out)
		return out
	}

	t.Run("Status", func(t *testing.T) {
		var got []pgqueue.KeyStatus
		jsonOf(t, &got, "status")
		want, err := f.q.Status(ctx)
		require.NoError(t, err)
		require.Len(t, got, 2)
		for i := range want {
			want[i].Now = got[i].Now // read again, later
		}
		require.Equal(t, want, got)
		var waits []struct {
			OldestWaitSeconds float64 `json:"oldest_wait_s"`
		}
		jsonOf(t, &waits, "status", "openai")
		require.Positive(t, waits[0].OldestWaitSeconds)
	})

	t.Run("Limits", func(t *testing.T) {
		var got []pgqueue.LimitStatus
		out := jsonOf(t, &got, "limits", "get", "openai")
		want, err := f.q.LimitStatus(ctx, "openai")
		require.NoError(t, err)
		require.Equal(t, []pgqueue.LimitStatus{want}, got)
		require.Contains(t, out, `"configured":{"key":"openai","max_concurrent":2,"requests_per_second":10,"burst":10,`)
	})

	// A duration is in seconds, named with _s, where the library's JSON has nanoseconds: a rolling
	// allowance's period wherever a limit is printed.
	t.Run("Durations", func(t *testing.T) {
		code, _, errOut := f.run(t, "limits", "set", "tenant:acme", "--allowance", "requests=1000/24h")
		require.Equal(t, cli.ExitOK, code, errOut)
		for _, args := range [][]string{{"limits", "get", "tenant:acme"}, {"status", "tenant:acme"}, {"limits", "history", "tenant:acme"}} {
			var v any
			out := jsonOf(t, &v, args...)
			require.Contains(t, out, `{"meter":"requests","amount":1000,"rolling_s":86400}`, "%v", args)
			require.NotContains(t, out, "86400000000000", "%v", args)
		}
	})

	t.Run("Tickets", func(t *testing.T) {
		var got []pgqueue.KeyTicket
		out := jsonOf(t, &got, "tickets", "openai")
		want, _, err := f.q.Tickets(ctx, "openai", 50)
		require.NoError(t, err)
		require.Len(t, got, 5)
		for i := range want { // never in the JSON (pgqueue's ExampleTicket_json shows it with them set)
			want[i].TaskToken, want[i].Outcome, want[i].TraceContext = nil, nil, ""
			require.Equal(t, int64(-1), want[i].ActualCost, "no usage reported")
			want[i].ActualCost, want[i].ActualMoney = 0, 0 // null in the JSON, which leaves the field as it is
		}
		require.Equal(t, want, got)
		require.Contains(t, out, `"actual_cost":null,"output_cost":0,"actual_output":null,`, "not known is null, not -1")
		require.Contains(t, out, `"actual_money":null`)
		require.NotContains(t, out, ":-1")
		for _, hidden := range []string{"task_token", "TaskToken", "outcome\"", "Outcome", "trace_context", "TraceContext"} {
			require.NotContains(t, out, hidden)
		}
		var waits []struct {
			WaitedSeconds float64 `json:"waited_s"`
		}
		jsonOf(t, &waits, "tickets", "openai")
		require.Len(t, waits, 5)
		for _, w := range waits {
			require.Positive(t, w.WaitedSeconds)
		}
	})
}
