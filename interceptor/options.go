package interceptor

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/sluicehq/sluice/internal/dispatcher"
	"github.com/sluicehq/sluice/pgqueue"
	"github.com/sluicehq/sluice/throttle"
)

// Defaults of Options.
const (
	DefaultMaxHeld            = 10_000
	DefaultLeaseTTL           = 15 * time.Second
	DefaultPollInterval       = time.Second
	DefaultPooledPollInterval = 200 * time.Millisecond
	MinPollInterval           = 10 * time.Millisecond
	DefaultHeartbeatInterval  = 5 * time.Second
	DefaultClaimBatch         = 1000
	DefaultSelfCheckInterval  = 5 * time.Second
)

// CostFunc estimates the token cost of one activity call from its decoded arguments. It runs in the
// interceptor, before the ticket is written. It must return a value in [0, pgqueue.MaxCost]; an error
// or an out-of-range cost fails the activity attempt with a non-retryable error naming the route.
type CostFunc func(args []any) (int64, error)

// TokensFunc estimates the tokens of one activity call by dimension, from its decoded arguments: the
// input tokens of the prompt, and the output tokens the call may produce (its max_tokens, reserved in
// full and reconciled from the reported usage). Each part must be in [0, pgqueue.MaxCost], and so must
// their sum; an error or an out-of-range figure fails the attempt with a non-retryable error naming
// the route. It runs in the interceptor, before the ticket is written.
type TokensFunc func(args []any) (throttle.Cost, error)

// KeyFunc derives a string (a fairness key, an extra limit key) from the activity's decoded arguments
// and info.
type KeyFunc func(info ActivityInfo, args []any) string

// ActivityInfo is what route functions see of the activity.
type ActivityInfo struct {
	ActivityType, ActivityID, WorkflowID, WorkflowType, RunID, Namespace, TaskQueue string
	Attempt                                                                         int32
	// Priority is the activity's Temporal PriorityKey, 0 when unset.
	Priority int
}

// Route says which limits an activity type draws on and how to place its tickets.
type Route struct {
	// Limits are the keys of the limits the activity draws on; the first is its line. Required.
	Limits []string
	// Cost estimates the tokens a call reserves, as one figure: input tokens (throttle.Tokens). Nil
	// means 0 (a limit on requests or concurrency only). A limit with a combined budget alone
	// (OpenAI's TPM) needs no more; for one with an output budget (Anthropic's OTPM) use Tokens.
	Cost CostFunc
	// Tokens estimates the tokens a call reserves by dimension, input and output: what a limit with
	// input and output budgets needs. Set Cost or Tokens, not both.
	Tokens TokensFunc
	// Priority orders tickets within a line, lower first. Zero means the activity's Temporal
	// PriorityKey when it has one, else 3, Temporal's default.
	Priority int
	// FairnessKey, when set, shares a line fairly between the keys it returns (tenants, workflows).
	FairnessKey KeyFunc
	// Weight returns the fair-share weight of a fairness key. Nil means 1 for every key.
	Weight func(fairnessKey string) float64
	// KeyLimits, when set, returns further limits the call draws on, derived from its arguments: a
	// tenant's cap, {Key: "tenant:" + id, MaxConcurrent: 2}. A returned limit is created the first
	// time its key is seen and never overwritten afterwards, so that a runtime change to it sticks.
	// An invalid limit fails the attempt with a non-retryable error naming it.
	KeyLimits func(info ActivityInfo, args []any) []throttle.Limit
	// Model names the model the activity calls, as Options.Prices knows it: a ticket reserves the
	// price of its token estimate (Cost or Tokens) from the money allowances of its limits, and the
	// usage it reports (sluiceactivity.ReportTokens, ReportModelUsage) is priced to reconcile them.
	// Empty means no money is reserved unless the run reports a model.
	Model string
}

