// Package faultproxy is a TCP proxy between a Postgres client (a pool of Sluice's) and the server, for
// tests of what happens when a statement's outcome is uncertain. It reads the wire protocol as it
// passes, round trip by round trip (the client's messages up to a Sync or a simple Query, the server's
// answer up to its ReadyForQuery), and, when armed, drops the connection at a chosen point: before a
// round trip reaches the server, or after it has run there (a COMMIT included) but before its answer
// reaches the client. It can also delay answers and reset every connection at once.
//
// A fault names the round trip it hits by what the client sent (its statements, and the statements
// of the transaction it ends), so a test can drop, say, the answer to the COMMIT of a claim that
// admitted tickets, whatever else the pool is doing.
package faultproxy

import (
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"
)

// Point is where in a round trip a fault drops the connection.
type Point int

const (
	// BeforeSend drops the connection before the round trip reaches the server: nothing of it runs.
	BeforeSend Point = iota
	// AfterRun lets the round trip run on the server to its end (its ReadyForQuery: a COMMIT in it
	// has committed, an implicit transaction too), then drops the connection before any of its
	// answer reaches the client, which hears a broken connection.
	AfterRun
)

// RoundTrip is what the client sent in one round trip.
type RoundTrip struct {
	// Statements are the SQL texts of the statements it runs, in order (a prepared statement's text
	// from its Parse, however long ago that was).
	Statements []string
	// Tx are the statements of the transaction under way, from its BEGIN to this round trip's
	// statements included; empty outside an explicit transaction.
	Tx []string
}

// Commits reports whether the round trip commits a transaction.
func (r RoundTrip) Commits() bool {
	for _, s := range r.Statements {
		if isStatement(s, "commit") {
			return true
		}
	}
	return false
}

// Contains reports whether one of the round trip's statements contains sub.
func (r RoundTrip) Contains(sub string) bool { return anyContains(r.Statements, sub) }

// TxContains reports whether one of the statements of the transaction under way contains sub.
func (r RoundTrip) TxContains(sub string) bool { return anyContains(r.Tx, sub) }

func anyContains(ss []string, sub string) bool {
	for _, s := range ss {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

func isStatement(sql, word string) bool {
	return strings.EqualFold(strings.TrimRight(strings.TrimSpace(sql), ";"), word)
}

// Fault is an armed fault: it drops the connection of the first round trip its match accepts, once.
type Fault struct {
	at    Point
	match func(RoundTrip) bool
	fired chan struct{}
	once  sync.Once
}

// Fired is closed once the fault has dropped a connection.
func (f *Fault) Fired() <-chan struct{} { return f.fired }

// AfterStatements returns a match that accepts the round trip holding the nth statement sent through
// the proxy from now on: "drop after the nth statement". pgx's liveness ping ("-- ping", which pgxpool
// sends when it hands out a connection idle for over a second, so only on a slow enough machine) is
// not a statement of the caller's and is not counted.
func AfterStatements(n int) func(RoundTrip) bool {
	var mu sync.Mutex
	seen := 0
	return func(r RoundTrip) bool {
		mu.Lock()
		defer mu.Unlock()
		before := seen
		for _, sql := range r.Statements {
			if strings.TrimSpace(sql) != pgxPing {
				seen++
			}
		}
		return before < n && seen >= n
	}
}

// pgxPing is the statement of pgx's PgConn.Ping.
const pgxPing = "-- ping"

// Proxy forwards connections from its address to a Postgres server. It is safe for concurrent use.
type Proxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	conns  map[*session]struct{}
	faults []*Fault
	delay  time.Duration
	closed bool
	wg     sync.WaitGroup
}

// Start listens on a free loopback port and forwards each connection to target (host:port).
func Start(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen: %w", err)
	}
	p := &Proxy{ln: ln, target: target, conns: map[*session]struct{}{}}
	p.wg.Go(p.accept)
	return p, nil
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Arm arms a fault at point for the first round trip match accepts (nil: the next round trip).
func (p *Proxy) Arm(at Point, match func(RoundTrip) bool) *Fault {
	if match == nil {
		match = func(RoundTrip) bool { return true }
	}
	f := &Fault{at: at, match: match, fired: make(chan struct{})}
	p.mu.Lock()
	p.faults = append(p.faults, f)
	p.mu.Unlock()
	return f
}

// Disarm removes every armed fault that has not fired.
func (p *Proxy) Disarm() {
	p.mu.Lock()
	p.faults = nil
	p.mu.Unlock()
}

// SetDelay holds each answer back by d before it is forwarded; 0 forwards at once.
func (p *Proxy) SetDelay(d time.Duration) {
	p.mu.Lock()
	p.delay = d
	p.mu.Unlock()
}

// Reset drops every open connection, as a network failure or a server restart would.
func (p *Proxy) Reset() {
	p.mu.Lock()
	conns := make([]*session, 0, len(p.conns))
	for s := range p.conns {
		conns = append(conns, s)
	}
	p.mu.Unlock()
	for _, s := range conns {
		s.close()
	}
}

// Close stops listening, drops every connection and waits for the proxy's goroutines.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	err := p.ln.Close()
	p.Reset()
	p.wg.Wait()
	return err
}

// take returns the first armed fault at point that accepts r, disarming it. A round trip without
// statements (the startup, a lone Sync) is never a fault's.
func (p *Proxy) take(at Point, r RoundTrip) *Fault {
	if len(r.Statements) == 0 {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, f := range p.faults {
		if f.at == at && f.match(r) {
			p.faults = append(p.faults[:i], p.faults[i+1:]...)
			return f
		}
	}
	return nil
}

func (p *Proxy) currentDelay() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.delay
}

func (p *Proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s := &session{p: p, client: c}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = c.Close()
			return
		}
		p.conns[s] = struct{}{}
		p.mu.Unlock()
		p.wg.Go(s.run)
	}
}

// URL returns dbURL with its host and port replaced by the proxy's.
func (p *Proxy) URL(dbURL string) string {
	u, err := url.Parse(dbURL)
	if err != nil {
		return dbURL
	}
	u.Host = p.Addr()
	return u.String()
}
