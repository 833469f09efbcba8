package throttle

import (
	"iter"
	"time"
)

// Dimension is one of the four rates a Limit may set, each refilling a bucket of State: requests
// (RequestsPerSecond and Burst), tokens in all (TokensPerMinute and TokenBurst), input tokens
// (InputTokensPerMinute and InputTokenBurst) and output tokens (OutputTokensPerMinute and
// OutputTokenBurst). The constants are in the order CheckCost tests them. The zero Dimension is
// DimensionRequests. Limit.Rates is what most callers want.
type Dimension int

// The four dimensions, in the order CheckCost tests them.
const (
	DimensionRequests     Dimension = iota // RequestsPerSecond and Burst, per second
	DimensionTokens                        // TokensPerMinute and TokenBurst, per minute
	DimensionInputTokens                   // InputTokensPerMinute and InputTokenBurst, per minute
	DimensionOutputTokens                  // OutputTokensPerMinute and OutputTokenBurst, per minute
)

// dimensions are the four, in order.
var dimensions = [...]Dimension{DimensionRequests, DimensionTokens, DimensionInputTokens, DimensionOutputTokens}

// dimensionInfo is what differs between the dimensions but their draws (Dimension.Draw): the name,
// the unit the Limit's figure is given in, its fields' names, and the Reason a ticket waits for.
var dimensionInfo = [...]struct {
	name                  string
	per                   time.Duration
	rateField, burstField string
	reason                Reason
}{
	DimensionRequests:     {"requests", time.Second, "RequestsPerSecond", "Burst", ReasonRate},
	DimensionTokens:       {"tokens", time.Minute, "TokensPerMinute", "TokenBurst", ReasonTokens},
	DimensionInputTokens:  {"input_tokens", time.Minute, "InputTokensPerMinute", "InputTokenBurst", ReasonInputTokens},
	DimensionOutputTokens: {"output_tokens", time.Minute, "OutputTokensPerMinute", "OutputTokenBurst", ReasonOutputTokens},
}

func (d Dimension) valid() bool { return d >= 0 && int(d) < len(dimensions) }

// String returns d's snake_case name ("requests", "tokens", "input_tokens", "output_tokens"), as
// Overview's UseOf names it, or "unknown".
func (d Dimension) String() string {
	if !d.valid() {
		return "unknown"
	}
	return dimensionInfo[d].name
}

// Per is the unit of d's figure in a Limit: time.Second for requests (RequestsPerSecond), time.Minute
// for the token budgets (TokensPerMinute and the input and output ones), and 0 for an unknown d.
func (d Dimension) Per() time.Duration {
	if !d.valid() {
		return 0
	}
	return dimensionInfo[d].per
}

// Draw is how much of d's bucket one ticket reserving c takes at admission: 1 for requests, whatever
// its cost; c.Total() for the combined token budget; c.Input and c.Output for the input and output
// budgets. This is the one place the dimensions differ in what they count.
func (d Dimension) Draw(c Cost) int64 {
	switch d {
	case DimensionRequests:
		return 1
	case DimensionInputTokens:
		return c.Input
	case DimensionOutputTokens:
		return c.Output
	}
	return c.Total()
}

// Rate is one dimension's rate and burst in a Limit: so much per unit (Dimension.Per), refilled
// continuously, up to Burst at once. It keeps the figure in the unit the Limit gives it, so that
// PerMinute of a token budget is the Limit's figure exactly; buckets refill at PerSecond. The zero
// Rate is not set (no limit of that kind). A Rate is a plain value, safe to copy.
type Rate struct {
	amount float64       // per per
	per    time.Duration // the unit of amount: time.Second or time.Minute
	burst  float64
}

// IsSet reports whether r limits anything: its rate is above zero.
func (r Rate) IsSet() bool { return r.amount > 0 }

// PerSecond is r's rate per second, at which its bucket refills: RequestsPerSecond, or a token
// budget's figure divided by 60.
func (r Rate) PerSecond() float64 {
	if r.per == time.Minute {
		return r.amount / 60
	}
	return r.amount
}

// PerMinute is r's rate per minute, the unit of the token budgets and of what operators read: a
// token budget's figure exactly, or RequestsPerSecond times 60 (Limit.RequestsPerMinute).
func (r Rate) PerMinute() float64 {
	if r.per == time.Minute {
		return r.amount
	}
	return r.amount * 60
}

// Burst is how much r's bucket holds when full: how much may be drawn at once after an idle spell.
func (r Rate) Burst() float64 { return r.burst }

// Rate is l's rate of dimension d, the zero Rate when l does not set it or d is unknown. Its burst
// is l's as given: call WithDefaults first for the burst that will be used.
func (l Limit) Rate(d Dimension) Rate {
	if !d.valid() {
		return Rate{}
	}
	rate, burst := l.fields(d)
	if *rate <= 0 {
		return Rate{}
	}
	return Rate{amount: *rate, per: d.Per(), burst: *burst}
}

// Rates yields l's four dimensions in the order CheckCost tests them, each with its Rate (the zero
// Rate for one l does not set: Rate.IsSet tells).
func (l Limit) Rates() iter.Seq2[Dimension, Rate] {
	return func(yield func(Dimension, Rate) bool) {
		for _, d := range dimensions {
			if !yield(d, l.Rate(d)) {
				return
			}
		}
	}
}

// fields are l's fields of dimension d, its figure (in d's unit) and its burst. d must be valid.
func (l *Limit) fields(d Dimension) (rate, burst *float64) {
	switch d {
	case DimensionRequests:
		return &l.RequestsPerSecond, &l.Burst
	case DimensionTokens:
		return &l.TokensPerMinute, &l.TokenBurst
	case DimensionInputTokens:
		return &l.InputTokensPerMinute, &l.InputTokenBurst
	}
	return &l.OutputTokensPerMinute, &l.OutputTokenBurst
}

// Bucket is s's bucket of dimension d, to read or set: Requests, Tokens, InputTokens or OutputTokens.
// It is nil for an unknown d.
func (s *State) Bucket(d Dimension) *Bucket {
	switch d {
	case DimensionRequests:
		return &s.Requests
	case DimensionTokens:
		return &s.Tokens
	case DimensionInputTokens:
		return &s.InputTokens
	case DimensionOutputTokens:
		return &s.OutputTokens
	}
	return nil
}

// refund is what r gives back to d's bucket: nothing to requests, Refund to the combined token
// budget, and its input and output parts to theirs.
func (r Released) refund(d Dimension) float64 {
	switch d {
	case DimensionTokens:
		return r.Refund
	case DimensionInputTokens:
		return r.Refund - r.RefundOutput
	case DimensionOutputTokens:
		return r.RefundOutput
	}
	return 0
}

// reason is the Reason a ticket waits for when d's bucket has too little.
func (d Dimension) reason() Reason { return dimensionInfo[d].reason }
