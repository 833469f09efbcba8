package pgqueue

import (
	"encoding/json"
	"fmt"

	"github.com/sluicehq/sluice/throttle"
)

// OutcomeRefused marks a ticket a claim refused because an allowance of one of its limits is spent
// (ClaimResult.Refused): its outcome is its Refusal as JSON, which the worker turns into the
// activity's non-retryable failure with its own failure converter.
const OutcomeRefused = "refused"

// Refusal is why a claim refused a ticket: the limit and its spent allowance (what it counted, and
// when it resets).
type Refusal struct {
	Key   string         `json:"key"`
	Spent throttle.Spent `json:"spent"`
}

// encode is r as stored in the ticket's outcome.
func (r Refusal) encode() []byte {
	b, _ := json.Marshal(r) // plain data: strings, integers and times always encode
	return b
}

// Error says which allowance of which limit refused the ticket, what was used of it and when it
// resets.
func (r Refusal) Error() string { return "sluice: limit " + r.Key + ": " + r.Spent.Error() }

// TicketRefusal decodes the Refusal of a ticket whose OutcomeKind is OutcomeRefused.
func TicketRefusal(t Ticket) (Refusal, error) {
	if t.OutcomeKind != OutcomeRefused {
		return Refusal{}, fmt.Errorf("sluice: ticket %d was not refused (outcome %q)", t.ID, t.OutcomeKind)
	}
	var r Refusal
	if err := json.Unmarshal(t.Outcome, &r); err != nil {
		return Refusal{}, fmt.Errorf("sluice: refusal of ticket %d: %w", t.ID, err)
	}
	return r, nil
}
