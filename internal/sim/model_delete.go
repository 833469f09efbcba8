package sim

// InUse counts the tickets that still need key: queued, admitted or running, and naming it as their
// line or as another of their limits.
func (m *Model) InUse(key string) int {
	n := 0
	for _, t := range m.Tickets {
		if (t.State == Queued || t.State == Admitted || t.State == Running) && contains(t.Keys, key) {
			n++
		}
	}
	return n
}

// Delete deletes key as pgqueue.Queue.DeleteLimit is documented to: an unknown key (known false) and
// one that unfinished tickets name (inUse, how many) are refused and change nothing. Otherwise the key
// and all its state go (buckets, pause, allowance counts, pending releases), and so do the returned
// tickets kept for a retry's place in its line. Created again (Configure), it starts afresh.
func (m *Model) Delete(key string) (inUse int, known bool) {
	if m.Keys[key] == nil {
		return 0, false
	}
	if n := m.InUse(key); n > 0 {
		return n, true
	}
	delete(m.Keys, key)
	for _, t := range m.Tickets {
		if t.State == Returned && t.Keys[0] == key {
			t.State = Gone
		}
	}
	return 0, true
}

// Knows reports whether every one of keys is a limit: an enqueue naming another fails with
// pgqueue.ErrUnknownLimit and writes nothing.
func (m *Model) Knows(keys []string) bool {
	for _, k := range keys {
		if m.Keys[k] == nil {
			return false
		}
	}
	return true
}

func contains(keys []string, key string) bool {
	for _, k := range keys {
		if k == key {
			return true
		}
	}
	return false
}
