package pgqueue_test

import (
	"encoding/json"
	"fmt"
	"log"
	"time"

	"github.com/sluicehq/sluice/pgqueue"
	"github.com/sluicehq/sluice/throttle"
)

// A key's status in JSON, as the sluice command's status --json and the dashboard's api/status serve
// it: the limit as configured and as admission applies it (here lowered by the provider's headers),
// the admission state, the line and the last minute. What is zero because it is not there (a bucket
// never drawn on, which is full; no pause; no ticket waiting) is left out.
func ExampleKeyStatus_json() {
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	configured := throttle.Limit{Key: "openai", MaxConcurrent: 2, TokensPerMinute: 60_000, TokenBurst: 60_000}
	effective := configured
	effective.TokensPerMinute, effective.TokenBurst = 30_000, 30_000
	s := pgqueue.KeyStatus{
		LimitStatus: pgqueue.LimitStatus{Configured: configured, Effective: effective,
			State: throttle.State{Tokens: throttle.Bucket{Level: 12_000, At: now}, InflightCount: 2, InflightTokens: 1000}},
		Queued: 4, Running: 2, QueuedDrawing: 4, OldestQueued: now.Add(-30 * time.Second), HeadWaitReason: "concurrency",
		RequestsLastMinute: 2, TokensLastMinute: 1000, InputTokensLastMinute: 1000, Now: now,
	}
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(b))
	fmt.Println("oldest wait:", s.OldestWait())
	// Output:
	// {
	//   "configured": {
	//     "key": "openai",
	//     "max_concurrent": 2,
	//     "requests_per_second": 0,
	//     "burst": 0,
	//     "tokens_per_minute": 60000,
	//     "token_burst": 60000,
	//     "max_inflight_tokens": 0,
	//     "input_tokens_per_minute": 0,
	//     "input_token_burst": 0,
	//     "output_tokens_per_minute": 0,
	//     "output_token_burst": 0
	//   },
	//   "effective": {
	//     "key": "openai",
	//     "max_concurrent": 2,
	//     "requests_per_second": 0,
	//     "burst": 0,
	//     "tokens_per_minute": 30000,
	//     "token_burst": 30000,
	//     "max_inflight_tokens": 0,
	//     "input_tokens_per_minute": 0,
	//     "input_token_burst": 0,
	//     "output_tokens_per_minute": 0,
	//     "output_token_burst": 0
	//   },
	//   "state": {
	//     "tokens": {
	//       "level": 12000,
	//       "at": "2026-12-04T12:00:00Z"
	//     },
	//     "inflight_count": 2,
	//     "inflight_tokens": 1000
	//   },
	//   "queued": 4,
	//   "admitted": 0,
	//   "running": 2,
	//   "queued_drawing": 4,
	//   "oldest_queued": "2026-12-04T11:59:30Z",
	//   "head_wait_reason": "concurrency",
	//   "requests_last_minute": 2,
	//   "tokens_last_minute": 1000,
	//   "input_tokens_last_minute": 1000,
	//   "output_tokens_last_minute": 0,
	//   "now": "2026-12-04T12:00:00Z"
	// }
	// oldest wait: 30s
}

// A ticket in JSON, as the sluice command's tickets --json prints it: the task token, the outcome's
// bytes and the trace context are never in it, nor the times a queued ticket does not have yet.
func ExampleTicket_json() {
	enqueued := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	t := pgqueue.Ticket{ID: 42, State: pgqueue.TicketStateQueued, LineKey: "openai", LimitKeys: []string{"openai", "tenant:acme"},
		Cost: 500, ActualCost: -1, Priority: 3, FairnessKey: "acme", VStart: 1.5, Seq: 7, Owner: "worker-a", Namespace: "default",
		WorkflowID: "wf-1", RunID: "run-1", ActivityID: "5", ActivityType: "Summarize", Attempt: 1, TaskToken: []byte("secret"),
		EnqueuedAt: enqueued, TraceContext: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", WaitReason: "concurrency", CostMoney: 1_200, ActualMoney: -1}
	b, err := json.Marshal(t)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(b))
	fmt.Println("waited:", t.Waited(enqueued.Add(90*time.Second)))
	// Output:
	// {"id":42,"state":"queued","line_key":"openai","limit_keys":["openai","tenant:acme"],"cost":500,"actual_cost":-1,"output_cost":0,"actual_output":0,"priority":3,"fairness_key":"acme","vstart":1.5,"seq":7,"owner":"worker-a","namespace":"default","workflow_id":"wf-1","run_id":"run-1","activity_id":"5","activity_type":"Summarize","attempt":1,"enqueued_at":"2026-12-04T12:00:00Z","deliveries":0,"requeues":0,"wait_reason":"concurrency","cost_money":1200,"actual_money":-1}
	// waited: 1m30s
}

// One page of an overview in JSON, as the dashboard's api/overview serves it within its answer: a
// row's wait is left out, being now less oldest_queued.
func ExampleOverview_json() {
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	o := pgqueue.Overview{Total: 1, Now: now, Rows: []pgqueue.OverviewRow{{Key: "tenant:acme", Queued: 5,
		OldestQueued: now.Add(-time.Minute), OldestWait: time.Minute, InflightCount: 2, MaxConcurrent: 2, Use: 1, UseOf: "concurrency"}}}
	b, err := json.Marshal(o)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(b))
	// Output:
	// {"rows":[{"key":"tenant:acme","queued":5,"oldest_queued":"2026-12-04T11:59:00Z","inflight_count":2,"inflight_tokens":0,"max_concurrent":2,"max_inflight_tokens":0,"requests_last_minute":0,"tokens_last_minute":0,"input_tokens_last_minute":0,"output_tokens_last_minute":0,"requests_per_minute":0,"tokens_per_minute":0,"input_tokens_per_minute":0,"output_tokens_per_minute":0,"use":1,"use_of":"concurrency"}],"total":1,"now":"2026-12-04T12:00:00Z"}
}
