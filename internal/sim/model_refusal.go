package sim

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/throttle"
)

// Refundable is what the tickets in flight on key, counted by allowance a in the window of now, may
// still give back when they report their usage: their reservations of a's meter (a requests
// allowance gives nothing back), at most what a has counted.
func (m *Model) Refundable(key string, a throttle.Allowance, now time.Time) int64 {
	if a.Meter == throttle.MeterRequests {
		return 0
	}
	k := m.Keys[key]
	var n int64
	for _, t := range m.Tickets {
		// A completed ticket counts until its release is folded, whether its row is kept for
		// delivery (finished) or was deleted with its completion (gone).
		if t.State != Admitted && t.State != Running && !k.isPending(t) {
			continue
		}
		if !slices.Contains(t.Charged[key], a.Key()) {
			continue
		}
		if a.Calendar != "" {
			if start, _ := a.Window(now); t.AdmittedAt.Before(start) {
				continue
			}
		}
		n += a.Of(t.Spend())
	}
	return min(n, a.Used(k.state(a).s, now))
}

// isPending reports whether t's release waits in k's allowance ledger.
func (k *Key) isPending(t *Ticket) bool {
	return slices.ContainsFunc(k.pendingSpend, func(r release) bool { return r.t == t })
}

// JustifyRefusal returns an error unless the model, too, refuses t at now for good on an allowance:
// one of t's allowances has no room, and will have none before t's deadline (or never, or it
// refuses), even if every ticket in flight gave back all it reserved. Any one that does justifies the
// refusal: the engine names the one whose refusal lifts last, which need not be the first.
func (m *Model) JustifyRefusal(t *Ticket, now time.Time) error {
	var first error
	for _, key := range t.Keys {
		k := m.Keys[key]
		if k == nil {
			continue
		}
		for _, a := range k.Limit.Allowances {
			st := k.state(a).s
			need := a.Of(t.Spend())
			d := a.Check(st, now, need)
			if d.OK() {
				continue
			}
			final := a.OnSpent == throttle.OnSpentRefuse || d.RetryAt.IsZero() ||
				(!t.Deadline.IsZero() && !t.Deadline.After(d.RetryAt))
			if !final {
				continue
			}
			if used := a.Used(st, now) - m.Refundable(key, a, now); need <= a.Amount && used < a.Amount && need <= a.Amount-used {
				if first == nil {
					first = fmt.Errorf("refusal of ticket #%d (id %d) at %s by allowance %s of %q ignores pending refunds: "+
						"used %d, of which %d may come back, needs %d of %d", t.Index, t.ID, now.Format(time.RFC3339), a, key,
						a.Used(st, now), m.Refundable(key, a, now), need, a.Amount)
				}
				continue
			}
			return nil
		}
	}
	if first != nil {
		return first
	}
	return fmt.Errorf("refusal of ticket #%d (id %d) at %s: no allowance of %v refuses it for good", t.Index, t.ID,
		now.Format(time.RFC3339), t.Keys)
}

// Describe is a one-line summary of the model's limits, for a failure's report.
func (m *Model) Describe(now time.Time) string {
	var b strings.Builder
	keys := make([]string, 0, len(m.Keys))
	for k := range m.Keys {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, key := range keys {
		k := m.Keys[key]
		fmt.Fprintf(&b, "%s: inflight %d/%d tokens %d", key, k.State.InflightCount, k.Limit.MaxConcurrent, k.State.InflightTokens)
		for _, a := range k.Limit.Allowances {
			fmt.Fprintf(&b, " [%s used %d]", a, a.Used(k.state(a).s, now))
		}
		b.WriteString("; ")
	}
	return b.String()
}
