package admit_test

import (
	"fmt"
	"slices"

	"github.com/sluicehq/sluice/internal/admit"
)

func ExampleFairTag() {
	type ticket struct {
		tenant string
		place  admit.Place
	}
	var (
		line   []ticket
		finish = map[string]float64{} // each tenant's finish tag
		now    float64                // the line's virtual time
	)
	enqueue := func(tenant string, n int, weight float64) {
		for range n {
			var start float64
			start, finish[tenant] = admit.FairTag(finish[tenant], now, admit.FairIncrement(1, weight))
			line = append(line, ticket{tenant, admit.Place{Priority: 3, Start: start, Seq: int64(len(line))}})
		}
	}
	// bigco queues 4 tickets first; then smallco queues 2 and premium, weighted 2, queues 4.
	enqueue("bigco", 4, 1)
	enqueue("smallco", 2, 1)
	enqueue("premium", 4, 2)

	// Admission takes the smallest place first: tenants take turns, premium twice as often.
	slices.SortFunc(line, func(a, b ticket) int { return a.place.Compare(b.place) })
	for _, t := range line {
		now = admit.FairAdvance(now, t.place.Start)
		fmt.Printf("%s (start %v)\n", t.tenant, t.place.Start)
	}

	// Output:
	// bigco (start 0)
	// smallco (start 0)
	// premium (start 0)
	// premium (start 0.5)
	// bigco (start 1)
	// smallco (start 1)
	// premium (start 1)
	// premium (start 1.5)
	// bigco (start 2)
	// bigco (start 3)
}
