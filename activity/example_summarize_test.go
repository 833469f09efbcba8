package activity_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net/http"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	sluiceactivity "github.com/sluicehq/sluice/activity"
	sluiceinterceptor "github.com/sluicehq/sluice/interceptor"
	"github.com/sluicehq/sluice/throttle"
)

const maxTokens = 500

// callProvider asks OpenAI's chat completions API for a summary of doc.
func callProvider(ctx context.Context, doc string) (*http.Response, error) {
	body, err := json.Marshal(map[string]any{
		"model":      "gpt-4o-mini",
		"max_tokens": maxTokens,
		"messages":   []map[string]string{{"role": "user", "content": "Summarise in three sentences:\n\n" + doc}},
	})
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://api.openai.com/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+os.Getenv("OPENAI_API_KEY"))
	req.Header.Set("Content-Type", "application/json")
	return http.DefaultClient.Do(req)
}

// completion is the part of a chat completion that Summarize reads.
type completion struct {
	Choices []struct {
		Message struct {
			Content string `json:"content"`
		} `json:"message"`
	} `json:"choices"`
	Usage struct {
		PromptTokens     int64 `json:"prompt_tokens"`
		CompletionTokens int64 `json:"completion_tokens"`
	} `json:"usage"`
}

// Summarize is an activity that tells Sluice what the provider said. Outside Sluice (unrouted, or in
// a unit test) the Report calls do nothing and a 429 is an ordinary error that Temporal retries.
func Summarize(ctx context.Context, doc string) (string, error) {
	resp, err := callProvider(ctx, doc)
	if resp != nil {
		defer resp.Body.Close()
		_ = sluiceactivity.ReportHeaders(ctx, resp.Header) // the key adapts to what the provider says
	}
	if resp != nil && resp.StatusCode == http.StatusTooManyRequests {
		// Back in line without spending a Temporal attempt; the key pauses on every replica.
		return "", sluiceactivity.RateLimited(ctx, resp.Header)
	}
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("summarize: the provider answered %s", resp.Status)
	}
	var out completion
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return "", fmt.Errorf("summarize: %w", err)
	}
	if len(out.Choices) == 0 {
		return "", errors.New("summarize: the provider returned no choices")
	}
	usage, summary := out.Usage, out.Choices[0].Message.Content
	// The real cost, reconciled with the reservation: unused tokens go back to the bucket.
	_ = sluiceactivity.ReportTokens(ctx, usage.PromptTokens, usage.CompletionTokens)
	if info, ok := sluiceactivity.Admission(ctx); ok {
		activity.GetLogger(ctx).Info("Summarized", "waited", info.Waited, "reserved_cost", info.ReservedCost)
	}
	return summary, nil
}

// A worker whose Summarize activity calls an LLM through Sluice and reports the provider's answer:
// its rate-limit headers, a 429, the tokens the call used.
func Example_summarize() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	c, err := client.Dial(client.Options{HostPort: os.Getenv("TEMPORAL_ADDRESS")})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	plugin, err := sluiceinterceptor.NewPlugin(sluiceinterceptor.Options{
		Pool:   pool,
		Client: c,
		Limits: []throttle.Limit{{Key: "openai", MaxConcurrent: 50, RequestsPerSecond: 10, TokensPerMinute: 90_000}},
		Routes: map[string]sluiceinterceptor.Route{
			"Summarize": {Limits: []string{"openai"}, Cost: func(args []any) (int64, error) {
				return int64(len(args[0].(string))/4 + maxTokens), nil // prompt estimate + max_tokens
			}},
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	w := worker.New(c, "llm", worker.Options{Plugins: []worker.Plugin{plugin}})
	w.RegisterActivity(Summarize)
	if err := w.Run(worker.InterruptCh()); err != nil {
		log.Fatal(err)
	}
}
