package throttle

import (
	"math"
	"time"
)

// Bucket is the state of a continuously refilled token bucket: Level tokens were available at At.
// Rate and burst are not stored in it, so that a limit changed at runtime applies to the existing
// state at once. Level may be negative: that is debt, from a ticket larger than the burst or from
// actual usage above the reservation, and it is paid back by the refill before anything else is
// admitted. The zero Bucket is full.
type Bucket struct {
	Level float64   `json:"level"`
	At    time.Time `json:"at,omitzero"`
}

// Refill returns the bucket as of now, with rate tokens per second added since At and the level capped
// at burst. A now before At (a clock that went backwards, or a claimer whose clock read is older than
// the last writer's) adds nothing: refill is only ever conservative.
func (b Bucket) Refill(now time.Time, rate, burst float64) Bucket {
	if b.At.IsZero() {
		return Bucket{Level: burst, At: now}
	}
	if now.After(b.At) {
		b.Level = math.Min(burst, b.Level+rate*now.Sub(b.At).Seconds())
		b.At = now
	}
	if b.Level > burst { // burst lowered at runtime
		b.Level = burst
	}
	return b
}

// need is the level a take of n requires: n itself, or a full bucket for a take larger than the
// burst, so that such a take is admitted (into debt) rather than starved.
func need(n, burst float64) float64 { return math.Min(n, burst) }

// Allows reports whether n tokens may be taken from the refilled bucket b.
func (b Bucket) Allows(n, burst float64) bool { return n <= 0 || b.Level >= need(n, burst) }

// Take returns b with n tokens taken. It does not check Allows.
func (b Bucket) Take(n float64) Bucket { b.Level -= n; return b }

// Give returns b with n tokens given back (a reservation larger than the real usage) or, for a
// negative n, taken as debt (usage above the reservation). The level stays at most burst, and debt
// taken so goes at most one burst below empty (-burst), or no lower than the level already is: a
// report far above what any call uses (a bug in what reported it) then holds the limit for at most
// the time two bursts take to refill, rather than for ever.
func (b Bucket) Give(n, burst float64) Bucket {
	if n < 0 {
		b.Level = math.Max(b.Level+n, math.Min(b.Level, -burst))
		return b
	}
	b.Level = math.Min(burst, b.Level+n)
	return b
}

// ReadyAt returns the earliest instant, not before b.At, at which the refilled bucket allows n
// tokens. A zero rate with too little in the bucket never refills: ReadyAt returns the zero time.
func (b Bucket) ReadyAt(n, rate, burst float64) time.Time {
	short := need(n, burst) - b.Level
	if n <= 0 || short <= 0 {
		return b.At
	}
	if rate <= 0 {
		return time.Time{}
	}
	// Round up to the microsecond (Postgres' resolution), capped so that a glacial rate cannot
	// overflow a Duration.
	us := math.Min(math.Ceil(short/rate*1e6), maxWait.Seconds()*1e6)
	t := b.At.Add(time.Duration(us) * time.Microsecond)
	// Floating-point refill arithmetic may fall a hair short at t: step until a take at t succeeds,
	// so that a claim at ReadyAt is never refused.
	for i := 0; i < 16 && !b.Refill(t, rate, burst).Allows(n, burst) && us < maxWait.Seconds()*1e6; i++ {
		t = t.Add(time.Microsecond)
	}
	return t
}

// maxWait caps ReadyAt's horizon: a limit that needs longer than this to refill is, for any caller,
// never.
const maxWait = 100 * 365 * 24 * time.Hour
