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

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/workflow"

	sluiceactivity "github.com/sluicehq/sluice/activity"
	"github.com/sluicehq/sluice/throttle"
)

// Document is one document to summarise.
type Document struct {
	ID   int
	Text string
	// InputTokens is the call's input tokens as the provider's count_tokens counts them (the system
	// prompt included), set by the starter (CountInputTokens): what the route reserves as input.
	InputTokens int64
}

// Summary is what Summarize returns.
type Summary struct {
	ID           int
	Text         string
	OutputTokens int64
}

// The model every call names, and the prompt around each document. The system prompt is the same
// for every call and marked for the prompt cache: the first call writes it, the others read it, and
// reads do not count toward the input tokens per minute.
const (
	model       = anthropic.ModelClaudeHaiku4_5
	instruction = "Summarise the following document in a short paragraph.\n\n"
)

var systemPrompt = strings.Join([]string{
	"You are a careful analyst who writes summaries of business documents for busy readers.",
	"Lead with the document's main finding, then the figures that support it, then any risk it names.",
	"Keep every number exactly as the document gives it; never round, convert or estimate a figure.",
	"Name people, teams, customers and suppliers as the document does, and do not add titles.",
	"When the document is a contract, state the parties, the term, the price and how it can end.",
	"When it is a report, state the period it covers and how the results compare with the plan.",
	"When it is an invoice or an order, state who pays whom, how much, and by when.",
	"Do not give advice, do not speculate about causes the document does not state, and do not praise.",
	"Write plain sentences without lists, headings or emphasis, in the document's own language.",
	"If the document is empty or unreadable, say so in one sentence and stop.",
}, " ")

var vocabulary = strings.Fields(`the a of to and in that is for on with as by at from it this be are was
	quota token request limit worker queue provider summary model latency budget throughput retry
	document section chapter report figure table result method system policy contract invoice customer
	order payment shipment account review market growth revenue cost risk plan team project quarter`)

// Documents returns n documents, the same for the same seed, of lengths spread log-uniformly over
// [minWords, maxWords] words, in sentences: many short ones and a few long ones, as real corpora are.
func Documents(n, minWords, maxWords int, seed uint64) []Document {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	docs := make([]Document, n)
	for i := range docs {
		words := int(math.Round(float64(minWords) * math.Pow(float64(maxWords)/float64(minWords), r.Float64())))
		var b strings.Builder
		fmt.Fprintf(&b, "Document %d.", i+1)
		for w, sentence := 0, 0; w < words; w++ {
			b.WriteByte(' ')
			b.WriteString(vocabulary[r.IntN(len(vocabulary))])
			if sentence++; sentence >= 8+r.IntN(12) || w == words-1 {
				b.WriteByte('.')
				sentence = 0
			}
		}
		docs[i] = Document{ID: i + 1, Text: b.String()}
	}
	return docs
}

// NewClient is the official Anthropic client, pointed at baseURL. It does not retry: a 429 is for
// Sluice or Temporal to handle, not hidden in the client.
func NewClient(baseURL string) anthropic.Client {
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256, IdleConnTimeout: 30 * time.Second}}
	return anthropic.NewClient(option.WithBaseURL(baseURL), option.WithAPIKey("fake"), option.WithMaxRetries(0), option.WithHTTPClient(hc))
}

// system is the system prompt as the calls send it, marked for the prompt cache.
func system() []anthropic.TextBlockParam {
	return []anthropic.TextBlockParam{{Text: systemPrompt, CacheControl: anthropic.NewCacheControlEphemeralParam()}}
}

func userMessages(doc Document) []anthropic.MessageParam {
	return []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(instruction + doc.Text))}
}

// CountInputTokens sets each document's InputTokens with count_tokens, for the exact request
// Summarize will send: what the starter does once per document, before the workflow starts.
func CountInputTokens(ctx context.Context, c anthropic.Client, docs []Document) error {
	for i := range docs {
		n, err := c.Messages.CountTokens(ctx, anthropic.MessageCountTokensParams{
			Model:    model,
			System:   anthropic.MessageCountTokensParamsSystemUnion{OfTextBlockArray: system()},
			Messages: userMessages(docs[i]),
		})
		if err != nil {
			return fmt.Errorf("count tokens of document %d: %w", docs[i].ID, err)
		}
		docs[i].InputTokens = n.InputTokens
	}
	return nil
}

