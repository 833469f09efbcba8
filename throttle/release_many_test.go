package throttle_test

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/throttle"
)

// TestLimit_ReleaseMany: releasing tickets summed at once leaves the state that releasing them one by
// one, debts first, leaves: the same in-flight figures, the same token level, while the debt stays
// above its floor (one burst below empty: TestBucket_GiveDebtFloor). The burst here is larger than
// all the debt a round can take.
func TestLimit_ReleaseMany(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(5, 6))
	for round := range 500 {
		l := throttle.Limit{Key: "k", TokensPerMinute: float64(60 * (1 + r.IntN(1000))), TokenBurst: float64(12_000 + r.IntN(5000))}.WithDefaults()
		type ticket struct{ reserved, actual int64 }
		var ts []ticket
		s := throttle.State{}
		for range 1 + r.IntN(20) {
			tk := ticket{reserved: int64(r.IntN(300))}
			tk.actual = []int64{-1, int64(r.IntN(600)), tk.reserved}[r.IntN(3)]
			s = l.Admit(s, t0, tk.reserved)
			ts = append(ts, tk)
		}
		s.InflightCount += r.IntN(3) // others still in flight
		later := t0.Add(time.Duration(r.IntN(5000)) * time.Millisecond)

		var sum throttle.Released
		for _, tk := range ts {
			sum = sum.Add(throttle.Released1(tk.reserved, tk.actual))
		}
		got := l.ReleaseMany(s, later, sum)

		// One by one, the debts (usage above the reservation) first.
		slices.SortStableFunc(ts, func(a, b ticket) int {
			da, db := a.actual > a.reserved, b.actual > b.reserved
			switch {
			case da && !db:
				return -1
			case db && !da:
				return 1
			}
			return 0
		})
		want := s
		for _, tk := range ts {
			want = l.Release(want, later, tk.reserved, tk.actual)
		}
		require.Equal(t, want.InflightCount, got.InflightCount, "round %d", round)
		require.Equal(t, want.InflightTokens, got.InflightTokens, "round %d", round)
		require.InDelta(t, want.Tokens.Level, got.Tokens.Level, 1e-6, "round %d", round)
		require.True(t, want.Tokens.At.Equal(got.Tokens.At), "round %d", round)
	}
}

func TestReleased1(t *testing.T) {
	t.Parallel()
	require.Equal(t, throttle.Released{Count: 1, Reserved: 100, Refund: 60}, throttle.Released1(100, 40))
	require.Equal(t, throttle.Released{Count: 1, Reserved: 100, Refund: -50}, throttle.Released1(100, 150))
	require.Equal(t, throttle.Released{Count: 1, Reserved: 100}, throttle.Released1(100, -1), "not reported: spent")
	require.Equal(t, throttle.Released{Count: 1, Refund: -3}, throttle.Released1(-5, 3), "a negative reservation counts as none: usage is debt")
	require.Equal(t, throttle.Released{Count: 2, Reserved: 200, Refund: 10},
		throttle.Released1(100, 40).Add(throttle.Released1(100, 150)))
}

// TestBucket_GiveDebtFloor: debt from usage above a reservation goes at most one burst below empty,
// so an absurd report holds a limit for two bursts' refill at most; a level already lower (an
// oversize ticket's own debt) is not raised, and refunds are not floored.
func TestBucket_GiveDebtFloor(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		level, give float64
		want        float64
	}{
		{"DebtWithinTheFloor", 100, -150, -50},
		{"DebtStopsAtMinusBurst", 100, -1e18, -1000},
		{"ALowerLevelIsKept", -5000, -1e18, -5000},
		{"RefundStillCapsAtBurst", -5000, 1e18, 1000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := throttle.Bucket{Level: tc.level, At: t0}.Give(tc.give, 1000)
			require.InDelta(t, tc.want, got.Level, 1e-9)
		})
	}
	l := throttle.Limit{Key: "k", TokensPerMinute: 600, TokenBurst: 1000}.WithDefaults()
	s := l.Admit(throttle.State{}, t0, 100)
	s = l.Release(s, t0, 100, 1<<40)
	require.InDelta(t, -1000, s.Tokens.Level, 1e-9, "an absurd report: one burst of debt")
	require.True(t, l.Check(s, t0.Add(200*time.Second), 100).OK(), "two bursts' refill later the limit admits again")
}
