// Command plans shows allowances: a product built on an LLM sells plans, and each tenant's plan is a
// windowed allowance on its own limit. Three tenants ask questions through one provider limit:
//
//	free: tokens=50000/day@America/Los_Angeles   refused when spent
//	pro:  tokens=2000000/day@America/Los_Angeles waits when spent (it never is here)
//	team: usd=5.00/day@America/Los_Angeles       a $5 daily spend cap, refused when spent
//
// Each call reserves its estimate (the prompt and max_tokens; in money, their price by the price
// table) and is reconciled with the usage the fake provider reports (a cached share of the prompt,
// and 40-100% of max_tokens). The sample controls Sluice's clock (sluiceinterceptor.Options.Clock):
// it starts the day at 23:40 in Los Angeles, has every tenant ask its questions at once, and prints,
// per tenant, what was answered and refused, the tokens and money used against the allowance, and
// the first refusal's message with its reset time. Then it moves the clock past midnight and asks
// again: the free tenant's day has reset.
//
//	temporal server start-dev   # in another terminal: Temporal at localhost:7233
//	go run ./samples/plans      # against it and a local Postgres
//
// It takes -temporal (default $TEMPORAL_ADDRESS, else localhost:7233) and -database (default
// $DATABASE_URL, else postgres://postgres@localhost:5432/postgres?sslmode=disable); Sluice's tables
// go in -schema.
package main

import (
	"github.com/sluicehq/sluice/samples/internal/poolflags"

	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"log"
	"os"
	"sync"
	"time"

	"github.com/sluicehq/sluice/throttle"
)

// Plan is a tenant's plan and the questions the sample asks for it: how many before and after
// midnight, and their size.
type Plan struct {
	Tenant string
	// Allowance is the plan's allowance in the operators' syntax; OnSpent what a call does when it is
	// spent.
	Allowance string
	OnSpent   throttle.OnSpent
	// Before and After are how many questions the tenant asks before and after midnight.
	Before, After int
	// Prompt, Cached and MaxTokens size each question: its prompt's tokens, the part the provider
	// has cached, and the most it may answer with.
	Prompt, Cached, MaxTokens int64
}

// Config is the sample's setup.
type Config struct {
	Plans []Plan
	// Model is what every question asks, priced by Prices.
	Model  string
	Prices throttle.PriceTable
	// Start is where the sample's clock starts: 20 minutes before midnight in the plans' zone.
	Start time.Time
	// ProviderCap is the provider's concurrency.
	ProviderCap int
	// Schema and TaskQueue are where the sample's tables and tasks go.
	Schema, TaskQueue string
	// Pooler says how the Postgres URL reaches Postgres: directly, or through a transaction pooler
	// (-transaction-pooler, -listen-url).
	Pooler poolflags.Pooler
}

// DefaultConfig is the sample as the package doc describes it. Prices are OpenAI's for gpt-4o as
// docs/prices-example.json gives them (dated there); supply your own.
func DefaultConfig() Config {
	la, err := time.LoadLocation("America/Los_Angeles")
	if err != nil {
		log.Fatalf("plans: the zone database lacks America/Los_Angeles: %v", err)
	}
	return Config{
		Plans: []Plan{
			{Tenant: "free", Allowance: "tokens=50000/day@America/Los_Angeles", OnSpent: throttle.OnSpentRefuse,
				Before: 40, After: 5, Prompt: 1_500, Cached: 300, MaxTokens: 500},
			{Tenant: "pro", Allowance: "tokens=2000000/day@America/Los_Angeles", OnSpent: throttle.OnSpentWait,
				Before: 40, After: 5, Prompt: 8_000, Cached: 2_000, MaxTokens: 800},
			{Tenant: "team", Allowance: "usd=5.00/day@America/Los_Angeles", OnSpent: throttle.OnSpentRefuse,
				Before: 80, After: 5, Prompt: 30_000, Cached: 10_000, MaxTokens: 1_000},
		},
		Model: "gpt-4o",
		Prices: throttle.PriceTable{Currency: "USD", AsOf: "2025-09-01", Source: "docs/prices-example.json",
			Models: map[string]throttle.Price{"gpt-4o": {Input: 2_500_000, CachedInput: 1_250_000, Output: 10_000_000}}},
		Start:       time.Date(2026, 2, 10, 23, 40, 0, 0, la),
		ProviderCap: 8,
		Schema:      "sluice_plans", TaskQueue: "plans-" + randomHex(4),
	}
}

// Clock is the sample's clock, which Sluice decides at: it runs at the speed of real time from the
// instant it was last set.
type Clock struct {
	mu         sync.Mutex
	base, real time.Time
}

// Now is the sample's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.base.Add(time.Since(c.real))
}

// Set moves the clock to t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.base, c.real = t, time.Now()
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func main() {
	cfg := DefaultConfig()
	temporalAddr := flag.String("temporal", cmp.Or(os.Getenv("TEMPORAL_ADDRESS"), "localhost:7233"), "the Temporal frontend")
	dbURL := flag.String("database", cmp.Or(os.Getenv("DATABASE_URL"), "postgres://postgres@localhost:5432/postgres?sslmode=disable"),
		"the Postgres Sluice uses")
	flag.StringVar(&cfg.Schema, "schema", cfg.Schema, "the schema of Sluice's tables, created if missing")
	pooler, err := poolflags.Define(flag.CommandLine)
	if err != nil {
		log.Fatalf("plans: %v", err)
	}
	flag.Parse()
	cfg.Pooler = pooler()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	res, err := run(ctx, cfg, *dbURL, *temporalAddr)
	if err != nil {
		log.Fatalf("plans: %v", err)
	}
	report(os.Stdout, cfg, res)
}
