package calibrate

import (
	"math"
	"math/rand/v2"
	"time"

	"github.com/sluicehq/sluice/throttle"
)

// Arrival is one ticket a shape enqueues: when, on which limits, and its reservation.
type Arrival struct {
	At           time.Time
	Keys         []string
	Cost, Output int64
}

// Outcome is how an admitted ticket's run goes: how long it holds its limits, and the usage its
// completion reports (ActualCost -1: none reported, the reservation stands).
type Outcome struct {
	RunTime                  time.Duration
	ActualCost, ActualOutput int64
}

// Shape is a workload the report replays: its limits, the tickets of each round, how each run goes,
// and how often the waiting tickets are sampled.
type Shape struct {
	// Name is the shape's row in the report; About says what it is, in a line.
	Name, About string
	Limits      []throttle.Limit
	// Seed fixes the shape's random draws (arrivals, run times, usage, which tickets are sampled).
	Seed uint64
	// Start is the virtual clock's first instant.
	Start time.Time
	// Round returns the arrivals of round n (from 0), the first at or after from: the instant the
	// previous round drained (nothing queued or running), or Start. short asks for the short form.
	Round func(rng *rand.Rand, n int, from time.Time, short bool) []Arrival
	// Run draws how an admitted ticket's run goes.
	Run func(rng *rand.Rand, a Arrival) Outcome
	// SampleEvery is the spacing of the sampling instants, and SamplePick how many waiting tickets
	// each explains at most.
	SampleEvery time.Duration
	SamplePick  int
}

// t0 is the shapes' virtual start: an ordinary day, minutes before the hour.
var t0 = time.Date(2026, 6, 15, 12, 40, 0, 0, time.UTC)

// between draws a duration uniformly in [lo, hi].
func between(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	return lo + time.Duration(rng.Int64N(int64(hi-lo)+1))
}

// lognormal draws a duration whose logarithm is normal: median med, spread sigma (of the log).
func lognormal(rng *rand.Rand, med time.Duration, sigma float64) time.Duration {
	return time.Duration(float64(med) * math.Exp(sigma*rng.NormFloat64()))
}

// batch is n arrivals at one instant on keys, with no cost.
func batch(at time.Time, n int, keys ...string) []Arrival {
	out := make([]Arrival, n)
	for i := range out {
		out[i] = Arrival{At: at, Keys: keys}
	}
	return out
}

// poisson is arrivals on keys at rate per second from from, for d.
func poisson(rng *rand.Rand, from time.Time, d time.Duration, rate float64, keys ...string) []Arrival {
	var out []Arrival
	for at := from; ; {
		at = at.Add(time.Duration(rng.ExpFloat64() / rate * float64(time.Second)))
		if at.After(from.Add(d)) {
			return out
		}
		out = append(out, Arrival{At: at, Keys: keys})
	}
}

// runFor is a Run of the given run times and no usage reported.
func runFor(draw func(rng *rand.Rand) time.Duration) func(*rand.Rand, Arrival) Outcome {
	return func(rng *rand.Rand, _ Arrival) Outcome { return Outcome{RunTime: draw(rng), ActualCost: -1} }
}

// idle is shape 4: a cap-2 key with 500 ms runs idles for gap, then a batch of 10 arrives.
func idle(name string, gap time.Duration, seed uint64) Shape {
	return Shape{
		Name: name, About: "cap 2, runs of 500 ms (±5%), idle " + gap.String() + ", then a batch of 10",
		Limits: []throttle.Limit{{Key: "k", MaxConcurrent: 2}}, Seed: seed, Start: t0,
		Round: func(_ *rand.Rand, n int, from time.Time, _ bool) []Arrival {
			if n > 0 {
				from = from.Add(gap)
			}
			return batch(from, 10, "k")
		},
		Run: runFor(func(rng *rand.Rand) time.Duration {
			return between(rng, 475*time.Millisecond, 525*time.Millisecond)
		}),
		SampleEvery: 250 * time.Millisecond, SamplePick: 2,
	}
}

// tenant is shape 3: tickets of tenant:acme (cap 1) and of others on a provider, openai.
func tenant(name, about string, provider throttle.Limit, seed uint64) Shape {
	provider.Key = "openai"
	return Shape{
		Name: name, About: about,
		Limits: []throttle.Limit{provider, {Key: "tenant:acme", MaxConcurrent: 1}}, Seed: seed, Start: t0,
		Round: func(_ *rand.Rand, n int, from time.Time, _ bool) []Arrival {
			if n > 0 {
				from = from.Add(10 * time.Second)
			}
			var out []Arrival
			for i := range 24 {
				keys := []string{"openai", "tenant:acme"}
				if i%2 == 1 {
					keys = []string{"openai"}
				}
				out = append(out, Arrival{At: from, Keys: keys})
			}
			return out
		},
		Run:         runFor(func(rng *rand.Rand) time.Duration { return lognormal(rng, time.Second, 0.3) }),
		SampleEvery: time.Second, SamplePick: 3,
	}
}

