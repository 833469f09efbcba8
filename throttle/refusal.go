package throttle

import (
	"encoding/json"
	"fmt"
	"time"
)

// Refusal is why Sluice refused a ticket rather than let it wait: the limit (Limit, its key) and
// the allowance of it that is spent (Spent: the allowance, what it had counted in its window, what
// the call needed, money in micro-units, and when it has room again; see Spent.Refuses for why it
// refuses rather than waits). It is the one record of a refusal: a refused ticket's stored outcome
// (pgqueue.TicketRefusal), the detail of the activity's SluiceAllowanceSpent error
// (sluiceactivity.AllowanceSpent, read by sluiceactivity.AsAllowanceSpent), and what the claim that
// refuses the ticket records. Its Error is the activity error's message.
//
// Its JSON is flat, the field names of the Temporal detail since 0.1.0: limit, allowance (in the
// operators' syntax, tokens=50000/day@America/Los_Angeles), meter, currency (money only), used,
// amount (the allowance's), needs, reset_at (zero, left out, when no window will ever have room),
// window_start and window_end (a calendar window's bounds, left out for a rolling allowance),
// deadline (the call's, left out when none), on_spent and refundable (left out when zero), so that
// a workflow compiled against 0.1.0 decodes it. UnmarshalJSON also reads the form 0.1.0 stored as a
// refused ticket's outcome, {"key":..,"spent":{..}}.
//
// A Refusal is a plain value, safe to copy. The zero Refusal is no refusal.
type Refusal struct {
	// Limit is the key of the limit whose allowance is spent ("tenant:free").
	Limit string
	Spent
}

// Error says which allowance of which limit refused the ticket, what was used of it and when it
// resets (Spent.Error), as the activity's error does.
func (r Refusal) Error() string { return "sluice: limit " + r.Limit + ": " + r.Spent.Error() }

// refusalJSON is Refusal's JSON: the Temporal detail's fields since 0.1.0 (limit .. window_end),
// then what 0.1.0 left out, which a decoder of 0.1.0 ignores.
type refusalJSON struct {
	Limit       string    `json:"limit"`
	Allowance   string    `json:"allowance"`
	Meter       Meter     `json:"meter"`
	Currency    string    `json:"currency,omitempty"`
	Used        int64     `json:"used"`
	Amount      int64     `json:"amount"`
	Needs       int64     `json:"needs"`
	ResetAt     time.Time `json:"reset_at,omitzero"`
	WindowStart time.Time `json:"window_start,omitzero"`
	WindowEnd   time.Time `json:"window_end,omitzero"`
	Deadline    time.Time `json:"deadline,omitzero"`
	OnSpent     OnSpent   `json:"on_spent,omitempty"`
	Refundable  int64     `json:"refundable,omitzero"`
}

// MarshalJSON writes r flat (see Refusal).
func (r Refusal) MarshalJSON() ([]byte, error) {
	a := r.Allowance
	return json.Marshal(refusalJSON{Limit: r.Limit, Allowance: a.String(), Meter: a.Meter, Currency: a.Currency,
		Used: r.Used, Amount: a.Amount, Needs: r.Needs, ResetAt: r.ResetAt, WindowStart: r.WindowStart,
		WindowEnd: r.WindowEnd, Deadline: r.Deadline, OnSpent: a.OnSpent, Refundable: r.Refundable})
}

// UnmarshalJSON reads r flat (see Refusal), or in the form 0.1.0 stored ({"key":..,"spent":{..}})
// when b has no allowance member. The allowance is read from its spec (ParseAllowance) and on_spent.
func (r *Refusal) UnmarshalJSON(b []byte) error {
	var in struct {
		refusalJSON
		Key   string `json:"key"`
		Spent *Spent `json:"spent"`
	}
	if err := json.Unmarshal(b, &in); err != nil {
		return err
	}
	if in.Allowance == "" && in.Spent != nil {
		*r = Refusal{Limit: in.Key, Spent: *in.Spent}
		return nil
	}
	var a Allowance
	if in.Allowance != "" {
		parsed, err := ParseAllowance(in.Allowance)
		if err != nil {
			return fmt.Errorf("throttle: refusal of limit %q: allowance: %w", in.Limit, err)
		}
		a = parsed
	}
	a.OnSpent = in.OnSpent
	*r = Refusal{Limit: in.Limit, Spent: Spent{Allowance: a, Used: in.Used, Needs: in.Needs, Refundable: in.Refundable,
		WindowStart: in.WindowStart, WindowEnd: in.WindowEnd, ResetAt: in.ResetAt, Deadline: in.Deadline}}
	return nil
}
