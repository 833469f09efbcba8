package throttle_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/throttle"
)

// requireDecision checks a Decision's reason and RetryAt (a zero want means a zero RetryAt).
func requireDecision(t *testing.T, d throttle.Decision, reason throttle.Reason, retryAt time.Time) {
	t.Helper()
	require.Equal(t, reason, d.Reason, "reason: want %v, got %v", reason, d.Reason)
	require.Equal(t, reason == throttle.ReasonNone, d.OK())
	if retryAt.IsZero() {
		require.True(t, d.RetryAt.IsZero(), "RetryAt: want zero, got %v", d.RetryAt)
		return
	}
	require.True(t, retryAt.Equal(d.RetryAt), "RetryAt: want %v (t0%+v), got %v (t0%+v)", retryAt, retryAt.Sub(t0), d.RetryAt, d.RetryAt.Sub(t0))
}

// admitAll admits cost n times at now, failing if Check refuses any.
func admitAll(t *testing.T, l throttle.Limit, s throttle.State, now time.Time, n int, cost int64) throttle.State {
	t.Helper()
	for i := range n {
		d := l.Check(s, now, cost)
		require.True(t, d.OK(), "admission %d of %d refused: %v", i+1, n, d.Reason)
		s = l.Admit(s, now, cost)
	}
	return s
}

func TestReason_String(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		r    throttle.Reason
		want string
	}{
		{throttle.ReasonNone, "none"},
		{throttle.ReasonPaused, "paused"},
		{throttle.ReasonConcurrency, "concurrency"},
		{throttle.ReasonInflightTokens, "inflight_tokens"},
		{throttle.ReasonRate, "rate"},
		{throttle.ReasonTokens, "tokens"},
		{throttle.ReasonInputTokens, "input_tokens"},
		{throttle.ReasonOutputTokens, "output_tokens"},
		{throttle.Reason(-1), "unknown"},
		{throttle.ReasonAllowance, "allowance"},
		{throttle.Reason(9), "unknown"},
		{throttle.Reason(1 << 30), "unknown"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, tc.r.String())
		})
	}
}

