package faultproxy

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"
)

// session is one client connection and its connection to the server.
type session struct {
	p      *Proxy
	client net.Conn
	server net.Conn

	mu      sync.Mutex
	pending []RoundTrip // sent to the server, not yet answered to their end
	done    bool
}

func (s *session) close() {
	s.mu.Lock()
	s.done = true
	s.mu.Unlock()
	_ = s.client.Close()
	if s.server != nil {
		_ = s.server.Close()
	}
}

func (s *session) run() {
	defer func() {
		s.close()
		s.p.mu.Lock()
		delete(s.p.conns, s)
		s.p.mu.Unlock()
	}()
	cr := bufio.NewReader(s.client)
	startup, err := s.startup(cr)
	if err != nil {
		return
	}
	server, err := net.Dial("tcp", s.p.target)
	if err != nil {
		return
	}
	s.mu.Lock()
	s.server = server
	closed := s.done
	s.mu.Unlock()
	if closed {
		_ = server.Close()
		return
	}
	// The server's answer to the startup ends with a ReadyForQuery, as a round trip's does.
	s.pending = append(s.pending, RoundTrip{})
	if _, err := server.Write(startup); err != nil {
		return
	}
	// Either direction ending (a fault, a broken connection, the client's Terminate) ends both.
	var wg sync.WaitGroup
	wg.Go(func() {
		s.fromServer(bufio.NewReader(server))
		s.close()
	})
	s.fromClient(cr)
	s.close()
	wg.Wait()
}

// startup reads the client's startup message, refusing encryption requests so that the rest is
// readable, and returns it.
func (s *session) startup(r *bufio.Reader) ([]byte, error) {
	for {
		var hdr [8]byte
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return nil, err
		}
		n := int(binary.BigEndian.Uint32(hdr[:4]))
		if n < 8 || n > 1<<16 {
			return nil, errors.New("faultproxy: bad startup message")
		}
		msg := make([]byte, n)
		copy(msg, hdr[:])
		if _, err := io.ReadFull(r, msg[8:]); err != nil {
			return nil, err
		}
		switch binary.BigEndian.Uint32(hdr[4:]) {
		case 80877103, 80877104: // SSLRequest, GSSENCRequest: say no, and read the real startup
			if _, err := s.client.Write([]byte{'N'}); err != nil {
				return nil, err
			}
			continue
		}
		return msg, nil
	}
}

// message is one protocol message: its type and body.
type message struct {
	typ  byte
	body []byte
}

func (m message) bytes() []byte {
	b := make([]byte, 5+len(m.body))
	b[0] = m.typ
	binary.BigEndian.PutUint32(b[1:5], uint32(4+len(m.body)))
	copy(b[5:], m.body)
	return b
}

func readMessage(r *bufio.Reader) (message, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return message{}, err
	}
	n := int(binary.BigEndian.Uint32(hdr[1:]))
	if n < 4 || n > 1<<30 {
		return message{}, fmt.Errorf("faultproxy: bad message length %d", n)
	}
	body := make([]byte, n-4)
	_, err := io.ReadFull(r, body)
	return message{typ: hdr[0], body: body}, err
}

// cstrings splits a message body into its leading NUL-terminated strings.
func cstrings(b []byte, n int) []string {
	var out []string
	for range n {
		i := strings.IndexByte(string(b), 0)
		if i < 0 {
			break
		}
		out = append(out, string(b[:i]))
		b = b[i+1:]
	}
	return out
}

// fromClient forwards the client's round trips, each whole once it ends, dropping the connection
// when a BeforeSend fault accepts one.
func (s *session) fromClient(r *bufio.Reader) {
	stmts := map[string]string{}   // prepared statement name: its SQL
	portals := map[string]string{} // portal: its statement's name
	var buf []byte
	var rt RoundTrip
	var tx []string
	for {
		m, err := readMessage(r)
		if err != nil {
			return
		}
		switch m.typ {
		case 'P': // Parse: name, query
			if f := cstrings(m.body, 2); len(f) == 2 {
				stmts[f[0]] = f[1]
			}
		case 'B': // Bind: portal, statement
			if f := cstrings(m.body, 2); len(f) == 2 {
				portals[f[0]] = f[1]
			}
		case 'E', 'Q': // Execute: portal; Query: SQL
			sql := ""
			if f := cstrings(m.body, 1); len(f) == 1 {
				sql = f[0]
				if m.typ == 'E' {
					sql = stmts[portals[sql]]
				}
			}
			rt.Statements = append(rt.Statements, sql)
			switch {
			case isStatement(sql, "begin") || strings.HasPrefix(strings.ToLower(strings.TrimSpace(sql)), "begin "):
				tx = []string{sql}
			case tx != nil:
				tx = append(tx, sql)
			}
		}
		buf = append(buf, m.bytes()...)
		switch m.typ {
		case 'S', 'Q': // the round trip ends: the server answers it with a ReadyForQuery
			rt.Tx = append([]string(nil), tx...)
			if isStatement(last(rt.Statements), "commit") || isStatement(last(rt.Statements), "rollback") {
				tx = nil
			}
			if f := s.p.take(BeforeSend, rt); f != nil {
				f.once.Do(func() { close(f.fired) })
				return
			}
			s.mu.Lock()
			s.pending = append(s.pending, rt)
			s.mu.Unlock()
			if _, err := s.server.Write(buf); err != nil {
				return
			}
			buf, rt = buf[:0], RoundTrip{}
		case 'H', 'p', 'd', 'c', 'f', 'X': // Flush, a password, COPY data, Terminate: on at once
			if _, err := s.server.Write(buf); err != nil {
				return
			}
			buf = buf[:0]
		}
	}
}

func last(ss []string) string {
	if len(ss) == 0 {
		return ""
	}
	return ss[len(ss)-1]
}

// fromServer forwards the server's answers, dropping the connection once a round trip an AfterRun
// fault accepts has run to its end, before any of its answer is forwarded.
func (s *session) fromServer(r *bufio.Reader) {
	answering := false // a round trip's answer has begun
	var dropping *Fault
	for {
		m, err := readMessage(r)
		if err != nil {
			return
		}
		s.mu.Lock()
		var head *RoundTrip
		if len(s.pending) > 0 {
			head = &s.pending[0]
		}
		s.mu.Unlock()
		if head != nil && !answering && m.typ != 'A' && m.typ != 'N' && m.typ != 'S' {
			answering = true
			dropping = s.p.take(AfterRun, *head)
			if d := s.p.currentDelay(); d > 0 && dropping == nil {
				time.Sleep(d)
			}
		}
		if m.typ == 'Z' && head != nil {
			s.mu.Lock()
			s.pending = s.pending[1:]
			s.mu.Unlock()
			answering = false
			if dropping != nil {
				dropping.once.Do(func() { close(dropping.fired) })
				return // the round trip has run; its answer is lost with the connection
			}
		}
		if dropping != nil {
			continue
		}
		if _, err := s.client.Write(m.bytes()); err != nil {
			return
		}
	}
}
