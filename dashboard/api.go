package dashboard

import (
	"bytes"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/sluicehq/sluice/pgqueue"
	"github.com/sluicehq/sluice/throttle"
)

// Status is GET api/status?key=a&key=b: the status of the keys named (1 to 100 of them, in key order)
// and the chart's step. The page reads the keys whose cards are open; api/overview pages every key.
//
// A request that names no key, names another parameter, or a key that is not valid is answered 400
// with {"error": "..."} naming it and its value. When a key named is not a limit, the answer is 404
// with {"error": "...", "unknown_keys": [...]}, those of the keys named that are not: the error has
// the shape of api/tickets' and api/history's, and unknown_keys tells the page which cards to close.
type Status struct {
	Now       time.Time   `json:"now"`
	Schema    string      `json:"schema"`
	RefreshMS int64       `json:"refresh_ms"`
	StepS     float64     `json:"step_s"`
	Writable  bool        `json:"writable"`
	Keys      []StatusKey `json:"keys"`
}

// StatusKey is one key of Status, what its card shows: the key's pgqueue.KeyStatus, whose JSON
// fields stand at the top of the key's object (configured, effective, state, queued, ...; allowances,
// each allowance's spec, used, remaining and resets_at, left out when the limit has none), and its
// usage over Options.Window in steps of Options.Step, oldest first; the last step is still filling.
// Its wait is KeyStatus.OldestWait: the page reads it as now less oldest_queued. LimitSteps is the
// limit as it stood over the same window (pgqueue.Queue.LimitSteps): the charts draw the limit in
// force at each moment, not today's across the whole window.
type StatusKey struct {
	pgqueue.KeyStatus
	Usage      []pgqueue.UsagePoint `json:"usage"`
	LimitSteps []pgqueue.LimitStep  `json:"limit_steps"`
}

func (h *handler) serveStatus(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := h.ctx(r)
	defer cancel()
	st, code, err := h.statusOf(ctx, r)
	if code == http.StatusNotFound {
		writeJSON(w, code, map[string]any{"error": err.Error(), "unknown_keys": unknownOf(r.URL.Query()["key"], st)})
		return
	}
	if err != nil {
		h.fail(w, code, err)
		return
	}
	keys := make([]string, len(st))
	for i, s := range st {
		keys[i] = s.Configured.Key
	}
	usage, now, err := h.q.Usage(ctx, keys, h.opts.Window, h.opts.Step)
	if err != nil {
		h.fail(w, http.StatusInternalServerError, err)
		return
	}
	since := now.Add(-h.opts.Window)
	if len(keys) > 0 && len(usage[keys[0]]) > 0 {
		since = usage[keys[0]][0].At // the charts' first step
	}
	steps, err := h.q.LimitSteps(ctx, keys, since)
	if err != nil {
		h.fail(w, http.StatusInternalServerError, err)
		return
	}
	out := Status{Now: now, Schema: h.q.Schema(), RefreshMS: h.opts.Refresh.Milliseconds(), StepS: h.opts.Step.Seconds(),
		Writable: h.opts.AllowWrites, Keys: make([]StatusKey, len(st))}
	for i, s := range st {
		out.Keys[i] = StatusKey{KeyStatus: s, Usage: usage[s.Configured.Key], LimitSteps: steps[s.Configured.Key]}
	}
	writeJSON(w, http.StatusOK, out)
}

// unknownOf are the keys of asked that st does not have, each once, in the order asked.
func unknownOf(asked []string, st []pgqueue.KeyStatus) []string {
	out := []string{}
	for _, k := range asked {
		if !slices.ContainsFunc(st, func(s pgqueue.KeyStatus) bool { return s.Configured.Key == k }) && !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out
}

// write guards a write: writes allowed, the page's CSRF token, the same origin, a bounded body.
func (h *handler) write(next func(w http.ResponseWriter, r *http.Request, body []byte)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !h.opts.AllowWrites {
			h.fail(w, http.StatusForbidden, errors.New("this dashboard is read-only (Options.AllowWrites)"))
			return
		}
		if err := h.sameOrigin(r); err != nil {
			h.fail(w, http.StatusForbidden, err)
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 4096))
		if err != nil {
			h.fail(w, http.StatusBadRequest, fmt.Errorf("request body: %w", err))
			return
		}
		next(w, r, body)
	}
}

// sameOrigin checks the CSRF token and, where the browser says, that the request comes from this
// page's origin.
func (h *handler) sameOrigin(r *http.Request) error {
	if subtle.ConstantTimeCompare([]byte(r.Header.Get("X-Sluice-CSRF")), []byte(h.csrf)) != 1 {
		return errors.New("missing or wrong X-Sluice-CSRF token: reload the page")
	}
	if s := r.Header.Get("Sec-Fetch-Site"); s != "" && s != "same-origin" {
		return fmt.Errorf("cross-site request refused (Sec-Fetch-Site %q)", s)
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if err != nil || u.Host != r.Host {
			return fmt.Errorf("cross-origin request refused (Origin %q, Host %q)", o, r.Host)
		}
	}
	return nil
}

