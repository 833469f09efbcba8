package main

import (
	"slices"
	"time"
)

// PeakRequests is the most calls the provider received (refused ones included) in any window of
// length d: the busiest window, for setting against the request quota.
func (p *Provider) PeakRequests(d time.Duration) int64 {
	p.mu.Lock()
	at := slices.Clone(p.arrivals)
	p.mu.Unlock()
	var peak int64
	lo := 0
	for hi := range at {
		for at[hi].Sub(at[lo]) >= d {
			lo++
		}
		peak = max(peak, int64(hi-lo+1))
	}
	return peak
}

// PeakTokens is the most tokens the provider accepted in any window of length d, each call's at
// the instant it ended: the busiest window, for setting against the token quota.
func (p *Provider) PeakTokens(d time.Duration) int64 {
	p.mu.Lock()
	h := slices.Clone(p.history)
	p.mu.Unlock()
	var peak, sum int64
	lo := 0
	for hi := range h {
		sum += h[hi].tokens
		for h[hi].at.Sub(h[lo].at) >= d {
			sum -= h[lo].tokens
			lo++
		}
		peak = max(peak, sum)
	}
	return peak
}
