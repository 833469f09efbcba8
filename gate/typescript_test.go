package gate_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/sluicehq/sluice/gate"
	"github.com/sluicehq/sluice/internal/testkit/testdb"
	"github.com/sluicehq/sluice/internal/testkit/testenv"
	"github.com/sluicehq/sluice/throttle"
)

// The TypeScript client (clients/typescript) against a real gate: its compiled test worker runs
// workflows that use withSluice, beside Go workflows and plugin-routed Go activities on one limit.

// tsWorkerJS is the TypeScript client's compiled test worker (make ts-client builds it).
const tsWorkerJS = "../clients/typescript/dist/test/worker.js"

// requireNode returns the node binary, skipping the test (failing it under CI) when the
// TypeScript client is not built or node is missing.
func requireNode(t testing.TB) string {
	t.Helper()
	if _, err := os.Stat(tsWorkerJS); err != nil {
		testenv.Skip(t, "clients/typescript/dist is not built (make ts-client)")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		testenv.Skip(t, "node is not on PATH")
	}
	return node
}

// newTSEnv is what each TypeScript test starts from: node, a limit "svc" of capacity (with a token
// budget that does not bind), a gate of opts, the Go application on "svc", the HTTP provider the
// TypeScript calls reach, and a fresh task queue for the TypeScript workers.
func newTSEnv(t testing.TB, capacity int, opts gate.Options) (e *env, node string, hp *httpProvider, tsQueue string) {
	t.Helper()
	node = requireNode(t)
	e = newEnv(t, throttle.Limit{Key: "svc", MaxConcurrent: capacity, TokensPerMinute: 1e6})
	e.startGate(t, opts)
	e.startApp(t, "svc")
	return e, node, e.startHTTPProvider(t), "ts-" + testdb.NewSchemaName()
}

// httpProvider is the provider the TypeScript workflows call over HTTP. Its calls are counted in
// the env's provider with the Go ones, and wait as they do (provider.release).
type httpProvider struct {
	*httptest.Server
	calls     atomic.Int64
	limited   atomic.Int64 // 429s answered
	rateLimit atomic.Bool  // answer 429, Retry-After: 120
	lastPID   atomic.Int64 // the worker process of the last call
}

// usage is what the provider answers each call used.
var usage = map[string]int64{"input_tokens": 30, "output_tokens": 20}

