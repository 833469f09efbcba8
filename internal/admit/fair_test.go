package admit_test

import (
	"math"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/admit"
)

// fairQueue is an in-memory model of one line's fair-share ordering, made of throttle's rules: FairTag
// at enqueue, FairAdvance at admission. It is what the ordering means; the tests below check that it
// shares a line as it should. The zero fairQueue is ready to use.
type fairQueue struct {
	finish map[string]float64
	now    float64 // the virtual time: the start tag of the ticket admitted last
	seq    int64
}

// Enqueue returns the place of a new ticket.
func (q *fairQueue) Enqueue(priority int, fairnessKey string, cost int64, weight float64) admit.Place {
	if q.finish == nil {
		q.finish = map[string]float64{}
	}
	var start float64
	start, q.finish[fairnessKey] = admit.FairTag(q.finish[fairnessKey], q.now, admit.FairIncrement(cost, weight))
	q.seq++
	return admit.Place{Priority: priority, Start: start, Seq: q.seq}
}

// Admitted advances virtual time past a ticket at p.
func (q *fairQueue) Admitted(p admit.Place) { q.now = admit.FairAdvance(q.now, p.Start) }

// queued is a ticket waiting in a fairQueue simulation.
type queued struct {
	key   string
	place admit.Place
}

// enqueue adds n tickets of key to line.
func enqueue(q *fairQueue, line []queued, n int, key string, cost int64, weight float64) []queued {
	for range n {
		line = append(line, queued{key: key, place: q.Enqueue(0, key, cost, weight)})
	}
	return line
}

// admitFirst admits the first n tickets of line in Place order, advancing q's virtual time as it goes, and
// returns the keys admitted in order and the tickets left.
func admitFirst(q *fairQueue, line []queued, n int) (keys []string, rest []queued) {
	line = slices.Clone(line)
	slices.SortFunc(line, func(a, b queued) int { return a.place.Compare(b.place) })
	n = min(n, len(line))
	for _, t := range line[:n] {
		q.Admitted(t.place)
		keys = append(keys, t.key)
	}
	return keys, line[n:]
}

func TestPlace_Compare(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name string
		a, b admit.Place
		want int
	}{
		{"PriorityFirst", admit.Place{Priority: 0, Start: 99, Seq: 99}, admit.Place{Priority: 1, Start: 0, Seq: 0}, -1},
		{"HigherPriorityValueLater", admit.Place{Priority: 5, Start: 0, Seq: 0}, admit.Place{Priority: 2, Start: 99, Seq: 99}, 1},
		{"NegativePriorityFirst", admit.Place{Priority: -1, Start: 10, Seq: 10}, admit.Place{Priority: 0, Start: 0, Seq: 0}, -1},
		{"ThenStart", admit.Place{Priority: 1, Start: 2.5, Seq: 99}, admit.Place{Priority: 1, Start: 3, Seq: 0}, -1},
		{"LaterStartAfter", admit.Place{Priority: 1, Start: 3, Seq: 0}, admit.Place{Priority: 1, Start: 2.5, Seq: 99}, 1},
		{"ThenSeq", admit.Place{Priority: 1, Start: 3, Seq: 4}, admit.Place{Priority: 1, Start: 3, Seq: 5}, -1},
		{"LaterSeqAfter", admit.Place{Priority: 1, Start: 3, Seq: 6}, admit.Place{Priority: 1, Start: 3, Seq: 5}, 1},
		{"Equal", admit.Place{Priority: 1, Start: 3, Seq: 5}, admit.Place{Priority: 1, Start: 3, Seq: 5}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, tc.a.Compare(tc.b))
			require.Equal(t, -tc.want, tc.b.Compare(tc.a), "Compare must be antisymmetric")
		})
	}

	t.Run("SortsByPriorityStartSeq", func(t *testing.T) {
		t.Parallel()
		places := []admit.Place{
			{Priority: 1, Start: 0, Seq: 1},
			{Priority: 0, Start: 2, Seq: 2},
			{Priority: 0, Start: 1, Seq: 4},
			{Priority: 0, Start: 1, Seq: 3},
			{Priority: -1, Start: 9, Seq: 5},
		}
		slices.SortFunc(places, admit.Place.Compare)
		require.Equal(t, []int64{5, 3, 4, 2, 1}, []int64{places[0].Seq, places[1].Seq, places[2].Seq, places[3].Seq, places[4].Seq})
	})
}

