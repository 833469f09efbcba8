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

	"github.com/sluicehq/sluice/pgqueue"
	"github.com/sluicehq/sluice/throttle"
)

// Config is what the dispatcher runs with: the plugin's options (interceptor.Options documents each
// field), filled with their defaults and validated by the interceptor. The dispatcher trusts it, and
// builds its one queue, its notifier and its telemetry from it.
type Config struct {
	Pool   *pgxpool.Pool
	Schema string
	// Limits are upserted at Start. Routes maps each routed activity type to the keys of the limits
	// it draws on, each of which must exist once Limits are upserted.
	Limits []throttle.Limit
	Routes map[string][]string
	// Prices turns reported token usage into money for money allowances (nil: none), by the model
	// an invocation's route names or its run reports.
	Prices *throttle.PriceTable
	// TransactionPooler and ListenURL say how the notifier hears of work (see Config.listen).
	TransactionPooler bool
	ListenURL         string

	Client   client.Client
	Owner    string // this process's owner ID, written into its tickets
	Identity string // the worker identity given to Temporal

	MaxHeld, ClaimBatch                                                        int
	LeaseTTL, PollInterval, HeartbeatInterval, MinRemaining, SelfCheckInterval time.Duration

	DataConverter    converter.DataConverter
	FailureConverter converter.FailureConverter
	Logger           *slog.Logger
	TracerProvider   trace.TracerProvider
	MetricsHandler   client.MetricsHandler
	// Now is the queue's clock (pgqueue.Options.Now); nil for the database's.
	Now func() time.Time
}

// listen is how the notifier listens: on a connection taken from Pool, on ListenURL, or, behind a
// transaction pooler without ListenURL, not at all (the services poll every PollInterval).
func (c Config) listen() pgqueue.Listen {
	return pgqueue.Listen{URL: c.ListenURL, Off: c.TransactionPooler && c.ListenURL == ""}
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
	if _, err := pgqueue.Migrate(ctx, cfg.Pool, pgqueue.MigrateOptions{Schema: cfg.Schema}); err != nil {
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
			if errors.Is(err, pgqueue.ErrUnknownLimit) {
				return fmt.Errorf("sluice: Options.Routes[%q]: limit %q is neither in Options.Limits nor in the database", name, k)
			}
			if err != nil {
				return fmt.Errorf("sluice: Options.Routes[%q]: read limit %q: %w", name, k, cfg.poolerHint(err))
			}
		}
	}
	return nil
}
