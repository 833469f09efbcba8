// Package testsignal lets a test wait for an event inside a service (a sweep done, a lease renewed)
// instead of sleeping or polling for its effects, as River's rivershared/testsignal does.
//
// A service keeps a struct of signals, one per event, and calls Signal where the event happens. The
// zero Signal does nothing: in production no signal is initialised, and Signal costs a nil check.
// A test calls Init before it starts the service, then waits with WaitOrTimeout, WaitUntil or WaitC.
//
//	type rescuerSignals struct{ Rescued testsignal.Signal[[]pgqueue.Ticket] }
//
//	r.signals.Rescued.Signal(back)             // in the service
//	r.signals.Rescued.Init()                   // in the test, before Start
//	back := r.signals.Rescued.WaitOrTimeout(t) // the next pass's tickets
package testsignal

import (
	"time"
)

// WaitTimeout bounds every wait: generous, for a busy machine running the suites of several
// engineers at once. A signal that has not come by then will not.
const WaitTimeout = 3 * time.Minute

// capacity is how many values a signal keeps for a test that has not waited for them yet. Past it,
// the oldest value is dropped: a service signals every pass, and a test waits for the latest events.
const capacity = 64

// TB is the part of testing.TB a signal reports through. The package does not import testing: the
// library's services link it.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Signal carries the values of one event from a service to a test. The zero value drops every value
// and is what production runs with; Init readies it. Signal is safe for concurrent use once Init has
// returned; Init must happen before the goroutines that call Signal start.
type Signal[T any] struct {
	ch chan T
}

// Init readies s for a test's waits. Call it before starting the service that signals.
func (s *Signal[T]) Init() { s.ch = make(chan T, capacity) }

// Signal records v for a test to wait for. It does nothing on a Signal no test initialised, and
// never blocks: when capacity values wait already, the oldest is dropped.
func (s *Signal[T]) Signal(v T) {
	if s.ch == nil {
		return
	}
	for {
		select {
		case s.ch <- v:
			return
		default:
		}
		select {
		case <-s.ch: // full: drop the oldest, then try again
		default:
		}
	}
}

// WaitC returns the channel the values arrive on, for a test that selects on other events as well.
// It is nil, and blocks forever, when s was not initialised.
func (s *Signal[T]) WaitC() <-chan T { return s.ch }

// WaitOrTimeout returns the next value, failing tb if none comes within WaitTimeout. Only tb's own
// goroutine may call it.
func (s *Signal[T]) WaitOrTimeout(tb TB) T {
	tb.Helper()
	return s.WaitUntil(tb, func(T) bool { return true })
}

// WaitUntil returns the first value for which cond holds, dropping those before it, and fails tb if
// none comes within WaitTimeout. Only tb's own goroutine may call it.
func (s *Signal[T]) WaitUntil(tb TB, cond func(T) bool) T {
	tb.Helper()
	var zero T
	if s.ch == nil {
		tb.Fatalf("testsignal: waited on a signal the test did not Init: no value will ever come")
		return zero
	}
	deadline := time.NewTimer(WaitTimeout)
	defer deadline.Stop()
	for {
		select {
		case v := <-s.ch:
			if cond(v) {
				return v
			}
		case <-deadline.C:
			tb.Fatalf("testsignal: no signal after %s", WaitTimeout)
			return zero
		}
	}
}
