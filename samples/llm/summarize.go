package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	sluiceactivity "github.com/sluicehq/sluice/activity"
	"github.com/sluicehq/sluice/openaicost"
	"github.com/sluicehq/sluice/throttle"
)

// Document is one document to summarise.
type Document struct {
	ID   int
	Text string
}

// Summary is what Summarize returns.
type Summary struct {
	ID     int
	Text   string
	Tokens int64
}

var vocabulary = strings.Fields(`the a of to and in that is for on with as by at from it this be are was
	quota token request limit worker queue provider summary model latency budget throughput retry
	document section chapter report figure table result method system policy contract invoice customer
	order payment shipment account review market growth revenue cost risk plan team project quarter`)

// Documents returns n documents, the same for the same seed, of lengths spread log-uniformly over
// [minLen, maxLen] characters: many short ones and a few long ones, as real corpora are.
func Documents(n, minLen, maxLen int, seed uint64) []Document {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	docs := make([]Document, n)
	for i := range docs {
		length := int(math.Round(float64(minLen) * math.Pow(float64(maxLen)/float64(minLen), r.Float64())))
		var b strings.Builder
		fmt.Fprintf(&b, "Document %d.", i+1)
		for b.Len() < length {
			b.WriteByte(' ')
			b.WriteString(vocabulary[r.IntN(len(vocabulary))])
		}
		docs[i] = Document{ID: i + 1, Text: b.String()[:max(length, len(fmt.Sprintf("Document %d.", i+1)))]}
	}
	return docs
}

// The model every call names, and the prompt around each document.
const (
	chatModel    = "gpt-4o-mini"
	systemPrompt = "You are a careful analyst. You write short, faithful summaries."
	instruction  = "Summarise the following document in three sentences:\n\n"
)

// LLM holds the provider client and counts what the activity saw.
type LLM struct {
	client          openai.Client
	maxTokens       int64
	answerMaxTokens int64
	answerCalls     durations // how long the provider took for each answer

	attempts  atomic.Int64 // activity runs, each 429 retried by Temporal or requeued by Sluice included
	retries   atomic.Int64 // Temporal attempts beyond the first
	completed atomic.Int64 // successful calls
	inputs    inputLog     // each successful call's prompt tokens: estimated, by chars/4, and the provider's
}

// durations collects durations from many goroutines.
type durations struct {
	mu sync.Mutex
	ds []time.Duration
}

func (d *durations) add(v time.Duration) {
	d.mu.Lock()
	d.ds = append(d.ds, v)
	d.mu.Unlock()
}

func (d *durations) all() []time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.ds)
}

// NewLLM returns the activities, calling the provider at baseURL.
func NewLLM(baseURL string, maxTokens int64) *LLM {
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 512, IdleConnTimeout: 30 * time.Second}}
	return &LLM{
		client: openai.NewClient(
			option.WithBaseURL(baseURL),
			option.WithAPIKey("fake"),
			option.WithMaxRetries(0), // 429s are for Temporal or Sluice to handle, not hidden by the client
			option.WithHTTPClient(hc),
		),
		maxTokens: maxTokens,
	}
}

// Summarize asks the model for a summary of doc. It tells Sluice what the provider said; outside
// Sluice those calls do nothing, and a 429 is an ordinary error that Temporal retries.
func (l *LLM) Summarize(ctx context.Context, doc Document) (Summary, error) {
	text, tokens, _, err := l.call(ctx, systemPrompt, instruction+doc.Text, l.maxTokens)
	if err != nil {
		return Summary{}, err
	}
	return Summary{ID: doc.ID, Text: text, Tokens: tokens}, nil
}