// RouteTokens is the Sluice route's Tokens: the call's input as count_tokens counted it, and its
// max_tokens as output, which the provider charges to its output budget at admission too.
func RouteTokens(maxTokens int64) func(args []any) (throttle.Cost, error) {
	return func(args []any) (throttle.Cost, error) {
		doc, ok := args[0].(Document)
		if !ok {
			return throttle.Cost{}, fmt.Errorf("summarize: argument is a %T, not a Document", args[0])
		}
		return throttle.Cost{Input: doc.InputTokens, Output: maxTokens}, nil
	}
}

// Summarizer holds the provider client and counts what the activity saw.
type Summarizer struct {
	client    anthropic.Client
	maxTokens int64

	attempts  atomic.Int64 // activity runs, each 429 retried by Temporal or requeued by Sluice included
	retries   atomic.Int64 // Temporal attempts beyond the first
	completed atomic.Int64 // answered calls
	mu        sync.Mutex
	estimates []estimateCount // each answered call's input: the route's estimate and the provider's count
}

// NewSummarizer returns the activities, calling the provider at baseURL.
func NewSummarizer(baseURL string, maxTokens int64) *Summarizer {
	return &Summarizer{client: NewClient(baseURL), maxTokens: maxTokens}
}

// Summarize asks the model for a summary of doc. It tells Sluice what the provider said: the
// rate-limit headers, a 429, the usage. Outside Sluice those calls do nothing, and a 429 is an
// ordinary error that Temporal retries.
func (s *Summarizer) Summarize(ctx context.Context, doc Document) (Summary, error) {
	s.attempts.Add(1)
	if activity.GetInfo(ctx).Attempt > 1 {
		s.retries.Add(1)
	}
	var resp *http.Response
	msg, err := s.client.Messages.New(ctx, anthropic.MessageNewParams{
		Model:     model,
		MaxTokens: s.maxTokens,
		System:    system(),
		Messages:  userMessages(doc),
	}, option.WithResponseInto(&resp))
	if resp != nil {
		// The key learns the provider's rates and what remains of each.
		_ = sluiceactivity.ReportHeaders(ctx, resp.Header)
	}
	if err != nil {
		var apiErr *anthropic.Error
		if errors.As(err, &apiErr) && apiErr.StatusCode == http.StatusTooManyRequests {
			// Under Sluice: back in line, no Temporal attempt spent, the key pauses until retry-after.
			return Summary{}, sluiceactivity.RateLimited(ctx, apiErr.Response.Header)
		}
		return Summary{}, err
	}
	u := msg.Usage
	// The real cost, reconciled with the reservation: the unused max_tokens go back to the output
	// budget, and the cache reads, which do not count, to the input budget.
	_ = sluiceactivity.ReportAnthropicUsage(ctx, sluiceactivity.AnthropicUsage{
		InputTokens: u.InputTokens, OutputTokens: u.OutputTokens,
		CacheCreationInputTokens: u.CacheCreationInputTokens, CacheReadInputTokens: u.CacheReadInputTokens,
	})
	s.completed.Add(1)
	s.mu.Lock()
	s.estimates = append(s.estimates, estimateCount{Estimate: doc.InputTokens,
		Provider: u.InputTokens + u.CacheCreationInputTokens + u.CacheReadInputTokens})
	s.mu.Unlock()
	var text string
	if len(msg.Content) > 0 {
		text = msg.Content[0].Text
	}
	return Summary{ID: doc.ID, Text: text, OutputTokens: u.OutputTokens}, nil
}

// estimateCounts returns the answered calls' input counts.
func (s *Summarizer) estimateCounts() []estimateCount {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.estimates)
}

// SummarizeAll summarises every document at once, one activity each, and returns how many
// summaries it got. Its activities have Temporal's default retry policy (1 s, doubling, up to
// 100 s, no limit on attempts): that is what retries the 429s of the none mode.
func SummarizeAll(ctx workflow.Context, docs []Document) (int, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		// Under Sluice this covers the wait in the admission queue as well as the call.
		StartToCloseTimeout: 10 * time.Minute,
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