// Shapes are the workloads of the report, each with its own seed.
func Shapes() []Shape {
	return []Shape{
		{
			Name: "rate", About: "5 requests/s, burst 3: a backlog of 60, then 2/s arriving for 10 s",
			Limits: []throttle.Limit{{Key: "api", RequestsPerSecond: 5, Burst: 3}}, Seed: 1, Start: t0,
			Round: func(rng *rand.Rand, n int, from time.Time, short bool) []Arrival {
				if n > 0 {
					from = from.Add(20 * time.Second)
				}
				if short {
					return batch(from, 20, "api")
				}
				return append(batch(from, 60, "api"), poisson(rng, from, 10*time.Second, 2, "api")...)
			},
			Run: runFor(func(rng *rand.Rand) time.Duration {
				return between(rng, 200*time.Millisecond, 400*time.Millisecond)
			}),
			SampleEvery: 500 * time.Millisecond, SamplePick: 3,
		},
		{
			Name: "cap-lognormal", About: "cap 3, runs lognormal (median 1 s, sigma 0.8): a backlog of 30",
			Limits: []throttle.Limit{{Key: "llm", MaxConcurrent: 3}}, Seed: 2, Start: t0,
			Round: func(_ *rand.Rand, n int, from time.Time, _ bool) []Arrival {
				if n > 0 {
					from = from.Add(10 * time.Second)
				}
				return batch(from, 30, "llm")
			},
			Run:         runFor(func(rng *rand.Rand) time.Duration { return lognormal(rng, time.Second, 0.8) }),
			SampleEvery: time.Second, SamplePick: 3,
		},
		{
			Name: "cap-tail", About: "cap 3, runs 90% ~500 ms and 10% ~20 s: a backlog of 30",
			Limits: []throttle.Limit{{Key: "llm", MaxConcurrent: 3}}, Seed: 3, Start: t0,
			Round: func(_ *rand.Rand, n int, from time.Time, _ bool) []Arrival {
				if n > 0 {
					from = from.Add(10 * time.Second)
				}
				return batch(from, 30, "llm")
			},
			Run: runFor(func(rng *rand.Rand) time.Duration {
				if rng.IntN(10) == 0 {
					return lognormal(rng, 20*time.Second, 0.2)
				}
				return lognormal(rng, 500*time.Millisecond, 0.2)
			}),
			SampleEvery: time.Second, SamplePick: 3,
		},
		tenant("tenant-room", "tenant:acme cap 1 behind openai with room (cap 20); half the tickets acme's, runs ~1 s",
			throttle.Limit{MaxConcurrent: 20}, 4),
		tenant("tenant-rate", "tenant:acme cap 1 behind openai at 2 requests/s (burst 1); half acme's, runs ~1 s",
			throttle.Limit{RequestsPerSecond: 2, Burst: 1}, 5),
		idle("idle-5s", 5*time.Second, 6),
		idle("idle-10m", 10*time.Minute, 7),
		outputTokens(),
		allowance(),
	}
}

// outputTokens is shape 5: an output-token budget, reservations of 1,000 output tokens, and runs
// that report 300 to 900.
func outputTokens() Shape {
	return Shape{
		Name:   "output-tokens",
		About:  "6,000 output tokens/min; each reserves 500 in + 1,000 out and reports 500 + 300-900: a backlog of 40",
		Limits: []throttle.Limit{{Key: "anthropic", OutputTokensPerMinute: 6000}}, Seed: 8, Start: t0,
		Round: func(_ *rand.Rand, n int, from time.Time, short bool) []Arrival {
			if n > 0 {
				from = from.Add(time.Minute)
			}
			out := batch(from, 40, "anthropic")
			if short {
				out = out[:12]
			}
			for i := range out {
				out[i].Cost, out[i].Output = 1500, 1000
			}
			return out
		},
		Run: func(rng *rand.Rand, _ Arrival) Outcome {
			output := 300 + rng.Int64N(601)
			return Outcome{RunTime: lognormal(rng, 2*time.Second, 0.4), ActualCost: 500 + output, ActualOutput: output}
		},
		SampleEvery: 2 * time.Second, SamplePick: 3,
	}
}

// allowance is shape 6: 40 requests an hour (wait when spent) at 2/s. At a quarter to the hour 60
// tickets arrive: 40 go in, 20 wait for the reset at the hour. The short form arrives 30 s before.
func allowance() Shape {
	a := throttle.Allowance{Meter: throttle.MeterRequests, Amount: 40, Calendar: throttle.CalendarHour, OnSpent: throttle.OnSpentWait}
	return Shape{
		Name: "allowance", About: "requests=40/hour (wait) at 2/s: 60 arrive at :45, 20 wait for the reset",
		Limits: []throttle.Limit{{Key: "quota", RequestsPerSecond: 2, Allowances: throttle.Allowances{a}}}, Seed: 9, Start: t0,
		Round: func(_ *rand.Rand, _ int, from time.Time, short bool) []Arrival {
			before := 15 * time.Minute
			if short {
				before = 30 * time.Second
			}
			at := from.Truncate(time.Hour).Add(time.Hour - before)
			if at.Before(from) {
				at = at.Add(time.Hour)
			}
			return batch(at, 60, "quota")
		},
		Run:         runFor(func(rng *rand.Rand) time.Duration { return between(rng, 800*time.Millisecond, 1200*time.Millisecond) }),
		SampleEvery: 10 * time.Second, SamplePick: 3,
	}
}
