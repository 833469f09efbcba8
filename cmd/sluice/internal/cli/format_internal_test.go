package cli

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A figure prints as set: never rounded to 0, which reads as "no limit".
func TestNum(t *testing.T) {
	t.Parallel()
	for v, want := range map[float64]string{
		0: "0", 5: "5", 90_000: "90000", 0.5: "0.5", 0.0001: "0.0001", 1.0 / 3: "0.333", 0.00012345: "0.000123",
		2.5: "2.5", 2.345: "2.35", 1e12: "1000000000000",
	} {
		require.Equal(t, want, num(v), "num(%v)", v)
	}
}

// A validation error's fields become flags; the key, whatever it spells, stays as it is.
func TestInFlagNames(t *testing.T) {
	t.Parallel()
	require.Equal(t, `throttle: limit "Burst": --burst must be 0 when --rps is not set, got 3`,
		inFlagNames(`throttle: limit "Burst": Burst must be 0 when RequestsPerSecond is not set, got 3`, "Burst"))
	require.Equal(t, `throttle: limit "k": --output-token-burst must be 0 when --otpm is not set, got 2`,
		inFlagNames(`throttle: limit "k": OutputTokenBurst must be 0 when OutputTokensPerMinute is not set, got 2`, "k"))
}

// explain's figures are grouped by thousands; a bucket's level is never rounded up to what a ticket
// needs.
func TestGroupedAndFigure(t *testing.T) {
	t.Parallel()
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", -4000: "-4,000", 1234567: "1,234,567", -100: "-100"} {
		require.Equal(t, want, grouped(n), "grouped(%d)", n)
	}
	for v, want := range map[float64]string{0: "0", 0.4: "0.4", 1: "1", 99.5: "99.5", 999.6: "999", 4000: "4,000", -2500.5: "-2,501", 0.0001: "0.0001"} {
		require.Equal(t, want, figure(v), "figure(%v)", v)
	}
}