func TestLimit_Check(t *testing.T) {
	t.Parallel()

	// every is a limit with every part set: 1 request/s (burst 1), 1 token/s (burst 60), two tickets
	// and 100 tokens in flight.
	every := throttle.Limit{Key: "k", MaxConcurrent: 2, RequestsPerSecond: 1, TokensPerMinute: 60, MaxInflightTokens: 100}.WithDefaults()
	// blocked violates every part at t0: paused for 5s, two tickets with 90 tokens running, an empty
	// request bucket and 10 tokens left.
	blocked := throttle.State{
		Requests:       throttle.Bucket{Level: 0, At: t0},
		Tokens:         throttle.Bucket{Level: 10, At: t0},
		InflightCount:  2,
		InflightTokens: 90,
		PausedUntil:    t0.Add(5 * time.Second),
	}

	t.Run("ReasonsInOrder", func(t *testing.T) {
		t.Parallel()
		s := blocked
		requireDecision(t, every.Check(s, t0, 20), throttle.ReasonPaused, t0.Add(5*time.Second))
		s.PausedUntil = time.Time{}
		requireDecision(t, every.Check(s, t0, 20), throttle.ReasonConcurrency, time.Time{})
		s.InflightCount = 1
		requireDecision(t, every.Check(s, t0, 20), throttle.ReasonInflightTokens, time.Time{})
		s.InflightTokens = 50
		// Both buckets are short: the reason is the first, the retry instant the latest.
		requireDecision(t, every.Check(s, t0, 20), throttle.ReasonRate, t0.Add(10*time.Second))
		s.Requests.Level = 1
		requireDecision(t, every.Check(s, t0, 20), throttle.ReasonTokens, t0.Add(10*time.Second))
		s.Tokens.Level = 20
		requireDecision(t, every.Check(s, t0, 20), throttle.ReasonNone, t0)
	})

	t.Run("PauseEndsAtPausedUntil", func(t *testing.T) {
		t.Parallel()
		s := throttle.State{PausedUntil: t0.Add(time.Second)}
		l := throttle.Limit{Key: "k", MaxConcurrent: 1}
		requireDecision(t, l.Check(s, t0.Add(time.Second-time.Microsecond), 1), throttle.ReasonPaused, t0.Add(time.Second))
		requireDecision(t, l.Check(s, t0.Add(time.Second), 1), throttle.ReasonNone, t0.Add(time.Second))
	})

	t.Run("ZeroStateAdmits", func(t *testing.T) {
		t.Parallel()
		requireDecision(t, every.Check(throttle.State{}, t0, 60), throttle.ReasonNone, t0)
	})

	t.Run("TimeRepaysBuckets", func(t *testing.T) {
		t.Parallel()
		s := blocked
		s.PausedUntil, s.InflightCount, s.InflightTokens = time.Time{}, 0, 0
		requireDecision(t, every.Check(s, t0.Add(500*time.Millisecond), 20), throttle.ReasonRate, t0.Add(10*time.Second))
		requireDecision(t, every.Check(s, t0.Add(time.Second), 20), throttle.ReasonTokens, t0.Add(10*time.Second))
		requireDecision(t, every.Check(s, t0.Add(10*time.Second), 20), throttle.ReasonNone, t0.Add(10*time.Second))
	})

	t.Run("NegativeCostCountsAsZero", func(t *testing.T) {
		t.Parallel()
		l := throttle.Limit{Key: "k", TokensPerMinute: 60, MaxInflightTokens: 10}.WithDefaults()
		s := throttle.State{Tokens: throttle.Bucket{Level: -5, At: t0}, InflightTokens: 10, InflightCount: 1}
		requireDecision(t, l.Check(s, t0, -100), throttle.ReasonNone, t0)
		got := l.Admit(s, t0, -100)
		require.Equal(t, -5.0, got.Tokens.Level)
		require.Equal(t, int64(10), got.InflightTokens)
		require.Equal(t, 2, got.InflightCount)
	})

	t.Run("UnsetPartsDoNotLimit", func(t *testing.T) {
		t.Parallel()
		// Buckets of a limit without a rate are ignored, whatever they hold.
		l := throttle.Limit{Key: "k", MaxConcurrent: 1}
		s := throttle.State{Requests: throttle.Bucket{Level: -100, At: t0}, Tokens: throttle.Bucket{Level: -100, At: t0}, InflightTokens: 1 << 40}
		requireDecision(t, l.Check(s, t0, 1<<40), throttle.ReasonNone, t0)
	})
}

func TestLimit_CheckTightestWins(t *testing.T) {
	t.Parallel()

	// 10 requests/s (burst 10), 10 tokens/s (burst 600), 3 running tickets.
	l := throttle.Limit{Key: "k", MaxConcurrent: 3, RequestsPerSecond: 10, TokensPerMinute: 600}.WithDefaults()

	t.Run("ConcurrencyBindsWhileBucketsFull", func(t *testing.T) {
		t.Parallel()
		s := admitAll(t, l, throttle.State{}, t0, 3, 1)
		requireDecision(t, l.Check(s, t0, 1), throttle.ReasonConcurrency, time.Time{})
		s = l.Release(s, t0, 1, 1)
		requireDecision(t, l.Check(s, t0, 1), throttle.ReasonNone, t0)
	})

	t.Run("RateBindsWhileTokensPlenty", func(t *testing.T) {
		t.Parallel()
		s := throttle.State{}
		for range 10 {
			s = admitAll(t, l, s, t0, 1, 1)
			s = l.Release(s, t0, 1, 1)
		}
		requireDecision(t, l.Check(s, t0, 1), throttle.ReasonRate, t0.Add(100*time.Millisecond))
		requireDecision(t, l.Check(s, t0.Add(100*time.Millisecond), 1), throttle.ReasonNone, t0.Add(100*time.Millisecond))
	})

	t.Run("TokensBindWhileRatePlenty", func(t *testing.T) {
		t.Parallel()
		s := admitAll(t, l, throttle.State{}, t0, 1, 550)
		requireDecision(t, l.Check(s, t0, 100), throttle.ReasonTokens, t0.Add(5*time.Second))
		requireDecision(t, l.Check(s, t0, 50), throttle.ReasonNone, t0)
	})

	t.Run("SmallestRateOfSeveralLimitsBinds", func(t *testing.T) {
		t.Parallel()
		// A single request costing 100 tokens every time: the request rate allows 10 a second but
		// the token rate only one every 10s, so the token budget decides the pace.
		s := throttle.State{}
		now := t0
		var admittedAt []time.Duration
		for range 20 {
			d := l.Check(s, now, 100)
			if d.OK() {
				s = l.Admit(s, now, 100)
				s = l.Release(s, now, 100, 100)
				admittedAt = append(admittedAt, now.Sub(t0))
				continue
			}
			require.Equal(t, throttle.ReasonTokens, d.Reason)
			now = d.RetryAt
		}
		require.Equal(t, []time.Duration{0, 0, 0, 0, 0, 0, 10 * time.Second, 20 * time.Second, 30 * time.Second, 40 * time.Second, 50 * time.Second, 60 * time.Second, 70 * time.Second}, admittedAt)
	})
}