func (e *env) startHTTPProvider(t testing.TB) *httpProvider {
	t.Helper()
	hp := &httpProvider{}
	hp.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			PID int64 `json:"pid"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if hp.rateLimit.Load() {
			hp.limited.Add(1)
			w.Header().Set("Retry-After", "120")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		defer e.prov.enter()()
		hp.calls.Add(1)
		hp.lastPID.Store(body.PID)
		if err := e.prov.wait(r.Context()); err != nil {
			return // the caller is gone
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"usage": usage})
	}))
	t.Cleanup(hp.Close)
	return hp
}

// tsWorker is a running TypeScript test worker process.
type tsWorker struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when it has exited; err is then its exit
	err  error
}

// startTSWorker starts a TypeScript test worker on queue and waits until it polls. It is stopped
// (SIGTERM) at the end of the test; its output is logged if the test fails.
func (e *env) startTSWorker(t testing.TB, node, queue, providerURL string) *tsWorker {
	t.Helper()
	var (
		mu     sync.Mutex
		output []string
	)
	keep := func(line string) {
		mu.Lock()
		defer mu.Unlock()
		output = append(output, line)
	}
	ready := make(chan struct{})
	var once sync.Once
	cmd := exec.Command(node, tsWorkerJS)
	cmd.Env = append(os.Environ(), "TEMPORAL_ADDRESS="+server.Addr, "TEMPORAL_NAMESPACE=default",
		"TASK_QUEUE="+queue, "PROVIDER_URL="+providerURL)
	cmd.Stdout = &testenv.LineWriter{Func: func(line string) {
		if line == "READY" {
			once.Do(func() { close(ready) })
		}
		keep(line)
	}}
	cmd.Stderr = &testenv.LineWriter{Func: keep}
	require.NoError(t, cmd.Start())
	w := &tsWorker{cmd: cmd, done: make(chan struct{})}
	go func() {
		w.err = cmd.Wait()
		close(w.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-w.done:
		case <-time.After(time.Minute):
			_ = cmd.Process.Kill()
			<-w.done
		}
		if t.Failed() {
			mu.Lock()
			t.Logf("TypeScript worker %d (exit: %v):\n%s", cmd.Process.Pid, w.err, strings.Join(output, "\n"))
			mu.Unlock()
		}
	})
	select {
	case <-ready:
	case <-w.done:
		t.Fatalf("the TypeScript worker exited before it polled: %v", w.err)
	case <-time.After(3 * time.Minute):
		t.Fatal("the TypeScript worker did not poll within 3 minutes")
	}
	return w
}

// stop sends SIGTERM and waits for the worker to exit, returning how it exited.
func (w *tsWorker) stop(t testing.TB) error {
	t.Helper()
	require.NoError(t, w.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-w.done:
	case <-time.After(2 * time.Minute):
		t.Fatal("the TypeScript worker did not exit within 2 minutes of SIGTERM")
	}
	return w.err
}

// tsCallInput is the input of the TypeScript test workflows (clients/typescript/test/workflows.ts).
type tsCallInput struct {
	Request       gate.AcquireRequest `json:"request"`
	GateTaskQueue string              `json:"gateTaskQueue"`
	Caller        string              `json:"caller"`
	CallTimeoutMS int64               `json:"callTimeoutMs,omitempty"`
}

// tsCallOutput is what llmCall returns.
type tsCallOutput struct {
	Permit  *gate.Permit     `json:"permit"`
	Usage   map[string]int64 `json:"usage"`
	Error   string           `json:"error"`
	Refusal json.RawMessage  `json:"refusal"`
}

// startTS starts the TypeScript workflow wf on queue.
func (e *env) startTS(t testing.TB, queue, wf string, in tsCallInput) client.WorkflowRun {
	t.Helper()
	run, err := e.c.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{TaskQueue: queue,
		ID: "ts-" + testdb.NewSchemaName(), WorkflowExecutionTimeout: 5 * time.Minute}, wf, in)
	require.NoError(t, err)
	return run
}

// releases returns the results of the Release activities run's history records as completed.
func (e *env) releases(t testing.TB, run client.WorkflowRun) []gate.ReleaseResult {
	t.Helper()
	release := map[int64]bool{} // scheduled event IDs of Release activities
	var out []gate.ReleaseResult
	it := e.c.GetWorkflowHistory(context.Background(), run.GetID(), run.GetRunID(), false, 0)
	for it.HasNext() {
		ev, err := it.Next()
		require.NoError(t, err)
		if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil && a.GetActivityType().GetName() == gate.ReleaseActivity {
			release[ev.GetEventId()] = true
		}
		if a := ev.GetActivityTaskCompletedEventAttributes(); a != nil && release[a.GetScheduledEventId()] {
			var res gate.ReleaseResult
			require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(a.GetResult(), &res))
			out = append(out, res)
		}
	}
	return out
}

// attempts returns, by activity type, the attempts run's history records: the last attempt's
// number for each activity scheduled, summed over the activities of a type.
func (e *env) attempts(t testing.TB, run client.WorkflowRun) map[string]int32 {
	t.Helper()
	types := map[int64]string{} // scheduled event IDs
	out := map[string]int32{}
	it := e.c.GetWorkflowHistory(context.Background(), run.GetID(), run.GetRunID(), false, 0)
	for it.HasNext() {
		ev, err := it.Next()
		require.NoError(t, err)
		if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil {
			types[ev.GetEventId()] = a.GetActivityType().GetName()
		}
		if a := ev.GetActivityTaskStartedEventAttributes(); a != nil {
			out[types[a.GetScheduledEventId()]] += a.GetAttempt()
		}
	}
	return out
}

// inFlightBack waits until key's row counts no ticket in flight.
func (e *env) inFlightBack(t testing.TB, key string) {
	t.Helper()
	var st throttle.State
	require.Eventually(t, func() bool {
		ls, err := e.q.LimitStatus(context.Background(), key)
		st = ls.State
		return err == nil && st.InflightCount == 0 && st.InflightTokens == 0
	}, 2*time.Minute, 20*time.Millisecond, "%s still counts calls in flight: %+v", key, st)
	t.Logf("FIGURES permits leaked: %d (%s counts %d tokens in flight once the workflows are done)", st.InflightCount, key, st.InflightTokens)
}

// A cap of 2 holds across TypeScript workflows (two worker processes, through the gate), Go
// workflows through the gate's contract, and Go activities through the plugin: at most two calls are
// ever at the provider at once. Every call completes, every permit is released with the usage the
// TypeScript workflow reported, and the limit counts nothing in flight afterwards.
func TestGate_TypeScriptSharesACapWithGo(t *testing.T) {
	t.Parallel()
	e, node, hp, tsQueue := newTSEnv(t, 2, gate.Options{})
	e.prov.release = make(chan struct{})
	first := e.startTSWorker(t, node, tsQueue, hp.URL)
	e.startTSWorker(t, node, tsQueue, hp.URL)

	const tsCalls, goCalls, routed = 6, 2, 4
	var tsRuns, goRuns []client.WorkflowRun
	for range tsCalls {
		tsRuns = append(tsRuns, e.startTS(t, tsQueue, "llmCall", tsCallInput{GateTaskQueue: e.gateQueue, Caller: "ts",
			Request: gate.AcquireRequest{Version: gate.ContractVersion, Limits: []string{"svc"}, Tokens: 1000}}))
	}
	for range goCalls {
		goRuns = append(goRuns, e.start(t, GateCall, callInput{GateQueue: e.gateQueue, Call: true,
			Acquire: gate.AcquireRequest{Version: gate.ContractVersion, Limits: []string{"svc"}, Tokens: 1000},
			Release: &gate.ReleaseRequest{Version: gate.ContractVersion, Tokens: int64p(100)}}))
	}
	routedRun := e.start(t, RoutedCalls, routed)
	// Two calls reach the provider and wait there: the cap is full.
	require.Eventually(t, func() bool { return e.prov.inFlight.Load() == 2 }, 3*time.Minute, 10*time.Millisecond)
	close(e.prov.release)

	for _, run := range tsRuns {
		var out tsCallOutput
		require.NoError(t, run.Get(context.Background(), &out))
		require.Empty(t, out.Error)
		require.NotNil(t, out.Permit)
		require.Positive(t, out.Permit.TicketID)
		require.Equal(t, []string{"svc"}, out.Permit.Limits)
		require.Equal(t, e.gate.ReleaseTaskQueue(), out.Permit.ReleaseTaskQueue)
		require.Equal(t, usage, out.Usage)
		require.Equal(t, []gate.ReleaseResult{{Version: gate.ContractVersion, Released: true}}, e.releases(t, run))
		e.waitEnded(t, out.Permit.TicketID)
	}
	for _, run := range goRuns {
		var out callOutput
		require.NoError(t, run.Get(context.Background(), &out))
		require.True(t, out.Result.Released)
		e.waitEnded(t, out.Permit.TicketID)
	}
	var sum int64
	require.NoError(t, routedRun.Get(context.Background(), &sum))
	require.EqualValues(t, 7*routed, sum)

	require.LessOrEqual(t, e.prov.peak.Load(), int64(2), "the cap of 2 held across TypeScript and Go")
	require.EqualValues(t, tsCalls+goCalls+routed, e.prov.calls.Load())
	require.EqualValues(t, tsCalls, hp.calls.Load())
	t.Logf("FIGURES cap 2: at most %d calls at the provider at once, of %d calls (%d TypeScript in two node workers and %d Go, "+
		"through the gate; %d Go activities through the plugin); %d provider calls, so none ran twice; 429s %d",
		e.prov.peak.Load(), tsCalls+goCalls+routed, tsCalls, goCalls, routed, e.prov.calls.Load(), hp.limited.Load())
	e.inFlightBack(t, "svc")
	problems, err := e.q.Verify(context.Background())
	require.NoError(t, err)
	require.Empty(t, problems)
	require.NoError(t, first.stop(t), "a TypeScript worker exits cleanly on SIGTERM")
}

// Each TypeScript permit's reservation is reconciled to the usage its workflow reported, those held
// while the provider makes the calls wait included.
func TestGate_TypeScriptUsageReconciled(t *testing.T) {
	t.Parallel()
	e, node, hp, tsQueue := newTSEnv(t, 2, gate.Options{})
	e.prov.release = make(chan struct{})
	e.startTSWorker(t, node, tsQueue, hp.URL)

	const calls = 4
	var runs []client.WorkflowRun
	for range calls {
		runs = append(runs, e.startTS(t, tsQueue, "llmCall", tsCallInput{GateTaskQueue: e.gateQueue, Caller: "ts",
			Request: gate.AcquireRequest{Version: gate.ContractVersion, Limits: []string{"svc"}, Tokens: 1000}}))
	}
	require.Eventually(t, func() bool { return e.prov.inFlight.Load() == 2 }, 3*time.Minute, 10*time.Millisecond)
	close(e.prov.release)
	for _, run := range runs {
		var out tsCallOutput
		require.NoError(t, run.Get(context.Background(), &out))
		require.Equal(t, usage, out.Usage)
		require.Equal(t, []gate.ReleaseResult{{Version: gate.ContractVersion, Released: true}}, e.releases(t, run))
		e.waitEnded(t, out.Permit.TicketID)
	}
	// A call of no tokens has a claim fold the last releases into the usage (a release is folded by
	// the next holder of the limit row, not by the completion); then each reservation of 1,000 is
	// reconciled to the 50 reported.
	require.NoError(t, e.start(t, GateCall, callInput{GateQueue: e.gateQueue,
		Acquire: gate.AcquireRequest{Version: gate.ContractVersion, Limits: []string{"svc"}},
		Release: &gate.ReleaseRequest{Version: gate.ContractVersion, Tokens: int64p(0)}}).Get(context.Background(), nil))
	e.tokensCharged(t, "svc", calls*(usage["input_tokens"]+usage["output_tokens"]))
	t.Logf("FIGURES %d TypeScript calls reserved 1000 tokens each and reported %d: the limit charged %d in all",
		calls, usage["input_tokens"]+usage["output_tokens"], calls*(usage["input_tokens"]+usage["output_tokens"]))
}

// A 429 the provider gives a TypeScript workflow pauses the limit for everyone, Go included, from
// the provider's Retry-After, and gives the call's reservation back.
func TestGate_TypeScript429PausesGo(t *testing.T) {
	t.Parallel()
	e, node, hp, tsQueue := newTSEnv(t, 3, gate.Options{})
	hp.rateLimit.Store(true)
	e.startTSWorker(t, node, tsQueue, hp.URL)

	before := time.Now()
	var out tsCallOutput
	run := e.startTS(t, tsQueue, "llmCall", tsCallInput{GateTaskQueue: e.gateQueue, Caller: "ts",
		Request: gate.AcquireRequest{Version: gate.ContractVersion, Limits: []string{"svc"}, Tokens: 700}})
	require.NoError(t, run.Get(context.Background(), &out))
	require.Equal(t, "ProviderRateLimited", out.Error)
	require.Equal(t, []gate.ReleaseResult{{Version: gate.ContractVersion, Released: true}}, e.releases(t, run))
	require.NotNil(t, out.Permit)
	e.waitEnded(t, out.Permit.TicketID)
	st, err := e.q.LimitStatus(context.Background(), "svc")
	require.NoError(t, err)
	require.True(t, st.State.PausedUntil.After(before.Add(100*time.Second)), "paused until %v", st.State.PausedUntil)
	t.Logf("FIGURES 429s: %d, the provider's on purpose (Retry-After: 120); svc paused until %s after the call started; its reservation came back (%d tokens in flight)",
		hp.limited.Load(), st.State.PausedUntil.Sub(before).Round(time.Second), st.State.InflightTokens)

	// A Go activity on the limit waits for the pause; resumed, it runs.
	routedRun := e.start(t, RoutedCalls, 1)
	require.Eventually(t, func() bool {
		s, err := e.q.Status(context.Background(), "svc")
		return err == nil && len(s) == 1 && s[0].Queued == 1 && s[0].HeadWaitReason == "paused"
	}, 2*time.Minute, 20*time.Millisecond, "the Go call waits on the pause")
	require.NoError(t, e.q.Resume(context.Background(), "svc"))
	var sum int64
	require.NoError(t, routedRun.Get(context.Background(), &sum))
	require.EqualValues(t, 7, sum)
	t.Logf("FIGURES the Go activity waited on the pause (head_wait_reason paused) and ran once svc was resumed")
	e.inFlightBack(t, "svc")
}

// A TypeScript worker killed (SIGKILL) while its workflow's call is at the provider loses nothing:
// the call is retried on the other worker under the same permit, which is then released; the limit
// counts nothing in flight and its one slot serves the next call.
func TestGate_TypeScriptWorkerKilled(t *testing.T) {
	t.Parallel()
	e, node, hp, tsQueue := newTSEnv(t, 1, gate.Options{})
	e.prov.release = make(chan struct{})
	workers := []*tsWorker{e.startTSWorker(t, node, tsQueue, hp.URL), e.startTSWorker(t, node, tsQueue, hp.URL)}

	run := e.startTS(t, tsQueue, "llmCall", tsCallInput{GateTaskQueue: e.gateQueue, Caller: "ts", CallTimeoutMS: 5000,
		Request: gate.AcquireRequest{Version: gate.ContractVersion, Limits: []string{"svc"}, Tokens: 1000}})
	require.Eventually(t, func() bool { return e.prov.inFlight.Load() == 1 }, 3*time.Minute, 10*time.Millisecond)
	var killed *tsWorker
	for _, w := range workers {
		if int64(w.cmd.Process.Pid) == hp.lastPID.Load() {
			killed = w
		}
	}
	require.NotNil(t, killed, "the call came from neither worker (pid %d)", hp.lastPID.Load())
	require.NoError(t, killed.cmd.Process.Kill())
	<-killed.done
	close(e.prov.release)

	var out tsCallOutput
	require.NoError(t, run.Get(context.Background(), &out))
	require.Empty(t, out.Error)
	require.Equal(t, usage, out.Usage)
	e.waitEnded(t, out.Permit.TicketID)
	require.GreaterOrEqual(t, hp.calls.Load(), int64(2), "the call was made again after the kill")
	att := e.attempts(t, run)
	t.Logf("FIGURES ran twice: the provider call, %d times for one workflow (attempts: callProvider %d, %s %d, %s %d): "+
		"the killed worker's attempt had reached the provider; its StartToClose (5 s) expired and Temporal retried it on the other "+
		"worker, under the same permit (ticket %d), released once",
		hp.calls.Load(), att["callProvider"], gate.AcquireActivity, att[gate.AcquireActivity], gate.ReleaseActivity, att[gate.ReleaseActivity], out.Permit.TicketID)
	e.inFlightBack(t, "svc")
	var sum int64
	require.NoError(t, e.start(t, RoutedCalls, 1).Get(context.Background(), &sum))
	require.EqualValues(t, 7, sum)
}

// A TypeScript workflow terminated while it holds a permit gives it back once the gate sees the
// workflow closed; one cancelled during its call releases it itself (with the usage it reports,
// none); one cancelled while it waits in line leaves the line.
func TestGate_TypeScriptTerminatedAndCancelled(t *testing.T) {
	t.Parallel()
	e, node, hp, tsQueue := newTSEnv(t, 1, gate.Options{CheckInterval: 50 * time.Millisecond})
	e.startTSWorker(t, node, tsQueue, hp.URL)
	svc := gate.AcquireRequest{Version: gate.ContractVersion, Limits: []string{"svc"}}

	// Terminated while holding.
	holder := e.startTS(t, tsQueue, "acquireAndHold", tsCallInput{GateTaskQueue: e.gateQueue, Request: svc})
	held := e.heldTicket(t, holder)
	terminated := time.Now()
	require.NoError(t, e.c.TerminateWorkflow(context.Background(), holder.GetID(), holder.GetRunID(), "test"))
	e.waitEnded(t, held.ID)
	t.Logf("FIGURES a terminated workflow's permit (ticket %d) came back %s after the termination (the gate checks every 50 ms here)",
		held.ID, time.Since(terminated).Round(time.Millisecond))
	e.inFlightBack(t, "svc")

	// Cancelled during the call: withSluice releases, reporting 0 tokens of the 500 reserved.
	withTokens := svc
	withTokens.Tokens = 500
	inCall := e.startTS(t, tsQueue, "holdInCall", tsCallInput{GateTaskQueue: e.gateQueue, Request: withTokens})
	held = e.heldTicket(t, inCall)
	require.NoError(t, e.c.CancelWorkflow(context.Background(), inCall.GetID(), inCall.GetRunID()))
	var canceled *temporal.CanceledError
	require.ErrorAs(t, inCall.Get(context.Background(), nil), &canceled)
	e.waitEnded(t, held.ID)
	// withSluice released it, in the cancelled workflow, rather than the gate on seeing it closed.
	require.Equal(t, []gate.ReleaseResult{{Version: gate.ContractVersion, Released: true}}, e.releases(t, inCall))

	// Cancelled while waiting in line behind a holder.
	holder = e.startTS(t, tsQueue, "acquireAndHold", tsCallInput{GateTaskQueue: e.gateQueue, Request: svc})
	held = e.heldTicket(t, holder)
	waiting := e.startTS(t, tsQueue, "llmCall", tsCallInput{GateTaskQueue: e.gateQueue, Caller: "ts", Request: svc})
	queued := func(n int64) func() bool {
		return func() bool {
			s, err := e.q.Status(context.Background(), "svc")
			return err == nil && len(s) == 1 && s[0].Queued == n
		}
	}
	require.Eventually(t, queued(1), 2*time.Minute, 20*time.Millisecond, "the second request waits in line")
	require.NoError(t, e.c.CancelWorkflow(context.Background(), waiting.GetID(), waiting.GetRunID()))
	err := waiting.Get(context.Background(), nil)
	require.True(t, errors.As(err, &canceled), "%v", err)
	require.Eventually(t, queued(0), 2*time.Minute, 20*time.Millisecond, "the cancelled request left the line")
	require.NoError(t, e.c.TerminateWorkflow(context.Background(), holder.GetID(), holder.GetRunID(), "test"))
	e.waitEnded(t, held.ID)
	e.inFlightBack(t, "svc")
	require.Zero(t, hp.calls.Load(), "no call reached the provider")
}
