package interceptor_test

// The fault scenario of a Temporal outage between runs and their completion; the harness is in
// faults_test.go.

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/testkit/temporaltest"
	"github.com/sluicehq/sluice/internal/testkit/testdb"
)

// faultsProxy forwards TCP connections to target until it is put down, which drops every
// connection and refuses new ones; up listens again on the same address.
type faultsProxy struct {
	target, addr string
	mu           sync.Mutex
	ln           net.Listener
	conns        map[net.Conn]struct{}
}

func newFaultsProxy(t *testing.T, target string) *faultsProxy {
	t.Helper()
	p := &faultsProxy{target: target, addr: "127.0.0.1:0", conns: map[net.Conn]struct{}{}}
	require.NoError(t, p.up())
	t.Cleanup(p.down)
	return p
}

func (p *faultsProxy) up() error {
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.ln, p.addr = ln, ln.Addr().String()
	p.mu.Unlock()
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", p.target)
			if err != nil {
				in.Close()
				continue
			}
			p.mu.Lock()
			if p.ln != ln { // put down meanwhile
				p.mu.Unlock()
				in.Close()
				out.Close()
				return
			}
			p.conns[in], p.conns[out] = struct{}{}, struct{}{}
			p.mu.Unlock()
			pipe := func(dst, src net.Conn) {
				_, _ = io.Copy(dst, src)
				dst.Close()
				src.Close()
			}
			go pipe(in, out)
			go pipe(out, in)
		}
	}()
	return nil
}

func (p *faultsProxy) down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
		delete(p.conns, c)
	}
}

// TestFaults_TemporalOutageDuringCompletion runs a worker process whose Temporal connection goes
// through a proxy. The activities do their work, then the proxy goes down, and only then do they
// return: their outcomes are recorded in Postgres while Temporal is unreachable, their deliveries are
// tried and retried, and they are delivered once it is back. No activity body runs twice.
func TestFaults_TemporalOutageDuringCompletion(t *testing.T) {
	t.Parallel()
	s := temporaltest.Require(t, server)
	testdb.URL(t)
	n := 10
	if faultsFull() {
		n = 40
	}
	pool := testdb.Pool(t)
	schema := testdb.Schema(t, pool)
	table := pgx.Identifier{schema, "faults_run"}.Sanitize()
	_, err := pool.Exec(context.Background(), fmt.Sprintf(faultsRunTable, pgx.Identifier{schema}.Sanitize()))
	require.NoError(t, err)
	q, err := store.New(pool, store.Options{Schema: schema})
	require.NoError(t, err)
	queue := "q-" + testdb.NewSchemaName()
	c := s.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	proxy := newFaultsProxy(t, s.Addr)
	gate, err := os.MkdirTemp("", "sluice-faults-gate-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(gate) })

	l := newLedger()
	p := startWorkerProc(t, "A", l, envFaultsWorker+"=1", envFaultsTemporal+"="+proxy.addr, envFaultsSchema+"="+schema,
		envFaultsQueue+"="+queue, envFaultsMaxConc+"="+strconv.Itoa(n), envFaultsHold+"=100ms", envFaultsGate+"="+gate)
	p.waitReady(t)
	start := time.Now()
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: queue, ID: "wf-" + testdb.NewSchemaName()},
		FaultsFanOut, faultsFanOutInput{N: n})
	require.NoError(t, err)
	defer func() {
		if t.Failed() {
			dumpState(t, c, pool, schema, run, l)
		}
	}()
	count := func(sql string) int {
		var k int
		require.NoError(t, pool.QueryRow(ctx, sql).Scan(&k))
		return k
	}
	require.Eventually(t, func() bool { return count(`SELECT count(*) FROM `+table+` WHERE finished_at IS NOT NULL`) == n },
		3*time.Minute, 20*time.Millisecond, "every activity did its work")

	proxy.down()
	downAt := time.Now()
	require.NoError(t, os.WriteFile(filepath.Join(gate, "release"), nil, 0o644))
	tickets := pgx.Identifier{schema, "sluice_ticket"}.Sanitize()
	require.Eventually(t, func() bool {
		return count(`SELECT count(*) FROM `+tickets+` WHERE state = 'finished' AND outcome_kind = 'completed'`) == n
	}, 3*time.Minute, 20*time.Millisecond, "every outcome is recorded in Postgres while Temporal is unreachable")
	recordedIn := time.Since(downAt)
	desc, err := c.DescribeWorkflowExecution(ctx, run.GetID(), run.GetRunID())
	require.NoError(t, err)
	require.Equal(t, enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, desc.WorkflowExecutionInfo.GetStatus())
	require.Len(t, desc.PendingActivities, n, "Temporal has none of the outcomes yet")
	// Temporal stays away until the delivery loop has taken every outcome too: each delivery has then
	// been tried, by the run's own delivery and again by the loop, which pushes the next try back,
	// while Temporal was unreachable. Polled: the worker is another process, and a take of deliveries
	// notifies nothing.
	require.Eventually(t, func() bool {
		return count(`SELECT count(*) FROM `+tickets+` WHERE state = 'finished' AND deliveries > 0`) == n
	}, 3*time.Minute, 20*time.Millisecond, "the delivery loop took every outcome while Temporal was unreachable")
	require.NoError(t, proxy.up())
	upAt := time.Now()
	t.Logf("proxy down %s; outcomes recorded %s after it went down", upAt.Sub(downAt).Round(time.Millisecond), recordedIn.Round(time.Millisecond))

	var sum int
	require.NoError(t, run.Get(ctx, &sum))
	require.Equal(t, n*(n-1), sum, "every activity completed with the right result")
	delivered := time.Since(upAt)
	p.stopGracefully(t)
	var twice []string
	for key, r := range l.ran {
		if len(r) != 1 {
			twice = append(twice, fmt.Sprintf("%s%v", key, r))
		}
	}
	require.Len(t, l.ran, n)
	require.Empty(t, twice, "each activity body ran exactly once")
	require.Equal(t, n, count(`SELECT count(*) FROM `+table), "one recorded run per activity")
	t.Logf("workflow done %s after start, %s after Temporal came back", time.Since(start).Round(time.Millisecond), delivered.Round(time.Millisecond))
	states := faultsCheckQueue(t, ctx, q, pool)
	require.Zero(t, states["finished"], "every recorded outcome was delivered and acknowledged")
	faultsRow(t, fmt.Sprintf("Temporal unreachable between run and completion, until every outcome's delivery was retried, %d activities", n), 1, n-len(l.done), len(twice), 0,
		fmt.Sprintf("Temporal back -> workflow complete: %s", delivered.Round(10*time.Millisecond)))
}
