package store_test

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/throttle"
)

// spendCase is one ticket's reservation and one completion's report of it.
type spendCase struct {
	t store.Ticket
	p store.CompleteParams
}

// edgeSpendCases are every combination of the edges of a reservation (none, one token, MaxCost; its
// output none, half or all of it; money none, one micro-unit, MaxAllowanceAmount) and of a report:
// tokens not reported (-1, any negative, the smallest int64), none, under, exactly and just over the
// reservation, MaxCost and beyond it; output negative, none, all, above the total; money not known
// (0 or negative), one, the reservation and just over it, at and above MaxAllowanceAmount.
func edgeSpendCases() []spendCase {
	var out []spendCase
	for _, cost := range []int64{0, 1, 1000, store.MaxCost} {
		for _, outCost := range []int64{0, cost / 2, cost} {
			for _, costMoney := range []int64{0, 1, 1_000_000, throttle.MaxAllowanceAmount} {
				t := store.Ticket{Cost: cost, OutputCost: outCost, CostMoney: costMoney}
				for _, actual := range []int64{-1, -2, math.MinInt64, 0, 1, cost - 1, cost, cost + 1, store.MaxCost,
					store.MaxCost + 1, math.MaxInt64} {
					for _, output := range []int64{-1, 0, 1, actual, actual + 1, math.MaxInt64} {
						for _, money := range []int64{-1, 0, 1, costMoney, costMoney + 1, throttle.MaxAllowanceAmount,
							throttle.MaxAllowanceAmount + 1, math.MaxInt64, math.MinInt64} {
							out = append(out, spendCase{t, store.CompleteParams{ActualCost: actual, ActualOutput: output, ActualMoney: money}})
						}
					}
				}
			}
		}
	}
	return out
}

// randomSpendCase is a reservation and a report drawn over the whole ranges: randomReservation and
// randomUsage for the tokens, and money none, small, or up to MaxAllowanceAmount and past it.
func randomSpendCase(r *rand.Rand) spendCase {
	cost, outCost := randomReservation(r)
	actual, output := randomUsage(r, cost)
	money := func() int64 {
		switch r.IntN(4) {
		case 0:
			return -r.Int64N(1000)
		case 1:
			return r.Int64N(1_000_000)
		case 2:
			return r.Int64N(throttle.MaxAllowanceAmount + 1)
		}
		return throttle.MaxAllowanceAmount + r.Int64N(math.MaxInt64-throttle.MaxAllowanceAmount)
	}
	return spendCase{store.Ticket{Cost: cost, OutputCost: outCost, CostMoney: max(0, money())},
		store.CompleteParams{ActualCost: actual, ActualOutput: output, ActualMoney: money()}}
}

// TestAllowanceLedgerColumnsMatchGo: a completion's release on its allowances is computed in SQL, one
// ticket per row of the batch, before the sums (allowanceSpendColumns of allowanceAppendSQL); the
// same release of a ticket that ends otherwise (a requeue, a cancel) is runUsage.spendRelease in Go. On
// every combination of edge values and on random tickets and reports, the SQL's columns, given the
// usage as CompleteMany passes it, are runUsage.spendRelease's: what was reserved of input, output and
// money, whether usage was reported, and what was used of each, money included (the CASE).
func TestAllowanceLedgerColumnsMatchGo(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const seed, random = 26, 20_000
	r := rand.New(rand.NewPCG(seed, seed))
	cases := edgeSpendCases()
	for range random {
		cases = append(cases, randomSpendCase(r))
	}
	t.Logf("seed %d: %d cases (%d of edge values)", seed, len(cases), len(cases)-random)
	q, _ := setup(t)

	var cost, outCost, costMoney, actual, output, money []int64
	want := make([]throttle.SpendRelease, len(cases))
	for i, c := range cases {
		var a, o, m int64
		want[i], a, o, m = store.CompletedSpendRelease(c.t, c.p)
		cost, outCost, costMoney = append(cost, c.t.Cost), append(outCost, c.t.OutputCost), append(costMoney, c.t.CostMoney)
		actual, output, money = append(actual, a), append(output, o), append(money, m)
	}
	cols := store.AllowanceSpendColumns
	rows, err := q.Pool().Query(ctx, `SELECT d.actual >= 0, `+cols[0]+`, `+cols[1]+`, `+cols[2]+`, `+cols[3]+`, `+cols[4]+`, `+cols[5]+`
		FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::bigint[], $5::bigint[], $6::bigint[]) WITH ORDINALITY
			AS d(cost, output_cost, cost_money, actual, actual_output, actual_money, ord)
		ORDER BY d.ord`, cost, outCost, costMoney, actual, output, money)
	require.NoError(t, err)
	defer rows.Close() // a failure leaves the rows open: closed, their connection goes back to the pool
	i := 0
	for ; rows.Next(); i++ {
		var got throttle.SpendRelease
		require.NoError(t, rows.Scan(&got.Reported, &got.Reserved.Tokens.Input, &got.Reserved.Tokens.Output, &got.Reserved.Money,
			&got.Actual.Tokens.Input, &got.Actual.Tokens.Output, &got.Actual.Money))
		w := want[i]
		w.AdmittedAt = got.AdmittedAt
		require.Equal(t, w, got, "case %d (seed %d): reserved %d tokens (%d output), %d money; reported %d tokens (%d output), %d money",
			i, seed, cases[i].t.Cost, cases[i].t.OutputCost, cases[i].t.CostMoney, cases[i].p.ActualCost, cases[i].p.ActualOutput,
			cases[i].p.ActualMoney)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, len(cases), i)
}

// TestCompletedSpendRelease_Money: what the SQL is held to (TestAllowanceLedgerColumnsMatchGo) is the
// documented rule of CompleteParams.ActualMoney: money reported counts, bounded at
// MaxAllowanceAmount; money not known (zero or negative) leaves the reservation standing, unless no
// tokens were used; with no usage reported, money is not read.
func TestCompletedSpendRelease_Money(t *testing.T) {
	t.Parallel()
	tk := store.Ticket{Cost: 100, CostMoney: 5000}
	for _, c := range []struct {
		name          string
		tokens, money int64
		reported      bool
		wantUsedMoney int64
	}{
		{"Reported", 80, 4000, true, 4000},
		{"AboveMax", 80, math.MaxInt64, true, throttle.MaxAllowanceAmount},
		{"UnknownZero", 80, 0, true, 5000},
		{"UnknownNegative", 80, -1, true, 5000},
		{"UnknownNoTokens", 0, 0, true, 0},
		{"KnownNoTokens", 0, 7, true, 7},
		{"NotReported", -1, 4000, false, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			sr, _, _, _ := store.CompletedSpendRelease(tk, store.CompleteParams{ActualCost: c.tokens, ActualMoney: c.money})
			require.Equal(t, c.reported, sr.Reported)
			require.Equal(t, c.wantUsedMoney, sr.Actual.Money)
			require.Equal(t, int64(5000), sr.Reserved.Money)
		})
	}
}
