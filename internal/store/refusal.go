package store

import (
	"encoding/json"
	"fmt"

	"github.com/sluicehq/sluice/throttle"
)

// OutcomeRefused marks a ticket a claim refused because an allowance of one of its limits is spent
// (ClaimResult.Refused): its outcome is its throttle.Refusal as JSON, which the worker turns into the
// activity's non-retryable failure with its own failure converter.
const OutcomeRefused = "refused"

// storedRefusal is a throttle.Refusal as stored in a ticket's outcome: its own JSON, and the members "key"
// and "spent" of the form 0.1.0 stored ({"key":..,"spent":{..}}), which is all a replica of 0.1.0
// reads when it delivers a refusal this version stored during a rolling upgrade. Kept for one
// release: the release after 0.2.0 stores the throttle.Refusal alone (see docs/upgrading.md).
type storedRefusal struct{ throttle.Refusal }

// MarshalJSON writes r's throttle.Refusal with the legacy members "key" and "spent".
func (r storedRefusal) MarshalJSON() ([]byte, error) {
	flat, err := r.Refusal.MarshalJSON()
	if err != nil {
		return nil, err
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(flat, &members); err != nil {
		return nil, err
	}
	key, err := json.Marshal(r.Limit)
	if err != nil {
		return nil, err
	}
	spent, err := json.Marshal(r.Spent)
	if err != nil {
		return nil, err
	}
	members["key"], members["spent"] = key, spent
	return json.Marshal(members)
}

// encodeRefusal is r as stored in the ticket's outcome.
func encodeRefusal(r throttle.Refusal) []byte {
	b, _ := json.Marshal(storedRefusal{r}) // plain data: strings, integers and times always encode
	return b
}

// TicketRefusal decodes the throttle.Refusal of a ticket whose OutcomeKind is OutcomeRefused, in either the
// form this version stores or the one 0.1.0 stored.
func TicketRefusal(t Ticket) (throttle.Refusal, error) {
	if t.OutcomeKind != OutcomeRefused {
		return throttle.Refusal{}, fmt.Errorf("sluice: ticket %d was not refused (outcome %q)", t.ID, t.OutcomeKind)
	}
	var r throttle.Refusal
	if err := json.Unmarshal(t.Outcome, &r); err != nil {
		return throttle.Refusal{}, fmt.Errorf("sluice: refusal of ticket %d: %w", t.ID, err)
	}
	return r, nil
}
