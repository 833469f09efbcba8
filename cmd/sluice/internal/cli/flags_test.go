package cli_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/cmd/sluice/internal/cli"
	"github.com/sluicehq/sluice/pgqueue"
)

// The numeric flags of limits set take what the engine holds, up to the bounds of the fields and
// their columns: a bigint's in-flight tokens, an integer's concurrency, throttle.MaxRate's rates
// (TestCLI_BadInput: one more is refused, naming the flag, the value and the bound).
func TestCLI_FlagRanges(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	code, _, errOut := f.run(t, "limits", "set", "openai", "--max-inflight-tokens", "3000000000", "--max-concurrent", "2147483647",
		"--rps", "1000000000000", "--burst", "1000000000000")
	require.Equal(t, cli.ExitOK, code, errOut)
	ls, err := f.q.LimitStatus(context.Background(), "openai")
	require.NoError(t, err)
	require.Equal(t, int64(3_000_000_000), ls.Configured.MaxInflightTokens)
	require.Equal(t, 2147483647, ls.Configured.MaxConcurrent)
	require.Equal(t, 1e12, ls.Configured.RequestsPerSecond)

	code, _, errOut = f.run(t, "limits", "set", "openai", "--max-inflight-tokens", "9223372036854775807")
	require.Equal(t, cli.ExitOK, code, errOut)
	code, out, errOut := f.run(t, "--json", "limits", "get", "openai")
	require.Equal(t, cli.ExitOK, code, errOut)
	var got []pgqueue.LimitStatus
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	require.Equal(t, int64(9223372036854775807), got[0].Configured.MaxInflightTokens)

	code, out, errOut = f.run(t, "status", "--limit", "2147483647")
	require.Equal(t, cli.ExitOK, code, errOut)
	require.Contains(t, out, "openai")
}
