package main

import (
	"math"
	"slices"
	"sync"
)

// The demo's figure of the route estimate's error: for every successful call, the prompt tokens
// the route reserved (openaicost's count), what the chars/4 heuristic the routes used before would
// have reserved, and the provider's own count, its usage.prompt_tokens.

// inputCount is one successful call's prompt tokens three ways.
type inputCount struct {
	Estimate  int64 // the route's estimate of the input: openaicost.CountMessages
	CharsDiv4 int64 // the old heuristic: the prompt's characters / 4, rounded up
	Provider  int64 // the provider's count, as it charged the call
}

// inputLog collects inputCounts from many goroutines.
type inputLog struct {
	mu sync.Mutex
	cs []inputCount
}

func (l *inputLog) add(c inputCount) {
	l.mu.Lock()
	l.cs = append(l.cs, c)
	l.mu.Unlock()
}

func (l *inputLog) all() []inputCount {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.cs)
}

// charsDiv4 is the heuristic the demo's routes used before openaicost: the characters of the
// messages' text / 4, rounded up.
func charsDiv4(parts ...string) int64 {
	chars := 0
	for _, p := range parts {
		chars += len(p)
	}
	return int64((chars + 3) / 4)
}

// inputError is the mean and the largest absolute error of an estimate of the calls' prompt tokens
// (est picks it), in percent of the provider's count; 0 and 0 for no calls.
func inputError(cs []inputCount, est func(inputCount) int64) (mean, largest float64) {
	var sum float64
	for _, c := range cs {
		e := 100 * math.Abs(float64(est(c)-c.Provider)) / float64(max(1, c.Provider))
		sum += e
		largest = max(largest, e)
	}
	if len(cs) == 0 {
		return 0, 0
	}
	return sum / float64(len(cs)), largest
}
