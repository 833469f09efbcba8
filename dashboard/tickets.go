package dashboard

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice/pgqueue"
	"github.com/sluicehq/sluice/throttle"
)

// The waiting list's sizes: DefaultTickets when max is not given, at most MaxTickets.
const (
	DefaultTickets = 100
	MaxTickets     = 1000
)

// MaxExplained is the most tickets GET api/explain?workflow=... explains, the newest first.
const MaxExplained = 20

// maxWorkflowID bounds the workflow and activity IDs api/explain takes: Temporal's own limit on an
// ID's length is 1000 bytes by default.
const maxWorkflowID = 1000

// KeyTickets is GET api/tickets?key=K[&max=N]: the tickets that draw on the limit K (pgqueue's
// Tickets, in any line): first those queued, in the order they are expected to be admitted, each with
// its place among them and what holds it now (waits_for, waits_on, and in words, words.holds); then
// those running and admitted.
// At most max of them (1 to MaxTickets; DefaultTickets when not given). Now is the database's clock:
// a queued ticket has waited now less its enqueued_at.
//
// A bad parameter is answered 400 with {"error": "..."} naming it and its value; a key that is not a
// limit, 404.
type KeyTickets struct {
	Key     string         `json:"key"`
	Now     time.Time      `json:"now"`
	Max     int            `json:"max"`
	Tickets []ListedTicket `json:"tickets"`
}

// Explained is GET api/explain: api/explain?id=N explains ticket N; api/explain?workflow=W, with
// activity=A and namespace=NS to narrow it, the tickets of that workflow (pgqueue's FindTickets: any
// state, the newest first, at most MaxExplained). Each is a pgqueue.TicketExplanation (ticket, and
// explanation while it is queued: throttle.Explanation, why it waits limit by limit and when it is
// expected to be admitted), the same in sluice explain's words (words), and the link to its workflow
// in Temporal's UI when Options.TemporalUIURL is set.
//
// A bad parameter is answered 400 with {"error": "..."} naming it and its value; an unknown ticket,
// or a workflow with no ticket (a ticket is deleted once its outcome reaches Temporal), 404.
type Explained struct {
	Tickets []ExplainedTicket `json:"tickets"`
}

// ExplainedTicket is one ticket of Explained: its explanation; Words, the explanation in the
// sentences sluice explain prints, which the page shows; and TemporalURL, the link to its
// workflow in Temporal's UI (Options.TemporalUIURL filled in), left out when no template is set or
// the ticket lacks a value the template names.
//
// Allowances are, by limit key, the allowances of the limits a queued ticket draws on, each with what
// it counted, what remains, when it resets and what the ticket needs of it; left out when none of
// its limits has allowances. A limit that waits for a spent allowance names it in its spent
// (throttle.LimitWait), and the explanation's refused is the spent allowance for which the next claim
// refuses the ticket. Refusal is why a claim refused a finished ticket (outcome_kind "refused"): the
// limit and its spent allowance, as the detail of the error its activity fails with (throttle.Refusal).
type ExplainedTicket struct {
	pgqueue.TicketExplanation
	Words       Words                     `json:"words"`
	TemporalURL string                    `json:"temporal_url,omitempty"`
	Allowances  map[string][]AllowanceUse `json:"allowances,omitempty"`
	Refusal     *pgqueue.Refusal          `json:"refusal,omitempty"`
}

// onlyParams refuses a query that names a parameter other than names, or one more than once.
func onlyParams(v url.Values, names ...string) error {
	for name, vals := range v {
		if !slices.Contains(names, name) {
			return fmt.Errorf("unknown query parameter %q: use %s", name, strings.Join(names, ", "))
		}
		if len(vals) > 1 {
			return fmt.Errorf("query parameter %s is given %d times", name, len(vals))
		}
	}
	return nil
}

// parseTickets reads and checks the query of GET api/tickets: the key and the most tickets.
func parseTickets(v url.Values) (string, int, error) {
	if err := onlyParams(v, "key", "max"); err != nil {
		return "", 0, err
	}
	key, n := v.Get("key"), DefaultTickets
	if !v.Has("key") {
		return "", 0, errors.New("key is required: api/tickets?key=...")
	}
	if err := throttle.ValidateKey(key); err != nil {
		return "", 0, fmt.Errorf("key: %w", err)
	}
	if s := v.Get("max"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil || n < 1 || n > MaxTickets {
			return "", 0, fmt.Errorf("max must be an integer from 1 to %d, got %q", MaxTickets, s)
		}
	}
	return key, n, nil
}