// Options configures the plugin. Pool and Client are required; Routes name what it throttles.
type Options struct {
	// Pool is the Postgres pool Sluice's tables live in. Required.
	Pool *pgxpool.Pool
	// Client is the worker's Temporal client, used to heartbeat and complete activities. Required.
	Client client.Client
	// Schema holds Sluice's tables. Defaults to pgqueue.DefaultSchema.
	Schema string
	// Limits are upserted when the worker starts: their configuration is replaced, their state kept.
	// A limit a route names must be here or already in the database.
	Limits []throttle.Limit
	// Routes maps activity type names to their limits. Unrouted types run as usual. A plugin with no
	// routes throttles nothing itself: it serves a gate (package gate), or it logs a warning at start.
	Routes map[string]Route
	// Prices turns tokens into money for the limits' money allowances (throttle.Allowance with
	// MeterMoney): the price of each route's Model. Its Currency must be the money allowances'.
	// Nil means none: a route may then name no Model. docs/prices-example.json is a dated example.
	Prices *throttle.PriceTable
	// MaxHeld bounds the invocations this process holds in memory, queued or running. Past it,
	// ExecuteActivity waits, so the backlog stays in Temporal's task queue. Defaults to DefaultMaxHeld.
	MaxHeld int
	// LeaseTTL is how long after this process's last lease renewal its tickets are handed back to
	// Temporal by the survivors. It is renewed every LeaseTTL/3. Defaults to DefaultLeaseTTL.
	LeaseTTL time.Duration
	// PollInterval is the fallback when notifications are lost, and how work is found when this
	// process does not listen (TransactionPooler without ListenURL). Defaults to DefaultPollInterval,
	// or DefaultPooledPollInterval when this process does not listen.
	PollInterval time.Duration
	// TransactionPooler says that Pool connects through a pooler in transaction mode (PgBouncer's
	// pool_mode = transaction, which many managed Postgres services put in front of the database),
	// where a connection's session state does not outlive a transaction. Sluice then keeps none:
	// it does not LISTEN on Pool (it listens on ListenURL if set, else it polls every
	// PollInterval), and NewPlugin refuses a Pool that caches prepared statements (pgx's default
	// QueryExecModeCacheStatement, which PgBouncer follows only from 1.21 with max_prepared_statements
	// set, the default from 1.24): add default_query_exec_mode=exec to its URL. Defaults to false: Pool reaches Postgres directly.
	// Left false over a transaction pooler, the plugin refuses to start with ErrTransactionPooler:
	// when the first worker starts, it reads pg_backend_pid() on one of Pool's connections in two
	// transactions, and, when the backend PID reported at connect is not that one (a pooler's), on
	// a second connection opened beside it. A backend that changes under one connection, or serves
	// two at once, is a transaction pooler; a direct connection or a pooler in session mode passes.
	TransactionPooler bool
	// ListenURL, when set, is the connection string of a direct connection to Postgres (not through
	// a pooler) on which this process listens for notifications, in place of a connection taken
	// from Pool. With TransactionPooler it brings back notifications (work is found in milliseconds
	// rather than at the next poll) for one direct connection per Plugin, held from its first
	// worker's start to its last one's stop. Defaults to "".
	ListenURL string
	// HeartbeatInterval is how often queued tickets (and running activities without a
	// HeartbeatTimeout) are heartbeated to Temporal, which is also how soon a cancellation reaches
	// them. An activity with a HeartbeatTimeout is heartbeated at least every 0.8 x that timeout.
	// Defaults to DefaultHeartbeatInterval.
	HeartbeatInterval time.Duration
	// MinRemaining skips tickets whose deadline is closer than this at admission. Defaults to 0.
	MinRemaining time.Duration
	// ClaimBatch bounds the tickets one claim admits, and those one take handles. A claim admits for
	// every replica of the fleet, so each replica's share of it (what it then takes in one statement,
	// and completes in group commits of up to 100) is about ClaimBatch / replicas: at 100, 32 replicas
	// took and completed 3 or 4 tickets a statement. Defaults to DefaultClaimBatch.
	ClaimBatch int
	// SelfCheckInterval is how often this process holds its tickets in Postgres against the
	// invocations it holds, and reconciles a ticket they disagree on twice in a row (a commit whose
	// answer was lost leaves them apart): one the claim admitted for it is run, one it no longer
	// holds is handed back to Temporal. After a statement whose outcome is unknown it checks at once
	// too. A ticket is thus never left running without a run for more than about two intervals.
	// Defaults to DefaultSelfCheckInterval.
	SelfCheckInterval time.Duration
	// DataConverter encodes results before they are stored and delivered. It must be the one the
	// worker's client uses. Defaults to converter.GetDefaultDataConverter().
	DataConverter converter.DataConverter
	// FailureConverter encodes errors. It must be the one the worker's client uses. Defaults to
	// temporal.GetDefaultFailureConverter().
	FailureConverter converter.FailureConverter
	// Identity names this process in Temporal and as the owner of its tickets (a unique suffix is
	// added). Defaults to "sluice@<hostname>:<pid>".
	Identity string
	// Logger receives Sluice's own logs. Defaults to slog.Default().
	Logger *slog.Logger
	// TracerProvider makes the wait and run spans. Defaults to otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
	// Clock, when set, is the time Sluice's queue decides at in place of the database's clock:
	// admissions, allowances' windows, leases. It is for simulations and samples that move time on
	// (samples/plans starts its day at 23:40 in Los Angeles); every replica of a fleet must share it.
	// Temporal's deadlines stay in real time, so a Clock ahead of it would see them pass. Leases are
	// kept on it too: move it on by less than LeaseTTL at a time (or set a LeaseTTL longer than the
	// jumps), or every replica's lease looks lapsed and their running tickets are handed back. Nil,
	// the default, is the database's clock: what production uses.
	Clock func() time.Time
	// MetricsHandler receives Sluice's metrics (the Metric* names). Pass the handler the worker's
	// client has, so that they go wherever its Temporal metrics go. Defaults to
	// client.MetricsNopHandler.
	MetricsHandler client.MetricsHandler
}

