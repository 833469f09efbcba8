package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/throttle"
)

// Tunables are the plugin's options that the dispatcher runs with: interceptor.Options' fields of the
// same names and types, where each is documented, defaulted (withDefaults) and validated. The
// dispatcher trusts them. It cannot take interceptor.Options itself, since the interceptor imports
// the dispatcher, and interceptor.Options cannot embed Tunables without hiding its fields' docs and
// breaking its callers' composite literals; the interceptor fills Tunables in one literal, and its
// TestOptions_Tunables fails when a field of Options is neither here nor declared interceptor-only.
type Tunables struct {
	Pool              *pgxpool.Pool
	Client            client.Client
	Schema            string
	Limits            []throttle.Limit
	Prices            *throttle.PriceTable
	MaxHeld           int
	LeaseTTL          time.Duration
	PollInterval      time.Duration
	TransactionPooler bool
	ListenURL         string
	HeartbeatInterval time.Duration
	MinRemaining      time.Duration
	ClaimBatch        int
	SelfCheckInterval time.Duration
	DataConverter     converter.DataConverter
	FailureConverter  converter.FailureConverter
	Identity          string
	Logger            *slog.Logger
	TracerProvider    trace.TracerProvider
	Clock             func() time.Time
	MetricsHandler    client.MetricsHandler
}

// Config is what the dispatcher runs with: the plugin's Tunables, and what the interceptor derives
// for the dispatcher alone. It builds its one queue, its notifier and its telemetry from it.
type Config struct {
	Tunables
	// Owner is this process's owner ID, written into its tickets.
	Owner string
	// Routes maps each routed activity type to the keys of the limits it draws on (its
	// Options.Routes[name].Limits), each of which must exist once Limits are upserted.
	Routes map[string][]string
}

// listen is how the notifier listens: on a connection taken from Pool, on ListenURL, or, behind a
// transaction pooler without ListenURL, not at all (the services poll every PollInterval).
func (c Config) listen() store.Listen {
	return store.Listen{URL: c.ListenURL, Off: c.TransactionPooler && c.ListenURL == ""}
}

// keys returns every limit key the routes name, once each, in key order: the keys of the gauges.
func (c Config) keys() []string {
	var keys []string
	for _, ks := range c.Routes {
		keys = append(keys, ks...)
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}

// prepare readies the schema for the routes: it refuses a Pool behind an undeclared transaction
// pooler, runs the migrations, upserts Limits, and checks that every limit a route names exists.
func (d *Dispatcher) prepare(ctx context.Context) error {
	cfg := d.deps.cfg
	if err := d.checkPooler(ctx); err != nil {
		return err
	}
	if _, err := store.Migrate(ctx, cfg.Pool, store.MigrateOptions{Schema: cfg.Schema}); err != nil {
		return fmt.Errorf("sluice: %w", cfg.poolerHint(err))
	}
	if len(cfg.Limits) > 0 {
		if err := d.deps.q.UpsertLimits(ctx, cfg.Limits...); err != nil {
			return fmt.Errorf("sluice: %w", cfg.poolerHint(err))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.Routes)) {
		for _, k := range cfg.Routes[name] {
			_, err := d.deps.q.Limit(ctx, k)
			if errors.Is(err, store.ErrUnknownLimit) {
				return fmt.Errorf("sluice: Options.Routes[%q]: limit %q is neither in Options.Limits nor in the database", name, k)
			}
			if err != nil {
				return fmt.Errorf("sluice: Options.Routes[%q]: read limit %q: %w", name, k, cfg.poolerHint(err))
			}
		}
	}
	return nil
}
