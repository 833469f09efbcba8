package dispatcher

import (
	"context"

	"github.com/sluicehq/sluice/internal/testsignal"
)

// Gauger publishes, every sweepEvery, the in-flight gauges (sluice_inflight, sluice_inflight_tokens)
// of every limit the routes name, as the database has them: the figures of all replicas.
type Gauger struct {
	loops
	*deps
	keys    []string // every limit key the routes name
	signals gaugerSignals
}

// gaugerSignals are the Gauger's events, for tests.
type gaugerSignals struct {
	Published testsignal.Signal[[]string] // a pass ended; the keys whose gauges it published
}

// Start starts the publishing loop.
func (g *Gauger) Start(ctx context.Context) error { return g.start(ctx, g.loop) }

// Stop ends the publishing loop.
func (g *Gauger) Stop(ctx context.Context) error { return g.stop(ctx) }

func (g *Gauger) loop(ctx context.Context) {
	every(ctx, sweepEvery(g.cfg), func() { g.publish(ctx) })
}

// publish publishes the gauges of every key once. A key whose status cannot be read keeps its last
// figures until the next pass.
func (g *Gauger) publish(ctx context.Context) {
	var published []string
	for _, k := range g.keys {
		if st, err := g.q.LimitStatus(ctx, k); err == nil {
			g.tm.Gauges(k, st.State)
			published = append(published, k)
		}
	}
	g.signals.Published.Signal(published)
}