func (o Options) withDefaults() Options {
	o.Schema = cmp.Or(o.Schema, pgqueue.DefaultSchema)
	o.MaxHeld = cmp.Or(o.MaxHeld, DefaultMaxHeld)
	o.LeaseTTL = cmp.Or(o.LeaseTTL, DefaultLeaseTTL)
	if o.TransactionPooler && o.ListenURL == "" {
		o.PollInterval = cmp.Or(o.PollInterval, DefaultPooledPollInterval)
	}
	o.PollInterval = cmp.Or(o.PollInterval, DefaultPollInterval)
	o.HeartbeatInterval = cmp.Or(o.HeartbeatInterval, DefaultHeartbeatInterval)
	o.ClaimBatch = cmp.Or(o.ClaimBatch, DefaultClaimBatch)
	o.SelfCheckInterval = cmp.Or(o.SelfCheckInterval, DefaultSelfCheckInterval)
	if o.DataConverter == nil {
		o.DataConverter = converter.GetDefaultDataConverter()
	}
	if o.FailureConverter == nil {
		o.FailureConverter = temporal.GetDefaultFailureConverter()
	}
	if o.Identity == "" {
		host, _ := os.Hostname()
		o.Identity = fmt.Sprintf("sluice@%s:%d", host, os.Getpid())
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

func (o Options) validate() error {
	if o.Pool == nil {
		return errors.New("sluice: Options.Pool must not be nil")
	}
	if err := o.validatePooler(); err != nil {
		return err
	}
	if o.Client == nil {
		return errors.New("sluice: Options.Client must not be nil")
	}
	if o.Prices != nil {
		if err := o.Prices.Validate(); err != nil {
			return fmt.Errorf("sluice: Options.Prices: %w", err)
		}
	}
	limits := map[string]bool{}
	for i, l := range o.Limits {
		if err := l.WithDefaults().Validate(); err != nil {
			return fmt.Errorf("sluice: Options.Limits[%d]: %w", i, err)
		}
		if limits[l.Key] {
			return fmt.Errorf("sluice: Options.Limits[%d]: key %q is given twice", i, l.Key)
		}
		limits[l.Key] = true
	}
	for name, r := range o.Routes {
		if name == "" {
			return errors.New("sluice: Options.Routes has an empty activity type name")
		}
		if len(r.Limits) == 0 {
			return fmt.Errorf("sluice: Options.Routes[%q].Limits must name at least one limit", name)
		}
		if r.Cost != nil && r.Tokens != nil {
			return fmt.Errorf("sluice: Options.Routes[%q] sets both Cost and Tokens: set one", name)
		}
		if err := o.validateModel(name, r); err != nil {
			return err
		}
		seen := map[string]bool{}
		for _, k := range r.Limits {
			if err := throttle.ValidateKey(k); err != nil {
				return fmt.Errorf("sluice: Options.Routes[%q].Limits: %w", name, err)
			}
			if seen[k] {
				return fmt.Errorf("sluice: Options.Routes[%q].Limits names %q twice", name, k)
			}
			seen[k] = true
		}
	}
	if o.MaxHeld < 1 {
		return fmt.Errorf("sluice: Options.MaxHeld must be >= 1, got %d", o.MaxHeld)
	}
	if o.LeaseTTL < time.Second {
		return fmt.Errorf("sluice: Options.LeaseTTL must be >= 1s, got %s", o.LeaseTTL)
	}
	if o.PollInterval < MinPollInterval {
		return fmt.Errorf("sluice: Options.PollInterval must be >= %s, got %s", MinPollInterval, o.PollInterval)
	}
	if o.HeartbeatInterval < 100*time.Millisecond {
		return fmt.Errorf("sluice: Options.HeartbeatInterval must be >= 100ms, got %s", o.HeartbeatInterval)
	}
	if o.MinRemaining < 0 {
		return fmt.Errorf("sluice: Options.MinRemaining must be >= 0, got %s", o.MinRemaining)
	}
	if o.ClaimBatch < 1 || o.ClaimBatch > 10_000 {
		return fmt.Errorf("sluice: Options.ClaimBatch must be in [1, 10000], got %d", o.ClaimBatch)
	}
	if o.SelfCheckInterval < 100*time.Millisecond {
		return fmt.Errorf("sluice: Options.SelfCheckInterval must be >= 100ms, got %s", o.SelfCheckInterval)
	}
	return nil
}

// dispatcherConfig is the dispatcher's share of the options, which withDefaults and validate have
// made complete and valid. Every field of Options but Routes is one of the dispatcher's Tunables, of
// the same name and type: TestOptions_Tunables holds this literal to that.
func (o Options) dispatcherConfig(owner string) dispatcher.Config {
	routes := make(map[string][]string, len(o.Routes))
	for name, r := range o.Routes {
		routes[name] = r.Limits
	}
	return dispatcher.Config{Owner: owner, Routes: routes, Tunables: dispatcher.Tunables{
		Pool: o.Pool, Client: o.Client, Schema: o.Schema, Limits: o.Limits, Prices: o.Prices, MaxHeld: o.MaxHeld,
		LeaseTTL: o.LeaseTTL, PollInterval: o.PollInterval, TransactionPooler: o.TransactionPooler, ListenURL: o.ListenURL,
		HeartbeatInterval: o.HeartbeatInterval, MinRemaining: o.MinRemaining, ClaimBatch: o.ClaimBatch,
		SelfCheckInterval: o.SelfCheckInterval, DataConverter: o.DataConverter, FailureConverter: o.FailureConverter,
		Identity: o.Identity, Logger: o.Logger, TracerProvider: o.TracerProvider, Clock: o.Clock, MetricsHandler: o.MetricsHandler,
	}}
}

// validateModel checks route r's Model against Prices: a model needs a price table that prices it.
func (o Options) validateModel(name string, r Route) error {
	if r.Model == "" {
		return nil
	}
	if o.Prices == nil {
		return fmt.Errorf("sluice: Options.Routes[%q].Model is %q but Options.Prices is nil: give a price table", name, r.Model)
	}
	if _, err := o.Prices.Estimate(r.Model, throttle.Cost{}); err != nil {
		return fmt.Errorf("sluice: Options.Routes[%q].Model: %w", name, err)
	}
	return nil
}