func (h *handler) serveTickets(w http.ResponseWriter, r *http.Request) {
	key, n, err := parseTickets(r.URL.Query())
	if err != nil {
		h.fail(w, http.StatusBadRequest, err)
		return
	}
	ctx, cancel := h.ctx(r)
	defer cancel()
	ts, now, err := h.q.Tickets(ctx, key, n)
	if err != nil {
		h.failKey(w, err)
		return
	}
	writeJSON(w, http.StatusOK, KeyTickets{Key: key, Now: now, Max: n, Tickets: listed(ts)})
}

// parseExplain reads and checks the query of GET api/explain: a ticket's ID, or a workflow to find.
func parseExplain(v url.Values) (int64, pgqueue.TicketQuery, error) {
	var tq pgqueue.TicketQuery
	if err := onlyParams(v, "id", "workflow", "activity", "namespace"); err != nil {
		return 0, tq, err
	}
	switch {
	case v.Has("id") && v.Has("workflow"):
		return 0, tq, errors.New("give id or workflow, not both")
	case v.Has("id"):
		if v.Has("activity") || v.Has("namespace") {
			return 0, tq, errors.New("activity and namespace narrow a workflow: give them with workflow, not id")
		}
		id, err := strconv.ParseInt(v.Get("id"), 10, 64)
		if err != nil || id < 1 {
			return 0, tq, fmt.Errorf("id must be a ticket ID, an integer from 1, got %q", v.Get("id"))
		}
		return id, tq, nil
	case !v.Has("workflow"):
		return 0, tq, errors.New("id or workflow is required: api/explain?id=... or api/explain?workflow=...[&activity=...]")
	}
	tq = pgqueue.TicketQuery{WorkflowID: v.Get("workflow"), ActivityID: v.Get("activity"), Namespace: v.Get("namespace"), Max: MaxExplained}
	if tq.WorkflowID == "" {
		return 0, tq, errors.New(`workflow must not be empty, got ""`)
	}
	for _, p := range []struct{ name, value string }{{"workflow", tq.WorkflowID}, {"activity", tq.ActivityID}, {"namespace", tq.Namespace}} {
		if !utf8.ValidString(p.value) || len(p.value) > maxWorkflowID {
			return 0, tq, fmt.Errorf("%s must be valid UTF-8 of at most %d bytes, got %.100q", p.name, maxWorkflowID, p.value)
		}
	}
	return 0, tq, nil
}

func (h *handler) serveExplain(w http.ResponseWriter, r *http.Request) {
	id, tq, err := parseExplain(r.URL.Query())
	if err != nil {
		h.fail(w, http.StatusBadRequest, err)
		return
	}
	ctx, cancel := h.ctx(r)
	defer cancel()
	ids := []int64{id}
	if id == 0 {
		ts, err := h.q.FindTickets(ctx, tq)
		if err != nil {
			h.fail(w, http.StatusInternalServerError, err)
			return
		}
		ids = ids[:0]
		for _, t := range ts {
			ids = append(ids, t.ID)
		}
	}
	out := Explained{Tickets: []ExplainedTicket{}}
	for _, id := range ids {
		e, err := h.q.Explain(ctx, id)
		if errors.Is(err, pgqueue.ErrNotFound) && tq.WorkflowID != "" {
			continue // found, then its outcome reached Temporal: it is gone
		}
		if errors.Is(err, pgqueue.ErrNotFound) {
			h.fail(w, http.StatusNotFound, fmt.Errorf("no ticket %d (a ticket is deleted once its outcome reaches Temporal)", id))
			return
		}
		if err != nil {
			h.fail(w, http.StatusInternalServerError, err)
			return
		}
		out.Tickets = append(out.Tickets, ExplainedTicket{TicketExplanation: e, Words: wordsOf(e), TemporalURL: temporalURL(h.opts.TemporalUIURL, e.Ticket),
			Allowances: allowanceUses(e.Ticket, e.Explanation), Refusal: refusalOf(e.Ticket)})
	}
	if len(out.Tickets) == 0 {
		h.fail(w, http.StatusNotFound, fmt.Errorf("no ticket of %s (a ticket is deleted once its outcome reaches Temporal)", describeQuery(tq)))
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// describeQuery names the workflow (and activity, and namespace) tq looks for.
func describeQuery(tq pgqueue.TicketQuery) string {
	s := fmt.Sprintf("workflow %q", tq.WorkflowID)
	if tq.ActivityID != "" {
		s += fmt.Sprintf(", activity %q", tq.ActivityID)
	}
	if tq.Namespace != "" {
		s += fmt.Sprintf(" in namespace %q", tq.Namespace)
	}
	return s
}