func TestLimit_CheckOversize(t *testing.T) {
	t.Parallel()

	// 1 token/s, burst 60.
	l := throttle.Limit{Key: "k", TokensPerMinute: 60}.WithDefaults()

	t.Run("AdmittedWhenFull", func(t *testing.T) {
		t.Parallel()
		requireDecision(t, l.Check(throttle.State{}, t0, 150), throttle.ReasonNone, t0)
		s := l.Admit(throttle.State{}, t0, 150)
		require.Equal(t, -90.0, s.Tokens.Level)
	})

	t.Run("WaitsForFullBucket", func(t *testing.T) {
		t.Parallel()
		s := throttle.State{Tokens: throttle.Bucket{Level: 59, At: t0}}
		requireDecision(t, l.Check(s, t0, 150), throttle.ReasonTokens, t0.Add(time.Second))
		requireDecision(t, l.Check(s, t0.Add(time.Second), 150), throttle.ReasonNone, t0.Add(time.Second))
	})

	t.Run("NextWaitsUntilDebtRepaid", func(t *testing.T) {
		t.Parallel()
		s := l.Admit(throttle.State{}, t0, 150) // level -90
		// A 10-token ticket needs the 90 of debt repaid and 10 more: 100s at 1 token/s.
		requireDecision(t, l.Check(s, t0, 10), throttle.ReasonTokens, t0.Add(100*time.Second))
		requireDecision(t, l.Check(s, t0.Add(99*time.Second), 10), throttle.ReasonTokens, t0.Add(100*time.Second))
		requireDecision(t, l.Check(s, t0.Add(100*time.Second), 10), throttle.ReasonNone, t0.Add(100*time.Second))
		// Another oversize ticket needs a full bucket again: 90 + 60 = 150s.
		requireDecision(t, l.Check(s, t0, 150), throttle.ReasonTokens, t0.Add(150*time.Second))
		requireDecision(t, l.Check(s, t0.Add(150*time.Second), 150), throttle.ReasonNone, t0.Add(150*time.Second))
	})

	t.Run("SlowRequestRateWaitsForAWholeRequest", func(t *testing.T) {
		t.Parallel()
		// A request always costs 1, so Burst >= 1 always admits when the bucket holds one.
		lr := throttle.Limit{Key: "k", RequestsPerSecond: 0.5}.WithDefaults()
		s := admitAll(t, lr, throttle.State{}, t0, 1, 1)
		requireDecision(t, lr.Check(s, t0, 1), throttle.ReasonRate, t0.Add(2*time.Second))
	})
}