func TestFairShare(t *testing.T) {
	t.Parallel()

	t.Run("LateTenantInterleavesWithBacklog", func(t *testing.T) {
		t.Parallel()
		var q fairQueue
		line := enqueue(&q, nil, 100, "A", 1, 1)
		line = enqueue(&q, line, 10, "B", 1, 1)

		keys, _ := admitFirst(&q, line, len(line))
		require.Len(t, keys, 110)
		require.Equal(t, 10, countOf(keys[:20], "B"), "B's 10 tickets must be admitted within the first 20: %v", keys[:20])
		// Interleaved, not bunched after A's backlog: A and B alternate until B's run out.
		for i := range 20 {
			require.Equal(t, []string{"A", "B"}[i%2], keys[i], "admission %d: %v", i, keys[:20])
		}
		require.Equal(t, 1, longestRun(keys[:20], "A"))
	})

	t.Run("WeightsShareTwoToOne", func(t *testing.T) {
		t.Parallel()
		var q fairQueue
		line := enqueue(&q, nil, 100, "heavy", 1, 2)
		line = enqueue(&q, line, 100, "light", 1, 1)

		keys, _ := admitFirst(&q, line, 30)
		require.InDelta(t, 20, countOf(keys, "heavy"), 1, "%v", keys)
		require.InDelta(t, 10, countOf(keys, "light"), 1, "%v", keys)
		// And over any longer prefix while both are backlogged.
		keys, _ = admitFirst(&fairQueue{}, line, 150)
		require.InDelta(t, 100, countOf(keys, "heavy"), 1)
		require.InDelta(t, 50, countOf(keys, "light"), 1)
	})

	t.Run("CostsShareByTokens", func(t *testing.T) {
		t.Parallel()
		// A's tickets cost 3, B's cost 1, equal weights: B gets three tickets for each of A's.
		var q fairQueue
		line := enqueue(&q, nil, 50, "A", 3, 1)
		line = enqueue(&q, line, 50, "B", 1, 1)
		keys, _ := admitFirst(&q, line, 40)
		require.InDelta(t, 10, countOf(keys, "A"), 1, "%v", keys)
		require.InDelta(t, 30, countOf(keys, "B"), 1, "%v", keys)
	})

	t.Run("IdleKeyDoesNotBankCredit", func(t *testing.T) {
		t.Parallel()
		var q fairQueue
		line := enqueue(&q, nil, 100, "A", 1, 1)
		keys, line := admitFirst(&q, line, 50)
		require.Equal(t, 50, countOf(keys, "A"))
		require.Equal(t, 49.0, q.now, "virtual time is the start tag of the ticket admitted last")

		// B was idle all along: its first ticket starts at the current virtual time, not at 0.
		first := q.Enqueue(0, "B", 1, 1)
		require.Equal(t, q.now, first.Start)
		line = append(line, queued{key: "B", place: first})
		line = enqueue(&q, line, 9, "B", 1, 1)

		keys, _ = admitFirst(&q, line, 20)
		// Had B banked 50 turns, the next 10 would all be B's; instead B and A alternate.
		require.Equal(t, 10, countOf(keys, "B"), "%v", keys)
		require.Equal(t, 10, countOf(keys, "A"), "%v", keys)
		require.NotEqual(t, []string{"B", "B", "B"}, keys[:3])
		require.LessOrEqual(t, longestRun(keys, "B"), 2, "%v", keys)
	})

	t.Run("KeyStartsAtItsLastFinishWhenAhead", func(t *testing.T) {
		t.Parallel()
		var q fairQueue
		p1 := q.Enqueue(0, "A", 4, 1)
		p2 := q.Enqueue(0, "A", 1, 2)
		p3 := q.Enqueue(0, "A", 0, 1)
		p4 := q.Enqueue(0, "B", 1, 1)
		require.Equal(t, []float64{0, 4, 4.5, 0}, []float64{p1.Start, p2.Start, p3.Start, p4.Start})
		require.Equal(t, []int64{1, 2, 3, 4}, []int64{p1.Seq, p2.Seq, p3.Seq, p4.Seq})
	})

	t.Run("PriorityBeatsFairShare", func(t *testing.T) {
		t.Parallel()
		var q fairQueue
		line := enqueue(&q, nil, 5, "A", 1, 1)
		urgent := q.Enqueue(-1, "A", 1, 1) // A's sixth ticket, far behind in fair share
		line = append(line, queued{key: "urgent", place: urgent})
		keys, _ := admitFirst(&q, line, 1)
		require.Equal(t, []string{"urgent"}, keys)
	})

	t.Run("AdmittedNeverMovesVirtualTimeBack", func(t *testing.T) {
		t.Parallel()
		var q fairQueue
		q.Admitted(admit.Place{Start: 10})
		q.Admitted(admit.Place{Start: 3})
		require.Equal(t, 10.0, q.now)
		p := q.Enqueue(0, "late", 1, 1)
		require.Equal(t, 10.0, p.Start)
	})
}

