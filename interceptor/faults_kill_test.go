package interceptor_test

// The fault scenario of worker processes killed at random; the harness is in faults_test.go.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/testkit/temporaltest"
	"github.com/sluicehq/sluice/internal/testkit/testdb"
)

// TestFaults_RandomKills runs one workflow of throttled activities over three worker processes while
// a killer SIGKILLs a random worker every 1-3s and starts a replacement each time. Every activity
// completes with the right result; those that ran more than once are bounded by what the killed
// workers were running; the activities never overlapped beyond MaxConcurrent.
func TestFaults_RandomKills(t *testing.T) {
	t.Parallel()
	s := temporaltest.Require(t, server)
	testdb.URL(t)
	n, kills, hold, timeout := 120, 4, 300*time.Millisecond, 8*time.Minute
	if faultsFull() {
		n, kills, timeout = 500, 15, 15*time.Minute
	}
	const maxConc = 4
	pool := testdb.Pool(t)
	schema := testdb.Schema(t, pool)
	_, err := pool.Exec(context.Background(), fmt.Sprintf(faultsRunTable, pgx.Identifier{schema}.Sanitize()))
	require.NoError(t, err)
	q, err := store.New(pool, store.Options{Schema: schema})
	require.NoError(t, err)
	queue := "q-" + testdb.NewSchemaName()
	c := s.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()

	l := newLedger()
	procEnv := []string{envFaultsWorker + "=1", envFaultsTemporal + "=" + s.Addr, envFaultsSchema + "=" + schema,
		envFaultsQueue + "=" + queue, envFaultsMaxConc + "=" + strconv.Itoa(maxConc), envFaultsHold + "=" + hold.String()}
	var live []*workerProc
	next := 0
	spawn := func() *workerProc {
		name := string(rune('A' + next%26))
		if next >= 26 {
			name += strconv.Itoa(next / 26)
		}
		next++
		p := startWorkerProc(t, name, l, procEnv...)
		p.waitReady(t)
		return p
	}
	for range 3 {
		live = append(live, spawn())
	}

	start := time.Now()
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: queue, ID: "wf-" + testdb.NewSchemaName()},
		FaultsFanOut, faultsFanOutInput{N: n, HeartbeatTimeout: 5 * time.Second})
	require.NoError(t, err)
	defer func() {
		if t.Failed() {
			dumpState(t, c, pool, schema, run, l)
		}
	}()
	result := make(chan error, 1)
	var sum int
	go func() { result <- run.Get(ctx, &sum) }()
	// The recovery watchers below look again at each of the queue's notifications: a survivor's
	// hand-back of a killed owner's running tickets notifies work, and so do the enqueues of their
	// activities' retries, which follow every hand-back; completions notify releases.
	notifier := q.NewNotifier(nil)
	notifyCtx, stopNotifier := context.WithCancel(ctx)
	var notifyWG sync.WaitGroup
	notifyWG.Go(func() { _ = notifier.Run(notifyCtx) })
	defer func() {
		stopNotifier()
		notifyWG.Wait()
	}()
	select {
	case <-notifier.Listening():
	case <-ctx.Done():
		t.Fatal("the test's notifier never listened")
	}

	type kill struct {
		proc, owner string
		at          time.Time
		running     int // runs in progress just before the kill
		tickets     map[string]int
	}
	var (
		killed     []kill
		recMu      sync.Mutex
		recoveries []time.Duration
		recWG      sync.WaitGroup
		done       bool
		wfErr      error
	)
	table := pgx.Identifier{schema, "faults_run"}.Sanitize()
	cutByKill := map[string]bool{} // activities a kill cut short
	for len(killed) < kills && !done {
		select {
		case wfErr = <-result:
			done = true
			continue
		case <-time.After(time.Second + rand.N(2*time.Second)):
		}
		i := rand.N(len(live))
		p := live[i]
		var running int // per the runs it recorded
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM `+table+` WHERE proc = $1 AND finished_at IS NULL`, p.name).Scan(&running))
		require.NoError(t, p.cmd.Process.Kill())
		at := time.Now()
		<-p.exited
		// The killed process's runs ended at the latest now; their tickets are released later.
		// Those are the runs the kill cut short.
		rows, err := pool.Query(ctx, `UPDATE `+table+` SET finished_at = greatest(started_at, clock_timestamp())
			WHERE proc = $1 AND finished_at IS NULL RETURNING act`, p.name)
		require.NoError(t, err)
		acts, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		for _, act := range acts {
			cutByKill[act] = true
		}
		states, err := ticketStates(ctx, pool, schema)
		require.NoError(t, err)
		k := kill{proc: p.name, owner: p.Owner(), at: at, running: running, tickets: states[p.Owner()]}
		killed = append(killed, k)
		t.Logf("kill %d: SIGKILL %s %s after start; runs in progress just before: %d; its tickets just after: %v",
			len(killed), p.name, at.Sub(start).Round(time.Millisecond), running, k.tickets)
		work, stopWork := notifier.Subscribe(store.TopicWork())
		released, stopReleased := notifier.Subscribe(store.TopicReleased())
		recWG.Go(func() {
			defer stopWork()
			defer stopReleased()
			for {
				m, err := ticketStates(ctx, pool, schema)
				if err == nil && unfinished(m[k.owner]) == 0 {
					recMu.Lock()
					recoveries = append(recoveries, time.Since(k.at))
					recMu.Unlock()
					return
				}
				select {
				case <-work:
				case <-released:
				case <-ctx.Done():
					return
				}
			}
		})
		live[i] = spawn()
	}
	if !done {
		wfErr = <-result
	}
	require.NoError(t, wfErr)
	require.Equal(t, n*(n-1), sum, "every activity completed with the right result")
	elapsed := time.Since(start)
	recWG.Wait()
	for _, p := range live {
		p.stopGracefully(t)
	}
	// A process killed while its INSERT was in flight may have left a run without an end.
	for _, k := range killed {
		_, err := pool.Exec(ctx, `UPDATE `+table+` SET finished_at = started_at WHERE proc = $1 AND finished_at IS NULL`, k.proc)
		require.NoError(t, err)
	}

	// Every process has exited: the ledger is complete.
	lost := n - len(l.done)
	var twice []string
	for key, r := range l.ran {
		if len(r) > 1 {
			twice = append(twice, fmt.Sprintf("%s%v", key[strings.LastIndexByte(key, '/')+1:], r))
		}
	}
	slices.Sort(twice)
	runningAtKills := 0
	for _, k := range killed {
		runningAtKills += k.running
	}
	overlap, err := faultsMaxOverlap(ctx, pool, schema)
	require.NoError(t, err)
	causes, _ := retryCauses(t, c, run)
	// A run cut short by a kill runs again: at most MaxConcurrent runs are in progress at a kill (the
	// limit is global). Any other repeat is of an attempt Temporal gave up on while a live worker held
	// it (a heartbeat timeout of a queued ticket), whose ticket was admitted and run all the same.
	var byKill, onLive []string
	for key, r := range l.ran {
		if len(r) < 2 {
			continue
		}
		label := fmt.Sprintf("%s%v", key[strings.LastIndexByte(key, '/')+1:], r)
		if cutByKill[key] {
			byKill = append(byKill, label)
		} else {
			onLive = append(onLive, label)
		}
	}
	slices.Sort(byKill)
	slices.Sort(onLive)
	t.Logf("%d activities, %d kills in %s; %d runs; %d activities ran more than once: %d after a kill cut a run short "+
		"(%d runs were in progress at the kills): %v; %d otherwise: %v; retries by last failure: %v; "+
		"largest overlap of runs %d (MaxConcurrent %d); kill -> tickets handed back: %s",
		n, len(killed), elapsed.Round(time.Millisecond), l.runs(), len(twice), len(byKill), runningAtKills, byKill,
		len(onLive), onLive, causes, overlap, maxConc, faultsDurations(recoveries))
	require.Zero(t, lost, "activities that never completed anywhere")
	require.LessOrEqual(t, len(byKill), len(killed)*maxConc+len(killed), "repeats after a kill are bounded by what the killed workers ran")
	require.LessOrEqual(t, overlap, maxConc, "the activities' own observation of concurrency")
	require.Len(t, recoveries, len(killed), "every killed worker's tickets were handed back")
	faultsCheckQueue(t, ctx, q, pool)
	violations := max(0, overlap-maxConc)
	faultsRow(t, fmt.Sprintf("random SIGKILL of 1 of 3 workers every 1-3s, %d activities", n), len(killed), lost, len(twice), violations,
		"kill -> tickets handed back: "+faultsDurations(recoveries))
}
