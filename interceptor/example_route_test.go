package interceptor_test

import (
	"context"
	"fmt"
	"log"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/client"

	sluiceinterceptor "github.com/sluicehq/sluice/interceptor"
	"github.com/sluicehq/sluice/throttle"
)

// NewPlugin checks its options without touching the network, and names the field and the value of
// the first mistake.
func ExampleNewPlugin_invalidOptions() {
	ctx := context.Background()
	// Neither connects here: the pool dials when it is first used, the lazy client likewise.
	pool, err := pgxpool.New(ctx, "postgres://localhost:5432/app")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	c, err := client.NewLazyClient(client.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	limits := []throttle.Limit{{Key: "openai", MaxConcurrent: 50}}
	routes := map[string]sluiceinterceptor.Route{"Summarize": {Limits: []string{"openai"}}}
	for _, opts := range []sluiceinterceptor.Options{
		{Client: c, Limits: limits, Routes: routes},
		{Pool: pool, Client: c, Limits: limits, Routes: map[string]sluiceinterceptor.Route{"": {Limits: []string{"openai"}}}},
		{Pool: pool, Client: c, Limits: limits, Routes: map[string]sluiceinterceptor.Route{"Summarize": {}}},
		{Pool: pool, Client: c, Limits: []throttle.Limit{{Key: "openai", Burst: 5}}, Routes: routes},
		{Pool: pool, Client: c, Limits: limits, Routes: routes, Schema: "Sluice-Prod"},
		{Pool: pool, Client: c, Limits: limits, Routes: routes, PollInterval: time.Millisecond},
		{Pool: pool, Client: c, Limits: limits, Routes: routes},
	} {
		_, err := sluiceinterceptor.NewPlugin(opts)
		fmt.Println(err)
	}

	// Output:
	// sluice: Options.Pool must not be nil
	// sluice: Options.Routes has an empty activity type name
	// sluice: Options.Routes["Summarize"].Limits must name at least one limit
	// sluice: Options.Limits[0]: throttle: limit "openai": Burst must be 0 when RequestsPerSecond is not set, got 5
	// sluice: Options.Schema: pgqueue: Schema must match ^[a-z_][a-z0-9_]*$ and be at most 63 bytes, got "Sluice-Prod"
	// sluice: Options.PollInterval must be >= 10ms, got 1ms
	// <nil>
}

// Document is what the Summarize activity of these examples takes.
type Document struct {
	ID   int
	Text string
}

// A route's Cost estimates the tokens a call reserves from its decoded arguments: here the prompt
// (about 4 characters a token) plus max_tokens, which the provider counts at admission too. The
// estimate should be high rather than low: sluiceactivity.ReportTokens gives back what the call did
// not use.
func ExampleRoute_cost() {
	const maxTokens = 500
	route := sluiceinterceptor.Route{
		Limits: []string{"openai"},
		Cost: func(args []any) (int64, error) {
			doc, ok := args[0].(Document)
			if !ok {
				return 0, fmt.Errorf("summarize: argument is a %T, not a Document", args[0])
			}
			return int64(len(doc.Text)+3)/4 + maxTokens, nil
		},
	}

	cost, err := route.Cost([]any{Document{ID: 1, Text: strings.Repeat("word ", 400)}})
	fmt.Println(cost, err)
	_, err = route.Cost([]any{"not a document"})
	fmt.Println(err)

	// Output:
	// 1000 <nil>
	// summarize: argument is a string, not a Document
}

// Question is what the AskClaude activity of these examples takes: the starter counted the prompt's
// input tokens once (Anthropic's count_tokens endpoint, client.Messages.CountTokens), so the
// estimate is exact.
type Question struct {
	Prompt      string
	InputTokens int64
	MaxTokens   int64
}

// A route's Tokens estimates a call by dimension, for a limit with input and output budgets
// (Anthropic's ITPM and OTPM): the prompt's input tokens, and max_tokens as output, reserved in full
// and given back as sluiceactivity.ReportAnthropicUsage reports what the call did not use.
func ExampleRoute_tokens() {
	limit := throttle.Limit{Key: "anthropic", RequestsPerSecond: 50, InputTokensPerMinute: 400_000, OutputTokensPerMinute: 80_000}
	route := sluiceinterceptor.Route{
		Limits: []string{limit.Key},
		Tokens: func(args []any) (throttle.Cost, error) {
			q, ok := args[0].(Question)
			if !ok {
				return throttle.Cost{}, fmt.Errorf("ask: argument is a %T, not a Question", args[0])
			}
			return throttle.Cost{Input: q.InputTokens, Output: q.MaxTokens}, nil
		},
	}

	cost, err := route.Tokens([]any{Question{Prompt: "...", InputTokens: 1_850, MaxTokens: 1_024}})
	fmt.Printf("%+v %v\n", cost, err)
	fmt.Println(limit.Validate())

	// Output:
	// {Input:1850 Output:1024} <nil>
	// <nil>
}

// Email is what the SendEmail activity of these examples takes.
type Email struct {
	Tenant, To, Subject string
}

// KeyLimits derives further limits from the call's arguments: here a cap of 2 sends at a time per
// tenant, on top of the provider's own limit. Each is created the first time its key is seen.
func ExampleRoute_keyLimits() {
	route := sluiceinterceptor.Route{
		Limits: []string{"email"}, // the provider's cap, in Options.Limits
		KeyLimits: func(_ sluiceinterceptor.ActivityInfo, args []any) []throttle.Limit {
			id := args[0].(Email).Tenant
			return []throttle.Limit{{Key: "tenant:" + id, MaxConcurrent: 2}}
		},
	}

	info := sluiceinterceptor.ActivityInfo{ActivityType: "SendEmail", TaskQueue: "email"}
	for _, e := range []Email{{Tenant: "acme", To: "ann@acme.example"}, {Tenant: "globex", To: "bob@globex.example"}} {
		for _, l := range route.KeyLimits(info, []any{e}) {
			fmt.Printf("%s draws on %v and %q (MaxConcurrent %d)\n", e.To, route.Limits, l.Key, l.MaxConcurrent)
		}
	}

	// Output:
	// ann@acme.example draws on [email] and "tenant:acme" (MaxConcurrent 2)
	// bob@globex.example draws on [email] and "tenant:globex" (MaxConcurrent 2)
}

// FairnessKey shares a line fairly between tenants, so that one tenant's burst does not hold the
// others back; Weight gives a tenant a larger share.
func ExampleRoute_fairness() {
	route := sluiceinterceptor.Route{
		Limits: []string{"email"},
		FairnessKey: func(_ sluiceinterceptor.ActivityInfo, args []any) string {
			return args[0].(Email).Tenant
		},
		Weight: func(tenant string) float64 {
			if tenant == "premium" {
				return 2 // twice the share of the others while both have emails queued
			}
			return 1
		},
	}

	info := sluiceinterceptor.ActivityInfo{ActivityType: "SendEmail", TaskQueue: "email"}
	for _, e := range []Email{{Tenant: "bigco"}, {Tenant: "premium"}} {
		key := route.FairnessKey(info, []any{e})
		fmt.Printf("%s: weight %v\n", key, route.Weight(key))
	}

	// Output:
	// bigco: weight 1
	// premium: weight 2
}

// TenantQuestion is what ExampleRoute_model's activity takes: a tenant's prompt.
type TenantQuestion struct{ Tenant, Prompt string }

// Plans with money: a price table turns each call's token estimate into the money it reserves from
// the tenant's daily spend cap, and the usage the activity reports (ReportModelUsage) into what it
// cost. A call the cap cannot take fails at once with sluiceactivity.ErrTypeAllowanceSpent.
func ExampleRoute_model() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://localhost:5432/app")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	c, err := client.NewLazyClient(client.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	prices := &throttle.PriceTable{Currency: "USD", AsOf: "2025-09-01", Source: "https://openai.com/api/pricing/",
		Models: map[string]throttle.Price{"gpt-4o": {Input: 2_500_000, CachedInput: 1_250_000, Output: 10_000_000}}}
	cap, err := throttle.ParseAllowance("usd=5.00/day@America/Los_Angeles")
	if err != nil {
		log.Fatal(err)
	}
	cap.OnSpent = throttle.OnSpentRefuse
	_, err = sluiceinterceptor.NewPlugin(sluiceinterceptor.Options{
		Pool: pool, Client: c, Prices: prices,
		Limits: []throttle.Limit{{Key: "openai", TokensPerMinute: 800_000}},
		Routes: map[string]sluiceinterceptor.Route{"Ask": {
			Limits: []string{"openai"}, Model: "gpt-4o",
			Tokens: func(args []any) (throttle.Cost, error) {
				q := args[0].(TenantQuestion)
				return throttle.Cost{Input: int64(len(q.Prompt) / 4), Output: 500}, nil
			},
			KeyLimits: func(_ sluiceinterceptor.ActivityInfo, args []any) []throttle.Limit {
				return []throttle.Limit{{Key: "tenant:" + args[0].(TenantQuestion).Tenant, Allowances: throttle.Allowances{cap}}}
			},
		}},
	})
	fmt.Println(err)
	// Output: <nil>
}
