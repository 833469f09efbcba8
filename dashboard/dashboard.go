// Package dashboard serves Sluice's live dashboard: one page, embedded in the binary and loading
// nothing from the internet, that refreshes on its own.
//
// The page opens on a table of the limit keys, one row per key: its queued tickets, its oldest wait,
// what is in flight against MaxConcurrent, its largest use of a limit (concurrency, in-flight tokens,
// the last minute's requests and tokens against their rates, or an allowance's use of its amount) and
// its pause. The database sorts it
// (by key, queued, oldest wait or use: click a header), filters it by key prefix and pages it, 50 keys
// at a time, so that it stays quick at 10,000 keys and more (GET api/overview, see [Overview]). A
// click on a key opens its card, and only then are its figures and charts read: requests and tokens
// used against the limit over the last minutes (a small chart), the queue's depth, what is in flight,
// pauses, the oldest wait and why the line's head waits; and each of the limit's windowed allowances
// (so many requests, tokens or money an hour, day, week or month, or in a rolling window): its spec, a
// bar of its use, what it used of its amount and what remains (money with its currency), when it
// resets (in UTC, and how far from now) and whether a ticket it has no room for waits or is refused, a
// spent one marked. The charts draw the limit as it stood at each moment (a step where it changed,
// from the limit history) with the burst a full bucket lets through in one step shaded above it, so
// that a burst reads as a burst and yesterday's rate not as a breach of today's; the card lists the
// limit's recent changes, with who made them (GET api/history, see [History]). A schema of 12 keys or
// fewer opens every card at once.
//
// A card's "waiting list" lists the tickets drawing on its key, those waiting first in the order they
// are expected to be admitted, with their place, workflow, activity type, wait, cost (input and
// output) and what holds them (GET api/tickets, see [KeyTickets]). A click on one, or its workflow ID
// typed in the search box, opens its explanation (GET api/explain, see [Explained]): what holds it, in
// a sentence (an allowance that holds it with what it used, what the ticket needs and when it resets);
// that the next claim will refuse it, when a spent allowance says so, and why a claim refused a
// finished one; each limit it draws on, with its room or the dimension that binds, its figures (its
// allowances' among them), the tickets ahead and when it is ready; the expected admission, or why it
// cannot be known; and, with [Options.TemporalUIURL], a link to its workflow in Temporal's UI. Both
// are read when asked, not at every refresh: an explanation reads every queued ticket. Its sentences
// are those of the sluice command's explain, made on the server by the same code and served in the
// answers' words ([Words], [ListWords]), with the estimate's likely range and the holders that have
// run longer than any recent run.
//
// The page keeps the open cards, the table's order, filter and page, the waiting list and the ticket
// or workflow explained in its URL's query: a link opens them, and back and forward step through them.
//
// It is an [http.Handler] to mount in your own server, under any prefix:
//
//	h, err := dashboard.New(queue, dashboard.Options{})
//	mux.Handle("/sluice/", http.StripPrefix("/sluice", h))
//
// It is read-only by default. With [Options.AllowWrites], the page can also change a key's limits
// and pause or resume it; those requests must carry the page's CSRF token and come from the same
// origin. The limit history records a change made from the page as by "dashboard <remote address>". The handler authenticates no one: put your own authentication in front of it before you
// allow writes. `sluice serve` runs it on localhost.
package dashboard

import (
	"context"
	"crypto/rand"
	"embed"
	"encoding/hex"
	"fmt"
	"html/template"
	"log/slog"
	"net"
	"net/http"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/pgqueue"
)

//go:embed page.html app.js tickets.js allowances.js
var pageFS embed.FS

// Options configures the dashboard. The zero value is a read-only dashboard refreshing every 2 s
// and charting the last 10 minutes in steps of 10 s.
type Options struct {
	// AllowWrites lets the page change limits and pause and resume keys. Authenticate its users
	// in front of the handler first: it checks a CSRF token and the origin, not who is asking.
	AllowWrites bool
	// Refresh is how often the page reads the status again. Defaults to 2 s; at least 100 ms.
	Refresh time.Duration
	// Window is how far back the charts go. Defaults to 10 minutes; at most pgqueue.UsageHistory.
	Window time.Duration
	// Step is the width of one point of the charts. Defaults to 10 s; at least 1 s and at most Window.
	Step time.Duration
	// Logger receives the errors of requests. Defaults to slog.Default().
	Logger *slog.Logger
	// AllowedHosts, when set, are the only host names (without the port) requests may name in their
	// Host header; others get 403. On a loopback address set it to the loopback names: a web page
	// whose own name an attacker points at 127.0.0.1 (DNS rebinding) is then refused, reads included.
	// sluice serve sets it on loopback. Empty allows every host: behind a server of your own that
	// routes by name.
	AllowedHosts []string
	// TemporalUIURL, when set, links a ticket's view to its workflow in Temporal's UI: a URL template
	// whose placeholders {namespace}, {workflow_id} and {run_id} are replaced by the ticket's values,
	// path-escaped (url.PathEscape), as in
	// "http://localhost:8233/namespaces/{namespace}/workflows/{workflow_id}/{run_id}/history". It must
	// be an absolute http:// or https:// URL; put the placeholders in its path. A ticket lacking a
	// value the template names gets no link. Defaults to "": no link.
	TemporalUIURL string
}

