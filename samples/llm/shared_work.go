package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	sluiceinterceptor "github.com/sluicehq/sluice/interceptor"
)

// The shared scenario's activities and workflows: a batch backfill that summarises each tenant's
// documents, and an interactive assistant that answers one question per workflow while a person
// waits. Both call the same provider account.

// The task queues of the two services, and their Temporal priorities (lower first).
const (
	batchQueue          = "backfill"
	interactiveQueue    = "assistant"
	batchPriority       = 5
	interactivePriority = 1
	answerSystemPrompt  = "You are a support assistant. Answer in two sentences."
)

// TenantDoc is one document of a tenant's backfill.
type TenantDoc struct {
	Tenant string
	Doc    Document
}

// Question is one interactive request.
type Question struct {
	ID   int
	Text string
}

// Answer is what the assistant returns.
type Answer struct {
	ID     int
	Text   string
	Tokens int64
}

// SummarizeDoc summarises one document of a tenant's backfill.
func (l *LLM) SummarizeDoc(ctx context.Context, d TenantDoc) (Summary, error) {
	return l.Summarize(ctx, d.Doc)
}

// Answer answers a person's question.
func (l *LLM) Answer(ctx context.Context, q Question) (Answer, error) {
	text, tokens, took, err := l.call(ctx, answerSystemPrompt, q.Text, l.answerMaxTokens)
	if err != nil {
		return Answer{}, err
	}
	l.answerCalls.add(took)
	return Answer{ID: q.ID, Text: text, Tokens: tokens}, nil
}

// activityOptions are the shared scenario's: Temporal's default retry policy (1 s, doubling, up to
// 100 s, unlimited attempts), a timeout that covers the wait in Sluice's line as well as the call, and
// a heartbeat timeout. Temporal can lose an activity task it has recorded as started (on a starved
// server, matching hears history's answer to RecordActivityTaskStarted after its 1 s deadline; the
// task's redelivery is then refused as already started): no worker ever sees that attempt, and only
// a timeout ends it. The heartbeat timeout ends it in 30 s rather than 15 min. It does not cut a
// wait in Sluice's line short: Sluice heartbeats the invocations it holds; a call takes well under it.
func activityOptions(ctx workflow.Context, p temporal.Priority) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 15 * time.Minute,
		HeartbeatTimeout: 30 * time.Second, Priority: p})
}

// Backfill summarises every document of one tenant at once, one activity each, on the batch task
// queue at the batch priority, with the tenant as Temporal's fairness key.
func Backfill(ctx workflow.Context, tenant string, docs []Document) (int, error) {
	ctx = activityOptions(ctx, temporal.Priority{PriorityKey: batchPriority, FairnessKey: tenant})
	fs := make([]workflow.Future, len(docs))
	for i, d := range docs {
		fs[i] = workflow.ExecuteActivity(ctx, "SummarizeDoc", TenantDoc{Tenant: tenant, Doc: d})
	}
	n := 0
	for _, f := range fs {
		if err := f.Get(ctx, nil); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// Ask answers one question on the interactive task queue at the interactive priority.
func Ask(ctx workflow.Context, q Question) (Answer, error) {
	ctx = activityOptions(ctx, temporal.Priority{PriorityKey: interactivePriority})
	var a Answer
	err := workflow.ExecuteActivity(ctx, "Answer", q).Get(ctx, &a)
	return a, err
}

// Questions returns n questions of about chars characters, the same for the same seed.
func Questions(n, chars int, seed uint64) []Question {
	r := rand.New(rand.NewPCG(seed, seed^0x51ed27d1))
	qs := make([]Question, n)
	for i := range qs {
		var b strings.Builder
		fmt.Fprintf(&b, "Question %d: my invoice shows", i+1)
		for b.Len() < chars {
			b.WriteByte(' ')
			b.WriteString(vocabulary[r.IntN(len(vocabulary))])
		}
		b.WriteByte('?')
		qs[i] = Question{ID: i + 1, Text: b.String()}
	}
	return qs
}

// sharedRoutes are the sluice mode's routes: both services draw on one limit, the assistant's
// calls ahead of the backfill's (each route's priority is the activity's Temporal priority), and
// the backfill's line shared fairly between tenants. Each call reserves openaicost's estimate: its
// prompt as OpenAI counts it, and its max_tokens.
func sharedRoutes(maxTokens, answerMaxTokens int64) map[string]sluiceinterceptor.Route {
	return map[string]sluiceinterceptor.Route{
		"SummarizeDoc": {Limits: []string{"llm"}, Cost: func(args []any) (int64, error) {
			d, ok := args[0].(TenantDoc)
			if !ok {
				return 0, fmt.Errorf("summarize: argument is a %T, not a TenantDoc", args[0])
			}
			c, err := routeCost(systemPrompt, instruction+d.Doc.Text, maxTokens)
			return c.Total(), err
		}, FairnessKey: func(_ sluiceinterceptor.ActivityInfo, args []any) string {
			if d, ok := args[0].(TenantDoc); ok {
				return d.Tenant
			}
			return ""
		}},
		"Answer": {Limits: []string{"llm"}, Cost: func(args []any) (int64, error) {
			q, ok := args[0].(Question)
			if !ok {
				return 0, fmt.Errorf("answer: argument is a %T, not a Question", args[0])
			}
			c, err := routeCost(answerSystemPrompt, q.Text, answerMaxTokens)
			return c.Total(), err
		}},
	}
}
