// Package interceptor is the Sluice Temporal worker plugin. Import it as sluiceinterceptor, since
// Temporal has a package of the same name:
//
//	import sluiceinterceptor "github.com/sluicehq/sluice/interceptor"
//
//	plugin, err := sluiceinterceptor.NewPlugin(sluiceinterceptor.Options{
//		Pool:   pool, // the *pgxpool.Pool you already have
//		Client: c,    // the worker's Temporal client
//		Limits: []throttle.Limit{{Key: "openai", MaxConcurrent: 50, RequestsPerSecond: 10, TokensPerMinute: 90_000}},
//		Routes: map[string]sluiceinterceptor.Route{
//			"Summarize": {Limits: []string{"openai"}, Cost: func(args []any) (int64, error) {
//				return int64(len(args[0].(string))/4 + 500), nil // prompt estimate + max_tokens
//			}},
//		},
//	})
//	if err != nil {
//		return err
//	}
//	w := worker.New(c, "llm", worker.Options{Plugins: []worker.Plugin{plugin}})
//	w.RegisterWorkflow(SummarizeAll)
//	w.RegisterActivity(Summarize)
//	return w.Run(worker.InterruptCh()) // migrates the schema and upserts the limits, then polls
//
// A provider that meters input and output tokens apart (Anthropic's ITPM and OTPM) takes a limit with
// InputTokensPerMinute and OutputTokensPerMinute, and a route whose Tokens gives both parts:
//
//	Limits: []throttle.Limit{{Key: "anthropic", RequestsPerSecond: 50, InputTokensPerMinute: 400_000, OutputTokensPerMinute: 80_000}},
//	Routes: map[string]sluiceinterceptor.Route{
//		"AskClaude": {Limits: []string{"anthropic"}, Tokens: func(args []any) (throttle.Cost, error) {
//			q := args[0].(Question)
//			return throttle.Cost{Input: q.InputTokens, Output: q.MaxTokens}, nil // prompt, max_tokens
//		}},
//	},
//
// # How an activity runs
//
// For a routed activity type, the interceptor writes an admission ticket to Postgres and returns
// activity.ErrResultPending, so no worker slot is held while it waits. The invocation (its decoded
// arguments and context values) stays in this process's memory. Any replica's dispatcher may admit
// the ticket, within every limit it draws on, globally; this process then runs the activity with its
// own context (the activity's deadline, cancelled when Temporal cancels), records the encoded outcome
// in Postgres and completes the activity to Temporal, retrying the delivery until Temporal has it.
// Activity code is unchanged: activity.GetInfo, GetLogger and RecordHeartbeat work as usual.
//
// # Timeouts
//
// Temporal's StartToCloseTimeout starts when the worker picks the task up, so it covers the time in
// the queue as well as the run: set it to the longest wait you accept plus the run. A ticket whose
// deadline has passed is never admitted. Queued tickets are heartbeated (every HeartbeatInterval, and
// at least every 0.8 x HeartbeatTimeout), so a wait longer than the HeartbeatTimeout is fine, and a
// cancelled workflow's queued activities are removed within one HeartbeatInterval. A running activity
// has at least its whole HeartbeatTimeout from its start, as without Sluice, and once it returns the
// attempt is heartbeated until its outcome is delivered.
//
// # Failures
//
// A process that stops hands its queued tickets back to Temporal at once, and its running ones once
// the worker's WorkerStopTimeout has passed; one that dies has its tickets handed back by a survivor
// LeaseTTL after its last lease renewal. A hand-back is a retryable failure (type SluiceHandedBack):
// Temporal retries the activity on a live worker and the retry keeps its place in line, so a crash
// costs an activity one attempt, as it does for unthrottled activities. Queued activities still count
// towards Temporal's limit of pending activities per workflow.
//
// Give routed activities a HeartbeatTimeout (tens of seconds is fine: Sluice heartbeats queued tickets
// for them, so it costs nothing). A task that Temporal dispatches to a worker that dies, or is
// stopping, before its ticket is written never becomes a ticket, so no survivor can hand it back;
// without a HeartbeatTimeout only its StartToCloseTimeout brings it back.
//
// A statement may commit while its answer is lost (the connection breaks after the COMMIT). Each
// process therefore holds its tickets in Postgres against the invocations it holds, every
// SelfCheckInterval and at once after a failed statement, and reconciles a ticket they disagree on
// twice in a row: one admitted for it that it never ran is run, one it no longer holds is handed back.
// See Options.SelfCheckInterval and the metric MetricSelfCheckReconciled.
//
// A Plugin works within a pool of 2 connections (Options.Pool with MaxConns 2) plus the one
// connection it listens for notifications on. Behind a pooler in transaction mode (PgBouncer), set
// Options.TransactionPooler and give the pool default_query_exec_mode=exec; the plugin then listens
// on Options.ListenURL, a direct connection, or, without one, polls every PollInterval. Unset over
// such a pooler, the plugin refuses to start with [ErrTransactionPooler]. docs/connections.md
// ("Connections and poolers") sizes Postgres for a fleet.
package interceptor