func TestLimit_CheckInflightTokens(t *testing.T) {
	t.Parallel()

	l := throttle.Limit{Key: "k", MaxInflightTokens: 100}

	for _, tc := range []struct {
		name     string
		inflight int64
		cost     int64
		want     throttle.Reason
	}{
		{"OversizeAdmittedWhenNothingInFlight", 0, 500, throttle.ReasonNone},
		{"OversizeWaitsWhenSomethingInFlight", 1, 500, throttle.ReasonInflightTokens},
		{"FitsExactly", 1, 99, throttle.ReasonNone},
		{"OneOver", 1, 100, throttle.ReasonInflightTokens},
		{"ZeroCostWhenFull", 100, 0, throttle.ReasonNone},
		{"ZeroCostWhenOverfull", 500, 0, throttle.ReasonInflightTokens},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := throttle.State{InflightTokens: tc.inflight, InflightCount: 1}
			d := l.Check(s, t0, tc.cost)
			require.Equal(t, tc.want, d.Reason)
			if !d.OK() {
				require.True(t, d.RetryAt.IsZero(), "in-flight tokens wait for a release, not a time")
			}
		})
	}

	t.Run("OversizeThenNothingUntilReleased", func(t *testing.T) {
		t.Parallel()
		s := admitAll(t, l, throttle.State{}, t0, 1, 500)
		require.Equal(t, int64(500), s.InflightTokens)
		requireDecision(t, l.Check(s, t0, 1), throttle.ReasonInflightTokens, time.Time{})
		s = l.Release(s, t0.Add(time.Second), 500, 480)
		require.Zero(t, s.InflightTokens)
		require.Zero(t, s.InflightCount)
		requireDecision(t, l.Check(s, t0.Add(time.Second), 100), throttle.ReasonNone, t0.Add(time.Second))
	})
}

func TestLimit_Admit(t *testing.T) {
	t.Parallel()

	l := throttle.Limit{Key: "k", RequestsPerSecond: 2, TokensPerMinute: 120}.WithDefaults()

	t.Run("TakesFromBothBucketsAndCountsInflight", func(t *testing.T) {
		t.Parallel()
		s := l.Admit(throttle.State{}, t0, 30)
		require.Equal(t, throttle.State{
			Requests:       throttle.Bucket{Level: 1, At: t0},
			Tokens:         throttle.Bucket{Level: 90, At: t0},
			InflightCount:  1,
			InflightTokens: 30,
		}, s)
	})

	t.Run("RefillsBeforeTaking", func(t *testing.T) {
		t.Parallel()
		s := throttle.State{Requests: throttle.Bucket{Level: 0, At: t0}, Tokens: throttle.Bucket{Level: 0, At: t0}}
		s = l.Admit(s, t0.Add(500*time.Millisecond), 1)
		require.Equal(t, 0.0, s.Requests.Level)
		require.Equal(t, 0.0, s.Tokens.Level)
		require.True(t, s.Requests.At.Equal(t0.Add(500*time.Millisecond)))
		require.True(t, s.Tokens.At.Equal(t0.Add(500*time.Millisecond)))
	})

	t.Run("LeavesUnsetBucketsAlone", func(t *testing.T) {
		t.Parallel()
		lc := throttle.Limit{Key: "k", MaxConcurrent: 4}
		s := lc.Admit(throttle.State{}, t0, 30)
		require.Equal(t, throttle.State{InflightCount: 1, InflightTokens: 30}, s)
	})
}