// call sends one chat completion and returns the answer, the tokens the provider counted and how
// long the provider took. It reports the provider's headers and usage to Sluice, and turns a 429 into
// sluiceactivity.RateLimited; outside Sluice those calls do nothing, and a 429 is an ordinary error
// that Temporal retries.
func (l *LLM) call(ctx context.Context, system, user string, maxTokens int64) (string, int64, time.Duration, error) {
	l.attempts.Add(1)
	if activity.GetInfo(ctx).Attempt > 1 {
		l.retries.Add(1)
	}
	// What the Sluice route reserves for this call, for the demo's figure of its error; the same
	// function is the route's Cost.
	est, err := routeCost(system, user, maxTokens)
	if err != nil {
		return "", 0, 0, err
	}
	var resp *http.Response
	start := time.Now()
	cc, err := l.client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model: chatModel,
		Messages: []openai.ChatCompletionMessageParamUnion{
			openai.SystemMessage(system),
			openai.UserMessage(user),
		},
		MaxCompletionTokens: openai.Int(maxTokens),
	}, option.WithResponseInto(&resp))
	took := time.Since(start)
	if resp != nil {
		// The key learns the provider's rates and what remains of them.
		_ = sluiceactivity.ReportHeaders(ctx, resp.Header)
	}
	if err != nil {
		var apiErr *openai.Error
		if errors.As(err, &apiErr) && apiErr.StatusCode == http.StatusTooManyRequests && resp != nil {
			// Under Sluice: back in line, no Temporal attempt spent, the key pauses until Retry-After.
			return "", 0, 0, sluiceactivity.RateLimited(ctx, resp.Header)
		}
		return "", 0, 0, err
	}
	// The real cost, reconciled with the reservation.
	_ = sluiceactivity.ReportTokens(ctx, cc.Usage.PromptTokens, cc.Usage.CompletionTokens)
	l.completed.Add(1)
	l.inputs.add(inputCount{Estimate: est.Input, CharsDiv4: charsDiv4(system, user), Provider: cc.Usage.PromptTokens})
	var text string
	if len(cc.Choices) > 0 {
		text = cc.Choices[0].Message.Content
	}
	return text, cc.Usage.TotalTokens, took, nil
}

// EstimateTokens is the fan-out's Sluice route Cost: openaicost's estimate of the call, its prompt
// counted as OpenAI counts it plus max_tokens, which the provider charges at admission too (one
// budget for both, so the Total). It is high (a summary uses far fewer tokens than max_tokens);
// ReportTokens gives the difference back after each call. It must not be low: the provider checks a
// call against its own count before any reconciliation, so an estimate below that count spends
// tokens Sluice does not know about, and a call admitted with an almost empty bucket gets a 429.
func EstimateTokens(maxTokens int64) func(args []any) (int64, error) {
	return func(args []any) (int64, error) {
		doc, ok := args[0].(Document)
		if !ok {
			return 0, fmt.Errorf("summarize: argument is a %T, not a Document", args[0])
		}
		c, err := routeCost(systemPrompt, instruction+doc.Text, maxTokens)
		return c.Total(), err
	}
}

// chatMessages are a call's messages, as openaicost counts them.
func chatMessages(system, user string) []openaicost.Message {
	return []openaicost.Message{{Role: "system", Content: system}, {Role: "user", Content: user}}
}

// routeCost is what a Sluice route reserves for a call of the demo: openaicost's estimate, the
// prompt as its input and max_tokens as its output.
func routeCost(system, user string, maxTokens int64) (throttle.Cost, error) {
	return openaicost.Estimate(chatModel, chatMessages(system, user), maxTokens)
}

// SummarizeAll summarises every document at once, one activity each, and returns how many
// summaries it got.
func SummarizeAll(ctx workflow.Context, docs []Document) (int, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		// Under Sluice this covers the wait in the admission queue as well as the call.
		StartToCloseTimeout: 10 * time.Minute,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:    time.Second,
			BackoffCoefficient: 2,
			MaximumInterval:    10 * time.Second,
			MaximumAttempts:    0, // unlimited
		},
	})
	fs := make([]workflow.Future, len(docs))
	for i, d := range docs {
		fs[i] = workflow.ExecuteActivity(ctx, "Summarize", d)
	}
	n := 0
	for _, f := range fs {
		var s Summary
		if err := f.Get(ctx, &s); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}
