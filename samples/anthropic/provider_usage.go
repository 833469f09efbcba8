package main

import (
	"time"
)

// The provider's record of what it accepted, and the run's figure of each quota's use.

// callRecord is one admitted call.
type callRecord struct {
	at, end   time.Time // admitted; answered (or abandoned by its caller)
	input     int64     // input tokens charged to ITPM: uncached plus cache writes
	prompt    int64     // the prompt's tokens in all, cache reads included
	maxTokens int64     // charged to OTPM at admission
	output    int64     // the output tokens: the real output, or max_tokens for a call abandoned mid-way
	done, ok  bool      // ended; answered
}

// usageLog is every request the provider charged and every call it admitted, in order.
type usageLog struct {
	requests []time.Time // every request charged, refused ones included
	calls    []callRecord
}

func (l *usageLog) request(at time.Time) { l.requests = append(l.requests, at) }

// admit records an admitted call and returns its index, for complete.
func (l *usageLog) admit(at time.Time, input, prompt, maxTokens int64) int {
	l.calls = append(l.calls, callRecord{at: at, input: input, prompt: prompt, maxTokens: maxTokens})
	return len(l.calls) - 1
}

// complete records the end of call i: answered with output tokens, or abandoned by its caller, whose
// whole max_tokens then stays spent.
func (l *usageLog) complete(i int, at time.Time, output int64, answered bool) {
	c := &l.calls[i]
	c.end, c.output, c.done, c.ok = at, output, true, answered
}

func (l *usageLog) succeeded() int64 {
	var n int64
	for _, c := range l.calls {
		if c.ok {
			n++
		}
	}
	return n
}

// Share is one quota's use over a run's busy period: Used units of a Quota that the provider would
// have accepted at most.
type Share struct {
	Used, Quota float64
}

// Pct is Used as a percent of Quota (0 for no quota).
func (s Share) Pct() float64 {
	if s.Quota <= 0 {
		return 0
	}
	return 100 * s.Used / s.Quota
}

// Use is how much of each quota a run used over its busy period.
//
// The busy period runs from the provider's first admission to its last: the time in which the
// run had calls to make. Each bucket is full at the first admission (a fresh provider) and refills
// at its rate, so over the busy period it can let through at most its capacity plus its rate times
// the period: that is the quota. Used is what the run drew on it: the requests charged (refused ones
// included, as they count), the input tokens charged (cache reads do not count), and the real output
// tokens of the calls admitted (max_tokens for a call its caller abandoned). Nothing is subtracted,
// and the share cannot pass 100%: the capacity is in the quota. What keeps it below 100% is quota the
// run left unspent, the bucket's refill lost while it was full, or tokens left in it when the last
// call was admitted (and the unused max_tokens of the calls still running then, given back later).
// The calls' tail after the last admission is outside the period: no throttle can shorten it.
type Use struct {
	Busy                    time.Duration
	Requests, Input, Output Share
}

// Use returns the run's use of each quota so far (call it once every call has ended).
func (p *Provider) Use() Use {
	p.mu.Lock()
	defer p.mu.Unlock()
	return useOf(&p.log, [3]*dimension{&p.req, &p.in, &p.out})
}

// useOf computes Use from a log, for dimensions requests, input and output tokens.
func useOf(l *usageLog, dims [3]*dimension) Use {
	if len(l.calls) == 0 {
		return Use{}
	}
	first, last := l.calls[0].at, l.calls[len(l.calls)-1].at
	busy := last.Sub(first)
	var requests, input, output float64
	for _, at := range l.requests {
		if !at.Before(first) && !at.After(last) {
			requests++
		}
	}
	for _, c := range l.calls {
		input += float64(c.input)
		output += float64(c.output)
	}
	quota := func(d *dimension) float64 { return d.capacity + d.rate()*busy.Seconds() }
	return Use{
		Busy:     busy,
		Requests: Share{Used: requests, Quota: quota(dims[0])},
		Input:    Share{Used: input, Quota: quota(dims[1])},
		Output:   Share{Used: output, Quota: quota(dims[2])},
	}
}

// OutputPerMinute is the output tokens of the calls answered in the last window, per minute.
func (p *Provider) OutputPerMinute(window time.Duration) float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	since := time.Now().Add(-window)
	var sum int64
	for i := len(p.log.calls) - 1; i >= 0 && i >= len(p.log.calls)-1000; i-- {
		if c := p.log.calls[i]; c.ok && c.end.After(since) {
			sum += c.output
		}
	}
	return float64(sum) / window.Minutes()
}

// estimateError is the route's estimate of the calls' input tokens against the provider's count of
// their prompts (cache reads and writes included): the absolute difference in percent of the
// provider's count, mean and largest over the answered calls; 0 and 0 for none.
func estimateError(calls []estimateCount) (mean, largest float64) {
	var sum float64
	for _, c := range calls {
		e := 100 * float64(max(c.Estimate-c.Provider, c.Provider-c.Estimate)) / float64(max(1, c.Provider))
		sum += e
		largest = max(largest, e)
	}
	if len(calls) == 0 {
		return 0, 0
	}
	return sum / float64(len(calls)), largest
}

// estimateCount is one answered call's input tokens: the route's estimate, and the provider's count
// (usage.input_tokens + cache_creation_input_tokens + cache_read_input_tokens).
type estimateCount struct {
	Estimate, Provider int64
}