func TestLimit_Release(t *testing.T) {
	t.Parallel()

	// 1 token/s, burst 100; a 100-token ticket empties the bucket.
	l := throttle.Limit{Key: "k", TokensPerMinute: 60, TokenBurst: 100}
	full := l.Admit(throttle.State{}, t0, 100)
	// With nothing released, the next 100-token ticket is admitted at t0+100s.
	requireDecision(t, l.Check(full, t0, 100), throttle.ReasonTokens, t0.Add(100*time.Second))

	for _, tc := range []struct {
		name   string
		actual int64
		level  float64
		next   time.Duration
	}{
		{"UsedHalfFreesTheOtherHalf", 50, 50, 50 * time.Second},
		{"UsedNothingFreesAll", 0, 100, 0},
		{"UsedExactlyChangesNothing", 100, 0, 100 * time.Second},
		{"UsedDoubleCarriesDebt", 200, -100, 200 * time.Second},
		{"NotReportedKeepsReservation", -1, 0, 100 * time.Second},
		{"VeryNegativeActualKeepsReservation", -1 << 40, 0, 100 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := l.Release(full, t0, 100, tc.actual)
			require.Equal(t, tc.level, s.Tokens.Level)
			require.Zero(t, s.InflightCount)
			require.Zero(t, s.InflightTokens)
			want := throttle.ReasonTokens
			if tc.next == 0 {
				want = throttle.ReasonNone
			}
			requireDecision(t, l.Check(s, t0, 100), want, t0.Add(tc.next))
		})
	}

	t.Run("HalfUsedMovesNextAdmissionEarlierByExactlyTheRefund", func(t *testing.T) {
		t.Parallel()
		// Later in the refill: at t0+30s, 30 tokens are back; the next 100-token ticket is due at
		// t0+100s. Giving back 40 moves it to exactly 40s earlier.
		now := t0.Add(30 * time.Second)
		kept := l.Release(full, now, 100, -1)
		given := l.Release(full, now, 100, 60)
		before := l.Check(kept, now, 100)
		after := l.Check(given, now, 100)
		requireDecision(t, before, throttle.ReasonTokens, t0.Add(100*time.Second))
		requireDecision(t, after, throttle.ReasonTokens, t0.Add(60*time.Second))
		require.Equal(t, 40*time.Second, before.RetryAt.Sub(after.RetryAt))
	})

	t.Run("RefundCapsAtBurst", func(t *testing.T) {
		t.Parallel()
		s := l.Release(full, t0.Add(90*time.Second), 100, 0)
		require.Equal(t, 100.0, s.Tokens.Level)
		require.True(t, s.Tokens.At.Equal(t0.Add(90*time.Second)))
	})

	t.Run("ReleaseBeforeAdmitInstantDoesNotRefill", func(t *testing.T) {
		t.Parallel()
		s := l.Release(full, t0.Add(-time.Minute), 100, 100)
		require.Equal(t, 0.0, s.Tokens.Level)
		require.True(t, s.Tokens.At.Equal(t0))
	})

	t.Run("NoTokenBudgetIgnoresActual", func(t *testing.T) {
		t.Parallel()
		lc := throttle.Limit{Key: "k", MaxConcurrent: 2}
		s := lc.Admit(throttle.State{}, t0, 100)
		s = lc.Release(s, t0, 100, 5)
		require.Equal(t, throttle.State{}, s)
	})

	t.Run("FiguresNeverGoNegative", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			name      string
			s         throttle.State
			reserved  int64
			wantCount int
			wantToks  int64
		}{
			{"ReleaseOnZeroState", throttle.State{}, 100, 0, 0},
			{"ReservedMoreThanInflight", throttle.State{InflightCount: 1, InflightTokens: 30}, 100, 0, 0},
			{"NegativeReservedCountsAsZero", throttle.State{InflightCount: 2, InflightTokens: 30}, -50, 1, 30},
			{"Ordinary", throttle.State{InflightCount: 2, InflightTokens: 30}, 10, 1, 20},
		} {
			s := l.Release(tc.s, t0, tc.reserved, 0)
			require.Equal(t, tc.wantCount, s.InflightCount, tc.name)
			require.Equal(t, tc.wantToks, s.InflightTokens, tc.name)
			s = l.Release(s, t0, tc.reserved, 0)
			s = l.Release(s, t0, tc.reserved, 0)
			require.GreaterOrEqual(t, s.InflightCount, 0, tc.name)
			require.GreaterOrEqual(t, s.InflightTokens, int64(0), tc.name)
		}
	})

	t.Run("ReleaseMakesRoomForConcurrency", func(t *testing.T) {
		t.Parallel()
		lc := throttle.Limit{Key: "k", MaxConcurrent: 1, MaxInflightTokens: 50}
		s := admitAll(t, lc, throttle.State{}, t0, 1, 40)
		requireDecision(t, lc.Check(s, t0, 1), throttle.ReasonConcurrency, time.Time{})
		s = lc.Release(s, t0, 40, 40)
		requireDecision(t, lc.Check(s, t0, 50), throttle.ReasonNone, t0)
	})
}