func TestFairIncrement(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name   string
		cost   int64
		weight float64
		want   float64
	}{
		{"CostOverWeight", 10, 2, 5},
		{"WeightOne", 7, 1, 7},
		{"FractionalWeight", 3, 0.5, 6},
		{"ZeroCostCountsAsOne", 0, 1, 1},
		{"NegativeCostCountsAsOne", -50, 4, 0.25},
		{"OneCostHeavyWeight", 1, 1e6, 1e-6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, admit.FairIncrement(tc.cost, tc.weight))
		})
	}
}

func TestFairStart(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name            string
		lastFinish, now float64
		want            float64
	}{
		{"KeyAheadStartsAtItsFinish", 7, 3, 7},
		{"IdleKeyStartsAtVirtualTime", 1, 3, 3},
		{"Equal", 3, 3, 3},
		{"NewKey", 0, 2.5, 2.5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, admit.FairStart(tc.lastFinish, tc.now))
		})
	}
}

func TestFairTag(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name                 string
		lastFinish, now, inc float64
		start, finish        float64
	}{
		{"KeyAhead", 7, 3, 2, 7, 9},
		{"IdleKeyDoesNotBankCredit", 1, 3, 2, 3, 5},
		{"NoFairnessKeyStartsAtVirtualTime", 0, 4.5, 1, 4.5, 5.5},
		{"HeavyWeight", 10, 0, 1e-6, 10, 10 + 1e-6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			start, finish := admit.FairTag(tc.lastFinish, tc.now, tc.inc)
			require.Equal(t, tc.start, start)
			require.Equal(t, tc.finish, finish)
		})
	}

	t.Run("ABatchTakesTagsOneAfterAnother", func(t *testing.T) {
		t.Parallel()
		finish, starts := 2.0, []float64{}
		for _, inc := range []float64{4, 0.5, 1} {
			var start float64
			start, finish = admit.FairTag(finish, 3, inc)
			starts = append(starts, start)
		}
		require.Equal(t, []float64{3, 7, 7.5}, starts)
		require.Equal(t, 8.5, finish)
	})
}

func TestFairAdvance(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name       string
		now, start float64
		want       float64
	}{
		{"MovesUpToTheStart", 3, 5, 5},
		{"NeverMovesBack", 10, 3, 10},
		{"Equal", 4, 4, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, admit.FairAdvance(tc.now, tc.start))
		})
	}
}

func TestValidateWeight(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name string
		w    float64
		ok   bool
		text string
	}{
		{"AcceptsOne", 1, true, ""},
		{"AcceptsSmall", 1e-9, true, ""},
		{"AcceptsMax", 1e6, true, ""},
		{"RejectsZero", 0, false, "got 0"},
		{"RejectsNegative", -2, false, "got -2"},
		{"RejectsNaN", math.NaN(), false, "got NaN"},
		{"RejectsPosInf", math.Inf(1), false, "got +Inf"},
		{"RejectsNegInf", math.Inf(-1), false, "got -Inf"},
		{"RejectsOverMax", 1e6 + 1, false, "got 1.000001e+06"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := admit.ValidateWeight(tc.w)
			if tc.ok {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, "Weight")
			require.ErrorContains(t, err, tc.text)
		})
	}
}

func countOf(keys []string, key string) int {
	n := 0
	for _, k := range keys {
		if k == key {
			n++
		}
	}
	return n
}

func longestRun(keys []string, key string) int {
	best, run := 0, 0
	for _, k := range keys {
		if k == key {
			run++
			best = max(best, run)
		} else {
			run = 0
		}
	}
	return best
}
