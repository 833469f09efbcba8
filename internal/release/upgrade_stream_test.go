package release_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
)

// flowInput is testdata/upgradeworker's FlowInput.
type flowInput struct{ Base, N int }

// stream keeps inflight UpgradeFlow workflows running on a task queue, starting the next as each
// completes, until stopped.
type stream struct {
	c        client.Client
	queue    string
	n        int // activities per workflow
	inflight int

	mu        sync.Mutex
	started   int
	completed int
	failures  []string
	changed   chan struct{} // closed and replaced at each completion
	stopped   bool
	quit      chan struct{} // closed by stop
	wg        sync.WaitGroup
}

func newStream(c client.Client, queue string, n, inflight int) *stream {
	return &stream{c: c, queue: queue, n: n, inflight: inflight, changed: make(chan struct{}), quit: make(chan struct{})}
}

// want is the sum UpgradeFlow returns for workflow i.
func (s *stream) want(i int) int {
	sum := 0
	for k := range s.n {
		sum += 2 * (i*1000 + k)
	}
	return sum
}

// run starts workflows until stop is called (or ctx ends: then the workflows' waits fail too); each
// result is checked.
func (s *stream) run(ctx context.Context, prefix string) {
	sem := make(chan struct{}, s.inflight)
	for i := 0; ; i++ {
		select {
		case sem <- struct{}{}:
		case <-s.quit:
			return
		case <-ctx.Done():
			return
		}
		s.mu.Lock()
		if s.stopped {
			s.mu.Unlock()
			return
		}
		s.started++
		s.wg.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			defer func() { <-sem }()
			id := fmt.Sprintf("%s-%03d", prefix, i)
			var failure string
			run, err := s.c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: s.queue}, "UpgradeFlow", flowInput{Base: i * 1000, N: s.n})
			var sum int
			if err == nil {
				err = run.Get(ctx, &sum)
			}
			switch {
			case err != nil:
				failure = fmt.Sprintf("%s: %v", id, err)
			case sum != s.want(i):
				failure = fmt.Sprintf("%s: sum %d, want %d", id, sum, s.want(i))
			}
			s.mu.Lock()
			s.completed++
			if failure != "" {
				s.failures = append(s.failures, failure)
			}
			close(s.changed)
			s.changed = make(chan struct{})
			s.mu.Unlock()
		}()
	}
}

// stop starts no more workflows and waits for those started to end.
func (s *stream) stop() {
	s.mu.Lock()
	if !s.stopped {
		s.stopped = true
		close(s.quit)
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// counts returns the workflows started and completed so far.
func (s *stream) counts() (started, completed int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.started, s.completed
}

// waitCompleted waits until k workflows have completed.
func (s *stream) waitCompleted(t *testing.T, ctx context.Context, k int, what string) {
	t.Helper()
	for {
		s.mu.Lock()
		done, ch := s.completed, s.changed
		s.mu.Unlock()
		if done >= k {
			return
		}
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("%s: %d of %d workflows completed before the deadline", what, done, k)
		}
	}
}

// probe times a trivial statement that takes the table locks a claim takes (ROW EXCLUSIVE on
// sluice_limit and sluice_ticket, as their UPDATEs do, and no row lock), in a loop: the longest is
// how long a migration's locks held claims back.
type probe struct {
	mu      sync.Mutex
	samples []probeSample
	first   chan struct{} // closed at the first sample
}

type probeSample struct {
	at  time.Time // the statement's start
	dur time.Duration
}

// max returns the longest sample that started in [from, to] (zero times: no bound).
func (p *probe) max(from, to time.Time) (time.Duration, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var longest time.Duration
	n := 0
	for _, s := range p.samples {
		if (!from.IsZero() && s.at.Add(s.dur).Before(from)) || (!to.IsZero() && s.at.After(to)) {
			continue
		}
		n++
		longest = max(longest, s.dur)
	}
	return longest, n
}
