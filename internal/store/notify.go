package store

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// Notification kinds carried on NotifyChannel.
const (
	kindWork     = "work"     // a ticket was enqueued, or a limit changed: claimers look again
	kindReleased = "released" // completions made room: claimers that wait for room look again
	kindAdmitted = "admitted" // tickets were admitted for the owner named in the argument
)

// Topic is what a subscriber waits for.
type Topic struct {
	kind, arg string
}

// TopicWork fires when a ticket is enqueued, a limit changes (raised, resumed) or a ticket is put
// back in line or handed back: what every claimer waits for.
func TopicWork() Topic { return Topic{kind: kindWork} }

// TopicReleased fires when completions released their limits: what a claimer waits for when its last
// claim left tickets waiting for room (ClaimResult.WaitsOnRelease). It fires at every committed batch
// of completions, so a claimer with nothing waiting for room ignores it rather than claim in vain.
func TopicReleased() Topic { return Topic{kind: kindReleased} }

// TopicAdmitted fires when tickets of owner were admitted: what the owner waits for.
func TopicAdmitted(owner string) Topic { return Topic{kind: kindAdmitted, arg: owner} }

// Notifier delivers the queue's notifications to subscribers over one dedicated connection. A
// notification is a wake-up, not a message: several coalesce into one, and subscribers must also poll,
// since notifications are lost while the connection is down (Notifier reconnects by itself and wakes
// every subscriber when it does, so nothing waits for a poll after an outage). Create it with
// Queue.NewNotifier, run Run in a goroutine, and Subscribe from anywhere; it is safe for concurrent use.
type Notifier struct {
	q      *Queue
	logger *slog.Logger

	listen Listen

	mu   sync.Mutex
	subs map[Topic]map[chan struct{}]struct{}
	ids  map[string]*notifiedIDs // by subscribed owner: the IDs its admitted notifications named
	up   chan struct{}           // closed when the first LISTEN is in place
	once sync.Once
}

// notifiedIDs are the ticket IDs notifications named for one owner since it last read them, and
// whether some may have been missed.
type notifiedIDs struct {
	ids    []int64
	missed bool
	woken  bool // a notification named no IDs: tickets were admitted for a take
}

// maxNotifiedIDs bounds the IDs kept for one owner between its reads: past it they are dropped and
// counted as missed, and the owner reads all its running tickets instead.
const maxNotifiedIDs = 100_000

// NewNotifier returns a Notifier for the queue's schema. logger may be nil.
func (q *Queue) NewNotifier(logger *slog.Logger) *Notifier {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Notifier{q: q, logger: logger, subs: map[Topic]map[chan struct{}]struct{}{}, ids: map[string]*notifiedIDs{}, up: make(chan struct{})}
}

// Listen is how a Notifier hears the queue's notifications. The zero value listens on a connection
// taken from the queue's pool (and kept out of it).
type Listen struct {
	// URL, when set, is the connection string of a connection of its own the Notifier listens on, in
	// place of one from the pool: a direct connection to Postgres when the pool goes through a pooler
	// in transaction mode, where LISTEN does not work.
	URL string
	// Off stops the Notifier from listening at all: subscribers then hear nothing, and wait for their
	// own polls. Listening is closed at once.
	Off bool
}

// WithListen sets how n listens, before Run; it returns n.
func (n *Notifier) WithListen(l Listen) *Notifier {
	n.listen = l
	return n
}

// Subscribe returns a channel that receives a value (coalesced, never blocking the notifier) each time
// topic fires, and a function that ends the subscription.
func (n *Notifier) Subscribe(topic Topic) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	n.mu.Lock()
	if n.subs[topic] == nil {
		n.subs[topic] = map[chan struct{}]struct{}{}
	}
	n.subs[topic][ch] = struct{}{}
	if topic.kind == kindAdmitted && n.ids[topic.arg] == nil {
		// Whatever was named before the subscription was not kept: read and take everything once.
		n.ids[topic.arg] = &notifiedIDs{missed: true, woken: true}
	}
	n.mu.Unlock()
	return ch, func() {
		n.mu.Lock()
		delete(n.subs[topic], ch)
		if len(n.subs[topic]) == 0 {
			delete(n.subs, topic)
			if topic.kind == kindAdmitted {
				delete(n.ids, topic.arg)
			}
		}
		n.mu.Unlock()
	}
}

// NotifiedIDs returns and forgets what owner's admitted notifications said since the last call
// (owner subscribed to TopicAdmitted): the IDs of its tickets that claims moved straight to running;
// whether some may have been missed (the notifier was not listening for a while, or too many piled
// up: the owner then reads all its running tickets, Queue.RunningTickets with nil IDs); and whether a
// notification named none (tickets were admitted for a take, TakeAdmitted).
func (n *Notifier) NotifiedIDs(owner string) (ids []int64, missed, woken bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	p := n.ids[owner]
	if p == nil {
		return nil, false, false
	}
	ids, missed, woken = p.ids, p.missed, p.woken
	p.ids, p.missed, p.woken = nil, false, false
	return ids, missed, woken
}