func (o Options) withDefaults() (Options, error) {
	if o.Refresh == 0 {
		o.Refresh = 2 * time.Second
	}
	if o.Window == 0 {
		o.Window = 10 * time.Minute
	}
	if o.Step == 0 {
		o.Step = 10 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	switch {
	case o.Refresh < 100*time.Millisecond:
		return o, fmt.Errorf("dashboard: Options.Refresh must be at least 100ms, got %v", o.Refresh)
	case o.Step < time.Second:
		return o, fmt.Errorf("dashboard: Options.Step must be at least 1s, got %v", o.Step)
	case o.Window < o.Step || o.Window > pgqueue.UsageHistory:
		return o, fmt.Errorf("dashboard: Options.Window must be from Step (%v) to %v, got %v", o.Step, pgqueue.UsageHistory, o.Window)
	case o.Window/o.Step > 720:
		return o, fmt.Errorf("dashboard: Options.Window / Options.Step must be at most 720 points, got %v / %v", o.Window, o.Step)
	}
	return o, checkTemporalUIURL(o.TemporalUIURL)
}

// handler is the dashboard.
type handler struct {
	q    *pgqueue.Queue
	opts Options
	csrf string
	page *template.Template
	mux  *http.ServeMux
}

// New returns the dashboard of q's schema. It reads nothing until a request comes.
func New(q *pgqueue.Queue, opts Options) (http.Handler, error) {
	if q == nil {
		return nil, fmt.Errorf("dashboard: the queue is nil")
	}
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	page, err := template.ParseFS(pageFS, "page.html")
	if err != nil {
		return nil, err
	}
	token := make([]byte, 32)
	if _, err := rand.Read(token); err != nil {
		return nil, err
	}
	h := &handler{q: q, opts: opts, csrf: hex.EncodeToString(token), page: page, mux: http.NewServeMux()}
	h.mux.HandleFunc("GET /{$}", h.servePage)
	h.mux.HandleFunc("GET /app.js", h.serveScript)
	h.mux.HandleFunc("GET /tickets.js", h.serveScript)
	h.mux.HandleFunc("GET /allowances.js", h.serveScript)
	h.mux.HandleFunc("GET /api/status", h.serveStatus)
	h.mux.HandleFunc("GET /api/overview", h.serveOverview)
	h.mux.HandleFunc("GET /api/history", h.serveHistory)
	h.mux.HandleFunc("GET /api/tickets", h.serveTickets)
	h.mux.HandleFunc("GET /api/explain", h.serveExplain)
	h.mux.HandleFunc("POST /api/limits", h.write(h.setLimits))
	h.mux.HandleFunc("POST /api/pause", h.write(h.pause))
	h.mux.HandleFunc("POST /api/resume", h.write(h.resume))
	return h, nil
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !h.hostAllowed(r.Host) {
		http.Error(w, "sluice dashboard: host "+strconv.Quote(r.Host)+" is not allowed (Options.AllowedHosts)", http.StatusForbidden)
		return
	}
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("X-Frame-Options", "DENY")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'unsafe-inline'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
	h.mux.ServeHTTP(w, r)
}

// pageData is what the page's template receives.
type pageData struct {
	CSRF      string
	RefreshMS int64
	Writable  bool
	Schema    string
}

func (h *handler) servePage(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	d := pageData{Writable: h.opts.AllowWrites, RefreshMS: h.opts.Refresh.Milliseconds(), Schema: h.q.Schema()}
	if h.opts.AllowWrites {
		d.CSRF = h.csrf
	}
	if err := h.page.Execute(w, d); err != nil {
		h.opts.Logger.Error("sluice dashboard: render the page", "error", err)
	}
}

// requestTimeout bounds the database work of one request.
const requestTimeout = 15 * time.Second

func (h *handler) ctx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), requestTimeout)
}

func (h *handler) serveScript(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	// The routes name the scripts: app.js, tickets.js, allowances.js.
	http.ServeFileFS(w, r, pageFS, path.Base(r.URL.Path))
}

// hostAllowed reports whether a request naming host may be served.
func (h *handler) hostAllowed(host string) bool {
	if len(h.opts.AllowedHosts) == 0 {
		return true
	}
	if name, _, err := net.SplitHostPort(host); err == nil {
		host = name
	}
	host = strings.Trim(host, "[]")
	return slices.ContainsFunc(h.opts.AllowedHosts, func(a string) bool { return strings.EqualFold(a, host) })
}
