package dashboard

import (
	"github.com/sluicehq/sluice/internal/words"
	"github.com/sluicehq/sluice/pgqueue"
)

// Words are a ticket's explanation in the words of sluice explain: the same sentences, made by the
// same code, so that the page and the command never say one thing two ways. Sentences start in lower
// case and have no final period (the page adds them); a field that does not apply is left out.
type Words struct {
	// State is what became of a ticket that is not queued: when it was admitted and what it holds,
	// how it finished, or that it was handed back to Temporal as which attempt.
	State string `json:"state,omitempty"`
	// Holds is what holds a queued ticket now, with its figures, the holders that have run longer
	// than any recent run, and the tickets before it that other limits hold back.
	Holds string `json:"holds,omitempty"`
	// Expected is when a queued ticket is expected to be admitted, with its likely range; Refused,
	// that the next claim refuses it and why; Expires, that its deadline comes first.
	Expected string `json:"expected,omitempty"`
	Refused  string `json:"refused,omitempty"`
	Expires  string `json:"expires,omitempty"`
	// Cost is the ticket's reservation: "40,000 in + 500 out".
	Cost string `json:"cost"`
	// Limits are, for a queued ticket, its limits in the order a claim checks them (the
	// explanation's limits).
	Limits []LimitWords `json:"limits,omitempty"`
}

// LimitWords are how one limit stands towards a queued ticket, in sluice explain's words: Room
// ("yes", or the dimension that refuses it), Figures (every dimension the limit sets, with the
// ticket's needs), Ahead (the tickets expected before it, their cost, and those held elsewhere),
// Ready (when it has room for the ticket, with its likely range) and Overdue (its holders that have
// run longer than any recent run, when any).
type LimitWords struct {
	Key     string `json:"key"`
	Room    string `json:"room"`
	Figures string `json:"figures"`
	Ahead   string `json:"ahead"`
	Ready   string `json:"ready"`
	Overdue string `json:"overdue,omitempty"`
}

// wordsOf is the explanation te in words.
func wordsOf(te pgqueue.TicketExplanation) Words {
	t, e := te.Ticket, te.Explanation
	out := Words{Cost: words.CostText(t.Reserved())}
	if e == nil {
		out.State = words.Settled(t)
		return out
	}
	out.Holds, out.Expected, out.Refused, out.Expires = words.Holds(*e, t), words.Expected(*e), words.Refused(*e, t), words.Expires(*e, t)
	sp := words.SpendOf(*e, t)
	for _, l := range e.Limits {
		out.Limits = append(out.Limits, LimitWords{Key: l.Key, Room: words.Room(l), Figures: words.AllFigures(l, sp, e.Now),
			Ahead: words.Ahead(l), Ready: words.Ready(l, e.Now), Overdue: words.Overdue(l, e.Now)})
	}
	return out
}

// ListedTicket is one ticket of a key's waiting list (KeyTickets): pgqueue's KeyTicket, whose fields
// stand at the top of its object, with Words, what the list shows of it in sluice's words.
type ListedTicket struct {
	pgqueue.KeyTicket
	Words ListWords `json:"words"`
}

// ListWords are a listed ticket in the words of sluice tickets: Holds, what holds a queued one now
// ("concurrency of tenant:acme", "tickets ahead in openai", "none"), or the state of one that is
// not queued ("running"); Cost, its reservation ("40,000 in + 500 out").
type ListWords struct {
	Holds string `json:"holds"`
	Cost  string `json:"cost"`
}

// listed is the waiting list ts with its words.
func listed(ts []pgqueue.KeyTicket) []ListedTicket {
	out := make([]ListedTicket, len(ts))
	for i, t := range ts {
		holds := string(t.State)
		if t.State == pgqueue.TicketStateQueued {
			holds = words.WaitWords(t.WaitsFor, t.WaitsOn)
		}
		out[i] = ListedTicket{KeyTicket: t, Words: ListWords{Holds: holds, Cost: words.CostText(t.Reserved())}}
	}
	return out
}