// named records the IDs an admitted notification named for owner, if owner is subscribed; missed
// says the notification named IDs that could not be read.
func (n *Notifier) named(owner string, ids []int64, missed bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	p := n.ids[owner]
	switch {
	case p == nil:
	case missed || len(p.ids)+len(ids) > maxNotifiedIDs:
		p.ids, p.missed = nil, true
	case ids == nil:
		p.woken = true
	default:
		p.ids = append(p.ids, ids...)
	}
}

// Listening is closed once the notifier has started listening and has woken every subscriber of
// the moment once, for tests and start-up ordering.
func (n *Notifier) Listening() <-chan struct{} { return n.up }

func (n *Notifier) fire(topic Topic) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for ch := range n.subs[topic] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

func (n *Notifier) fireAll() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, p := range n.ids {
		p.missed, p.woken = true, true // notifications sent while nobody listened are lost
	}
	for _, set := range n.subs {
		for ch := range set {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
}

// Run listens until ctx is done, reconnecting with backoff after errors. It returns ctx's error.
func (n *Notifier) Run(ctx context.Context) error {
	if n.listen.Off {
		n.once.Do(func() { close(n.up) })
		<-ctx.Done()
		return ctx.Err()
	}
	backoff := 100 * time.Millisecond
	for {
		err := n.listenOnce(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		n.logger.WarnContext(ctx, "sluice: notification listener lost its connection; reconnecting", "error", err, "backoff", backoff)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// connect returns the connection to listen on: its own when Listen.URL is set, else one taken from
// the pool and kept out of it, since its session state (LISTEN) must not go back to the pool.
func (n *Notifier) connect(ctx context.Context) (*pgx.Conn, error) {
	if n.listen.URL != "" {
		return pgx.Connect(ctx, n.listen.URL)
	}
	pc, err := n.q.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	return pc.Hijack(), nil
}

func (n *Notifier) listenOnce(ctx context.Context) error {
	conn, err := n.connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, `LISTEN `+NotifyChannel); err != nil {
		return err
	}
	// Anything sent while we were not listening is lost: wake everyone to poll once. Listening is
	// closed after that first wake, so that whoever waits for it finds the wake already delivered.
	n.fireAll()
	n.once.Do(func() { close(n.up) })
	prefix := n.q.opts.Schema + "|"
	for {
		msg, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		payload, ok := strings.CutPrefix(msg.Payload, prefix)
		if !ok {
			continue
		}
		kind, arg, ok := strings.Cut(payload, "|")
		if !ok {
			continue
		}
		switch kind {
		case kindWork, kindReleased:
			n.fire(Topic{kind: kind})
		case kindAdmitted:
			owner, ids, ok := parseAdmitted(arg)
			n.named(owner, ids, !ok)
			n.fire(Topic{kind: kindAdmitted, arg: owner})
		}
	}
}

// parseAdmitted splits an admitted notification's argument into its owner and the IDs it names (nil
// for a wake alone): "owner", or "owner|ids:1,2,3". ok is false when the ID list is malformed.
func parseAdmitted(arg string) (owner string, ids []int64, ok bool) {
	i := strings.LastIndex(arg, idsMark)
	if i < 0 {
		return arg, nil, true
	}
	owner = arg[:i]
	for f := range strings.SplitSeq(arg[i+len(idsMark):], ",") {
		id, err := strconv.ParseInt(f, 10, 64)
		if err != nil || id <= 0 {
			return owner, nil, false
		}
		ids = append(ids, id)
	}
	return owner, ids, true
}

// ClaimWaiter is what a claimer waits on between claims: work, and completions' releases when its
// last claim left tickets waiting for room. Create it with Notifier.ClaimWaiter and Close it when done.
type ClaimWaiter struct {
	work, released <-chan struct{}
	stops          []func()
}

// ClaimWaiter subscribes a claimer to TopicWork and TopicReleased.
func (n *Notifier) ClaimWaiter() *ClaimWaiter {
	work, stopWork := n.Subscribe(TopicWork())
	released, stopReleased := n.Subscribe(TopicReleased())
	return &ClaimWaiter{work: work, released: released, stops: []func(){stopWork, stopReleased}}
}

// Wait waits up to d for work, or, when onRelease (the last claim's WaitsOnRelease), for completions'
// releases. Other releases are ignored: no ticket of the last claim waits for room, so claiming again
// would find what it found. It returns false when ctx is done.
func (w *ClaimWaiter) Wait(ctx context.Context, onRelease bool, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-w.work:
			return true
		case <-w.released:
			if onRelease {
				return true
			}
		case <-t.C:
			return true
		}
	}
}

// Close unsubscribes.
func (w *ClaimWaiter) Close() {
	for _, stop := range w.stops {
		stop()
	}
}