func TestState_Pause(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name    string
		current time.Time
		until   time.Time
		want    time.Time
	}{
		{"FromUnpaused", time.Time{}, t0.Add(10 * time.Second), t0.Add(10 * time.Second)},
		{"ExtendsToLater", t0.Add(10 * time.Second), t0.Add(20 * time.Second), t0.Add(20 * time.Second)},
		{"KeepsLaterCurrent", t0.Add(10 * time.Second), t0.Add(5 * time.Second), t0.Add(10 * time.Second)},
		{"KeepsEqual", t0.Add(10 * time.Second), t0.Add(10 * time.Second), t0.Add(10 * time.Second)},
		{"ZeroUntilKeepsCurrent", t0.Add(10 * time.Second), time.Time{}, t0.Add(10 * time.Second)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := throttle.State{PausedUntil: tc.current, InflightCount: 3}.Pause(tc.until)
			require.True(t, tc.want.Equal(s.PausedUntil), "want %v, got %v", tc.want, s.PausedUntil)
			require.Equal(t, 3, s.InflightCount, "Pause must keep the rest of the state")
		})
	}

	t.Run("PausedLimitWaitsThenAdmits", func(t *testing.T) {
		t.Parallel()
		l := throttle.Limit{Key: "k", RequestsPerSecond: 5}.WithDefaults()
		s := throttle.State{}.Pause(t0.Add(30 * time.Second)).Pause(t0.Add(3 * time.Second))
		requireDecision(t, l.Check(s, t0.Add(10*time.Second), 1), throttle.ReasonPaused, t0.Add(30*time.Second))
		requireDecision(t, l.Check(s, t0.Add(30*time.Second), 1), throttle.ReasonNone, t0.Add(30*time.Second))
	})
}

func TestLimit_ChangedAtRuntime(t *testing.T) {
	t.Parallel()

	t.Run("LoweredRequestsPerSecondAppliesToExistingState", func(t *testing.T) {
		t.Parallel()
		before := throttle.Limit{Key: "k", RequestsPerSecond: 10}.WithDefaults()
		s := admitAll(t, before, throttle.State{}, t0, 10, 1) // request bucket empty at t0
		requireDecision(t, before.Check(s, t0.Add(250*time.Millisecond), 1), throttle.ReasonNone, t0.Add(250*time.Millisecond))

		after := throttle.Limit{Key: "k", RequestsPerSecond: 2}.WithDefaults()
		// At 2/s only half a request is back after 250ms: the next is due at t0+500ms.
		requireDecision(t, after.Check(s, t0.Add(250*time.Millisecond), 1), throttle.ReasonRate, t0.Add(500*time.Millisecond))
		requireDecision(t, after.Check(s, t0.Add(500*time.Millisecond), 1), throttle.ReasonNone, t0.Add(500*time.Millisecond))
	})

	t.Run("LoweredBurstCapsFullBucket", func(t *testing.T) {
		t.Parallel()
		before := throttle.Limit{Key: "k", RequestsPerSecond: 10}.WithDefaults()
		s := admitAll(t, before, throttle.State{}, t0, 1, 1)
		s = before.Release(s, t0, 1, 1)
		require.Equal(t, 9.0, s.Requests.Level)

		after := throttle.Limit{Key: "k", RequestsPerSecond: 2}.WithDefaults()
		now := t0.Add(time.Minute)
		s = admitAll(t, after, s, now, 2, 1)
		requireDecision(t, after.Check(s, now, 1), throttle.ReasonRate, now.Add(500*time.Millisecond))
	})

	t.Run("RaisedTokensPerMinuteRepaysDebtFaster", func(t *testing.T) {
		t.Parallel()
		before := throttle.Limit{Key: "k", TokensPerMinute: 60}.WithDefaults()
		s := before.Admit(throttle.State{}, t0, 120) // 60 tokens of debt
		requireDecision(t, before.Check(s, t0, 60), throttle.ReasonTokens, t0.Add(120*time.Second))

		after := throttle.Limit{Key: "k", TokensPerMinute: 600, TokenBurst: 60}
		requireDecision(t, after.Check(s, t0, 60), throttle.ReasonTokens, t0.Add(12*time.Second))
	})

	t.Run("AddedMaxConcurrentCountsRunningTickets", func(t *testing.T) {
		t.Parallel()
		before := throttle.Limit{Key: "k", RequestsPerSecond: 100}.WithDefaults()
		s := admitAll(t, before, throttle.State{}, t0, 5, 1)

		after := before
		after.MaxConcurrent = 5
		requireDecision(t, after.Check(s, t0, 1), throttle.ReasonConcurrency, time.Time{})
	})
}

