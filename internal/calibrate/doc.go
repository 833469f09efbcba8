// Package calibrate measures the wait estimate of pgqueue.Queue.Explain against what the engine does:
// it plays workload shapes (a rate, caps with varied run times, a tenant cap behind a provider, idle
// spells, an output-token budget, an allowance's reset) on the real engine and Postgres with a
// virtual clock, explains sampled waiting tickets, and sets each estimate against the ticket's
// admission. TestCalibration runs it; `make explain-accuracy` prints its report (see
// docs/explain-accuracy.md).
package calibrate