// LimitChange is POST api/limits: the key, and throttle.LimitChange in its JSON names (fields left out are kept). A
// changed rate (requests_per_second, tokens_per_minute, input_tokens_per_minute,
// output_tokens_per_minute) without its burst puts the burst back to its default. allowances, when
// given, replace the key's (each in the operators' syntax, "usd=5.00/day@America/Los_Angeles", or
// as throttle.Allowance's JSON; [] removes them), and on_spent ("wait" or "refuse") sets what each does
// when spent; without it, each keeps what the key's allowance of its meter and period did, and a new
// one refuses if all the key's refuse (throttle.LimitChange.Allowances); on_spent for a key left
// without allowances is refused. JSON has no NaN or infinity, and a number too large for a float64 is
// refused.
type LimitChange struct {
	Key string `json:"key"`
	throttle.LimitChange
}

func (h *handler) setLimits(w http.ResponseWriter, r *http.Request, body []byte) {
	var c LimitChange
	if err := decode(body, &c); err != nil {
		h.fail(w, http.StatusBadRequest, err)
		return
	}
	ctx, cancel := h.ctx(r)
	defer cancel()
	// The limit history records the change as the page's: who is behind the address is for the
	// authentication in front of the handler to know.
	ctx = pgqueue.WithChangedBy(ctx, "dashboard "+r.RemoteAddr)
	l, err := h.q.ChangeLimit(ctx, c.Key, c.LimitChange, false)
	if errors.Is(err, pgqueue.ErrInvalidLimit) {
		h.fail(w, http.StatusBadRequest, err)
		return
	}
	if err != nil {
		h.failKey(w, err)
		return
	}
	h.opts.Logger.Info("sluice dashboard: limit changed", "key", l.Key, "limit", fmt.Sprintf("%+v", l), "remote", r.RemoteAddr)
	writeJSON(w, http.StatusOK, l)
}

// PauseRequest is POST api/pause: stop admissions on Key for Seconds from now, exactly, as an operator
// means it: a pause in force, a provider's included, is shortened or extended to it
// (pgqueue.Queue.SetPause).
type PauseRequest struct {
	Key     string  `json:"key"`
	Seconds float64 `json:"seconds"`
}

func (h *handler) pause(w http.ResponseWriter, r *http.Request, body []byte) {
	var p PauseRequest
	if err := decode(body, &p); err != nil {
		h.fail(w, http.StatusBadRequest, err)
		return
	}
	if !(p.Seconds > 0 && p.Seconds <= 366*24*3600) {
		h.fail(w, http.StatusBadRequest, fmt.Errorf("seconds must be from 0 to 31622400 (a year), got %v", p.Seconds))
		return
	}
	ctx, cancel := h.ctx(r)
	defer cancel()
	st, err := h.q.Status(ctx, p.Key)
	if err != nil {
		h.failKey(w, err)
		return
	}
	until := st[0].Now.Add(time.Duration(p.Seconds * float64(time.Second)))
	if err := h.q.SetPause(ctx, p.Key, until); err != nil {
		h.failKey(w, err)
		return
	}
	h.opts.Logger.Info("sluice dashboard: key paused", "key", p.Key, "until", until, "remote", r.RemoteAddr)
	writeJSON(w, http.StatusOK, map[string]any{"key": p.Key, "paused_until": until})
}

func (h *handler) resume(w http.ResponseWriter, r *http.Request, body []byte) {
	var p struct {
		Key string `json:"key"`
	}
	if err := decode(body, &p); err != nil {
		h.fail(w, http.StatusBadRequest, err)
		return
	}
	ctx, cancel := h.ctx(r)
	defer cancel()
	if err := h.q.Resume(ctx, p.Key); err != nil {
		h.failKey(w, err)
		return
	}
	h.opts.Logger.Info("sluice dashboard: key resumed", "key", p.Key, "remote", r.RemoteAddr)
	writeJSON(w, http.StatusOK, map[string]any{"key": p.Key})
}

// decode reads a JSON body into v, refusing unknown fields and trailing data. JSON has no NaN or
// infinity, so a number that is not finite cannot arrive.
func decode(body []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(body))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return fmt.Errorf("request body: %w", err)
	}
	if d.More() {
		return errors.New("request body: more than one JSON value")
	}
	return nil
}

func (h *handler) failKey(w http.ResponseWriter, err error) {
	if errors.Is(err, pgqueue.ErrUnknownLimit) {
		h.fail(w, http.StatusNotFound, err)
		return
	}
	h.fail(w, http.StatusInternalServerError, err)
}

func (h *handler) fail(w http.ResponseWriter, code int, err error) {
	if code >= 500 {
		h.opts.Logger.Error("sluice dashboard", "error", err)
	}
	writeJSON(w, code, map[string]string{"error": err.Error()})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