func TestLimit_Refill(t *testing.T) {
	t.Parallel()

	// 2 requests a second (burst 4), 60 tokens a minute (1 a second, burst 10).
	l := throttle.Limit{Key: "k", RequestsPerSecond: 2, Burst: 4, TokensPerMinute: 60, TokenBurst: 10, MaxConcurrent: 3}
	spent := throttle.State{
		Requests:      throttle.Bucket{Level: 0, At: t0},
		Tokens:        throttle.Bucket{Level: -5, At: t0},
		InflightCount: 2, InflightTokens: 7, PausedUntil: t0.Add(time.Minute),
	}

	for _, tc := range []struct {
		name       string
		l          throttle.Limit
		s          throttle.State
		now        time.Time
		wantReq    throttle.Bucket
		wantTokens throttle.Bucket
	}{
		{"SameInstantChangesNothing", l, spent, t0, spent.Requests, spent.Tokens},
		{"BothBucketsRefillAtTheirRates", l, spent, t0.Add(time.Second), throttle.Bucket{Level: 2, At: t0.Add(time.Second)}, throttle.Bucket{Level: -4, At: t0.Add(time.Second)}},
		{"CappedAtTheBursts", l, spent, t0.Add(time.Hour), throttle.Bucket{Level: 4, At: t0.Add(time.Hour)}, throttle.Bucket{Level: 10, At: t0.Add(time.Hour)}},
		{"AnOlderInstantAddsNothing", l, spent, t0.Add(-time.Second), spent.Requests, spent.Tokens},
		{"ZeroBucketsStartFull", l, throttle.State{}, t0, throttle.Bucket{Level: 4, At: t0}, throttle.Bucket{Level: 10, At: t0}},
		{"AKindNotSetLeavesItsBucket", throttle.Limit{Key: "k", MaxConcurrent: 3}, spent, t0.Add(time.Hour), spent.Requests, spent.Tokens},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := tc.l.Refill(tc.s, tc.now)
			require.Equal(t, tc.wantReq, got.Requests)
			require.Equal(t, tc.wantTokens, got.Tokens)
			require.Equal(t, tc.s.InflightCount, got.InflightCount, "Refill touches the buckets only")
			require.Equal(t, tc.s.InflightTokens, got.InflightTokens, "Refill touches the buckets only")
			require.Equal(t, tc.s.PausedUntil, got.PausedUntil, "Refill touches the buckets only")
		})
	}

	t.Run("IsWhatCheckSees", func(t *testing.T) {
		t.Parallel()
		now := t0.Add(1500 * time.Millisecond)
		settled := l.Refill(spent, now)
		settled.PausedUntil = time.Time{}
		unsettled := spent
		unsettled.PausedUntil = time.Time{}
		require.Equal(t, l.Check(unsettled, now, 3), l.Check(settled, now, 3))
		require.Equal(t, l.Admit(unsettled, now, 3), l.Admit(settled, now, 3))
	})
}
