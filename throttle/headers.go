package throttle

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// MaxRetryAfter is the longest pause a Retry-After (or retry-after-ms) header can order: a longer wait,
// or a date further ahead, is clamped to now+MaxRetryAfter, so that a buggy or hostile header cannot
// stall a key for days.
const MaxRetryAfter = time.Hour

// maxReset is how far ahead a rate-limit reset may lie: a later reset is clamped to now+maxReset.
const maxReset = 24 * time.Hour

// Daily figures (see ParseRateLimitHeaders): a figure whose reset lies more than dailyReset ahead and
// whose implied window is within dailyWindow/2..2*dailyWindow counts in a window of dailyWindow.
const (
	dailyWindow = 24 * time.Hour
	dailyReset  = 2 * time.Minute
)

// RateLimitInfo is what a provider's response headers say about its limits, as absolute instants.
// A zero field means the header was absent or unusable.
//
// Every float field is finite and >= 0; a remaining figure is at most its limit when both are
// present (limit > 0); every reset lies in [now, now+24h] and RetryAfter in [now, now+MaxRetryAfter],
// for the now given to ParseRateLimitHeaders.
type RateLimitInfo struct {
	RequestsLimit, RequestsRemaining float64 // requests per RequestsWindow
	RequestsReset                    time.Time
	TokensLimit, TokensRemaining     float64 // tokens per TokensWindow
	TokensReset                      time.Time
	// RequestsWindow and TokensWindow are the windows the requests and tokens figures count in:
	// 24*time.Hour for a daily figure (Groq's requests, OpenAI's requests per day), 0 for a figure
	// per minute or whose window the headers do not tell, which Observe takes as per minute.
	RequestsWindow, TokensWindow time.Duration
	// HasRequestsRemaining and HasTokensRemaining report that the remaining figure was present:
	// remaining may legitimately be 0.
	HasRequestsRemaining, HasTokensRemaining bool
	// InputTokens and OutputTokens are the input and output token budgets of a provider that meters
	// them apart (Anthropic's anthropic-ratelimit-input-tokens-* and -output-tokens-*), per minute.
	InputTokens, OutputTokens TokenWindow
	// RetryAfter is from retry-after-ms (preferred), Retry-After seconds, or a Retry-After HTTP date.
	RetryAfter time.Time
}

// TokenWindow is one token budget as a provider's headers report it. Zero fields were absent or
// unusable; HasRemaining reports that Remaining was present (it may legitimately be 0).
type TokenWindow struct {
	Limit, Remaining float64
	HasRemaining     bool
	Reset            time.Time
}

// ParseRetryAfter reads the wait a response orders from h, as an instant: retry-after-ms (milliseconds,
// possibly fractional) when it is usable, else Retry-After as non-negative (integer or decimal)
// seconds or as an HTTP date. The instant is clamped to [now, now+MaxRetryAfter]: a date in the past
// means now, and a wait too long for a float64 (1e400) is clamped like any other long wait. ok is
// false when neither header is present and usable: negative, "NaN", "Inf" and otherwise malformed
// values are ignored, and a malformed retry-after-ms falls back to Retry-After.
func ParseRetryAfter(h http.Header, now time.Time) (time.Time, bool) {
	if ms, ok := parseDecimal(h.Get("retry-after-ms")); ok {
		return now.Add(clampWait(ms*float64(time.Millisecond), MaxRetryAfter)), true
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if secs, ok := parseDecimal(v); ok {
		return now.Add(clampWait(secs*float64(time.Second), MaxRetryAfter)), true
	}
	if v == "" {
		return time.Time{}, false
	}
	if t, err := http.ParseTime(v); err == nil {
		return clampInstant(t, now, MaxRetryAfter), true
	}
	return time.Time{}, false
}

// ParseRateLimitHeaders reads the rate-limit headers of an OpenAI, Groq or Anthropic response (names
// are case-insensitive) as of now. It never fails: a header that is absent or unusable leaves its
// field zero.
//
// Requests are read from x-ratelimit-{limit,remaining,reset}-requests (OpenAI, Groq) or, when none of
// those is usable, anthropic-ratelimit-requests-{limit,remaining,reset}. Tokens are read from
// x-ratelimit-{limit,remaining,reset}-tokens, else anthropic-ratelimit-tokens-*, else, when none of
// the plain anthropic tokens headers is usable, anthropic-ratelimit-input-tokens-*: the input budget
// stands in for the token budget, which is conservative for a budget that counts input and output
// together. The three figures of one kind always come from the same header family. InputTokens and
// OutputTokens are read from anthropic-ratelimit-input-tokens-* and anthropic-ratelimit-output-tokens-*.
//
// Numbers must be plain non-negative decimals (an exponent is allowed); negative, "NaN", "Inf", hex
// or otherwise malformed numbers are ignored, and so is a limit or remaining figure too large for a
// float64 (1e400; 1e308 is kept). A limit of 0 is treated as absent. A remaining figure above its
// limit is clamped to the limit. A reset is an RFC 3339 timestamp (Anthropic), a Go-style duration
// such as 6m0s, 20ms or 1h2m3.5s (OpenAI, Groq), or a bare number of seconds, whichever family sent
// it; a negative duration is ignored, a reset in the past means now, and one more than 24h ahead (an
// overflowing duration or number included) is clamped to now+24h. RetryAfter is as ParseRetryAfter
// returns it.
//
// The window of each kind (RequestsWindow, TokensWindow) is a day where the provider's documentation
// or the figures say so, and 0 otherwise. Anthropic's figures are per minute. Groq's x-ratelimit
// requests figures are per day and its tokens figures per minute (a Groq response carries
// x-groq-region). Otherwise an x-ratelimit figure (OpenAI's) is per day when its reset lies more than
// 2 minutes ahead and the window it implies is 12 to 48 hours. These providers refill
// continuously: the reset is when limit-remaining will have refilled, so the implied window is
// (reset-now) * limit / (limit-remaining), or reset-now when remaining is absent or the limit. A
// per-minute figure resets 2 minutes ahead only in debt, and then implies minutes; figures implying
// weeks match no continuous refill and are not taken as a day. A daily figure resets 2 minutes ahead once a
// few requests are spent (10 of 7,200 a day), and until then has window 0.
func ParseRateLimitHeaders(h http.Header, now time.Time) RateLimitInfo {
	var info RateLimitInfo
	req, reqFamily := firstWindow(h, now,
		[3]string{"x-ratelimit-limit-requests", "x-ratelimit-remaining-requests", "x-ratelimit-reset-requests"},
		[3]string{"anthropic-ratelimit-requests-limit", "anthropic-ratelimit-requests-remaining", "anthropic-ratelimit-requests-reset"},
	)
	info.RequestsLimit, info.RequestsRemaining, info.HasRequestsRemaining, info.RequestsReset = req.limit, req.remaining, req.hasRemaining, req.reset
	tok, tokFamily := firstWindow(h, now,
		[3]string{"x-ratelimit-limit-tokens", "x-ratelimit-remaining-tokens", "x-ratelimit-reset-tokens"},
		[3]string{"anthropic-ratelimit-tokens-limit", "anthropic-ratelimit-tokens-remaining", "anthropic-ratelimit-tokens-reset"},
		[3]string{"anthropic-ratelimit-input-tokens-limit", "anthropic-ratelimit-input-tokens-remaining", "anthropic-ratelimit-input-tokens-reset"},
	)
	info.TokensLimit, info.TokensRemaining, info.HasTokensRemaining, info.TokensReset = tok.limit, tok.remaining, tok.hasRemaining, tok.reset
	groq := strings.TrimSpace(h.Get("x-groq-region")) != ""
	if reqFamily == 0 && (groq && req.hasFigures() || req.daily(now)) {
		info.RequestsWindow = dailyWindow
	}
	if tokFamily == 0 && !groq && tok.daily(now) {
		info.TokensWindow = dailyWindow
	}
	in, _ := firstWindow(h, now, [3]string{"anthropic-ratelimit-input-tokens-limit", "anthropic-ratelimit-input-tokens-remaining", "anthropic-ratelimit-input-tokens-reset"})
	out, _ := firstWindow(h, now, [3]string{"anthropic-ratelimit-output-tokens-limit", "anthropic-ratelimit-output-tokens-remaining", "anthropic-ratelimit-output-tokens-reset"})
	info.InputTokens = TokenWindow{Limit: in.limit, Remaining: in.remaining, HasRemaining: in.hasRemaining, Reset: in.reset}
	info.OutputTokens = TokenWindow{Limit: out.limit, Remaining: out.remaining, HasRemaining: out.hasRemaining, Reset: out.reset}
	info.RetryAfter, _ = ParseRetryAfter(h, now)
	return info
}

// window is one kind of limit as one family of headers reports it.
type window struct {
	limit, remaining float64
	hasRemaining     bool
	reset            time.Time
}

// hasFigures reports whether w has a limit or remaining figure: something a window applies to.
func (w window) hasFigures() bool { return w.limit > 0 || w.hasRemaining }

// daily reports whether w's figures count in a day: its reset lies more than dailyReset after now,
// and the window its figures imply (see ParseRateLimitHeaders) is within half a day and two days.
func (w window) daily(now time.Time) bool {
	ahead := w.reset.Sub(now)
	if !w.hasFigures() || w.reset.IsZero() || ahead <= dailyReset {
		return false
	}
	implied := float64(ahead)
	if w.hasRemaining && w.limit > 0 && w.remaining < w.limit {
		implied *= w.limit / (w.limit - w.remaining)
	}
	return implied >= float64(dailyWindow/2) && implied <= float64(2*dailyWindow)
}

// firstWindow reads the first family of {limit, remaining, reset} header names of which any header
// is usable, so that one kind's figures never mix families, and returns its index in families (-1
// when none is usable).
func firstWindow(h http.Header, now time.Time, families ...[3]string) (window, int) {
	for i, names := range families {
		var w window
		if v, ok := parseNumber(h.Get(names[0])); ok && v > 0 {
			w.limit = v
		}
		w.remaining, w.hasRemaining = parseNumber(h.Get(names[1]))
		w.reset, _ = parseReset(h.Get(names[2]), now)
		if w.limit == 0 && !w.hasRemaining && w.reset.IsZero() {
			continue
		}
		if w.hasRemaining && w.limit > 0 && w.remaining > w.limit {
			w.remaining = w.limit
		}
		return w, i
	}
	return window{}, -1
}

// parseNumber parses v as a finite non-negative decimal (see parseDecimal). It refuses negatives,
// NaN, infinities and a decimal too large for a float64.
func parseNumber(v string) (float64, bool) {
	f, ok := parseDecimal(v)
	if !ok || math.IsInf(f, 1) {
		return 0, false
	}
	return f, true
}

// parseDecimal parses v as a non-negative decimal: optional '+', digits with at most one '.', and an
// optional exponent; surrounding spaces are ignored. Anything else (a sign '-', "NaN", "Inf", hex,
// underscores, a unit) is refused. A well-formed decimal too large for a float64 is +Inf: a caller
// that reads a wait clamps it, one that reads a count refuses it.
func parseDecimal(v string) (float64, bool) {
	v = strings.TrimSpace(v)
	if !isDecimal(v) {
		return 0, false
	}
	// isDecimal has checked the syntax, so an error can only be a range error: +Inf for an
	// overflow, 0 or a denormal for an underflow.
	f, _ := strconv.ParseFloat(v, 64)
	return f + 0, true // + 0 turns a -0 from an underflow into 0
}

// isDecimal reports whether v is [+]digits[.digits][(e|E)[+|-]digits] with at least one mantissa
// digit (either side of the point may be empty, not both).
func isDecimal(v string) bool {
	i := 0
	if i < len(v) && v[i] == '+' {
		i++
	}
	i, digits := scanMantissa(v, i)
	if digits == 0 {
		return false
	}
	if i < len(v) && (v[i] == 'e' || v[i] == 'E') {
		i++
		if i < len(v) && (v[i] == '+' || v[i] == '-') {
			i++
		}
		exp := 0
		for ; i < len(v) && isDigit(v[i]); i++ {
			exp++
		}
		if exp == 0 {
			return false
		}
	}
	return i == len(v)
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// scanMantissa reads digits[.digits] from v[i:], returning where it stopped and how many digits it
// read on both sides of the point.
func scanMantissa(v string, i int) (end, digits int) {
	for ; i < len(v) && isDigit(v[i]); i++ {
		digits++
	}
	if i < len(v) && v[i] == '.' {
		i++
		for ; i < len(v) && isDigit(v[i]); i++ {
			digits++
		}
	}
	return i, digits
}

// parseReset parses a reset header as an instant in [now, now+maxReset]: an RFC 3339 timestamp, a
// Go-style duration from now, or a bare number of seconds from now. ok is false for anything else,
// a negative duration included.
func parseReset(v string, now time.Time) (time.Time, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return time.Time{}, false
	}
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return clampInstant(t, now, maxReset), true
	}
	if secs, ok := parseDecimal(v); ok {
		return now.Add(clampWait(secs*float64(time.Second), maxReset)), true
	}
	if ns, ok := parseDuration(v); ok {
		return now.Add(clampWait(ns, maxReset)), true
	}
	return time.Time{}, false
}

// durationUnits are time.ParseDuration's units, in nanoseconds.
var durationUnits = map[string]float64{
	"ns": 1,
	"us": float64(time.Microsecond),
	"µs": float64(time.Microsecond), // U+00B5 micro sign
	"μs": float64(time.Microsecond), // U+03BC Greek small letter mu
	"ms": float64(time.Millisecond),
	"s":  float64(time.Second),
	"m":  float64(time.Minute),
	"h":  float64(time.Hour),
}

// parseDuration parses a non-negative duration in time.ParseDuration's syntax (an optional '+', then
// one or more decimal numbers each followed by a unit) into nanoseconds, as a float so that a
// duration too long for a time.Duration is not an error but a large (possibly infinite) number for
// the caller to clamp.
func parseDuration(v string) (float64, bool) {
	if strings.HasPrefix(v, "+") {
		v = v[1:]
	}
	if v == "" {
		return 0, false
	}
	total := 0.0
	for v != "" {
		i, digits := scanMantissa(v, 0)
		if digits == 0 {
			return 0, false
		}
		// The syntax is checked, so the only possible error is a range error, whose +Inf result is
		// what the caller clamps.
		n, _ := strconv.ParseFloat(v[:i], 64)
		v = v[i:]
		j := 0
		for ; j < len(v) && v[j] != '.' && !isDigit(v[j]); j++ {
		}
		unit, ok := durationUnits[v[:j]]
		if !ok {
			return 0, false
		}
		v = v[j:]
		total += n * unit
	}
	return total, true
}

// clampWait converts a non-negative wait in nanoseconds, possibly too large for a time.Duration or
// infinite, to a Duration of at most ceiling.
func clampWait(ns float64, ceiling time.Duration) time.Duration {
	if !(ns < float64(ceiling)) { // also catches +Inf and NaN
		return ceiling
	}
	return max(0, time.Duration(math.Round(ns)))
}

// clampInstant returns t clamped to [now, now+ceiling].
func clampInstant(t, now time.Time, ceiling time.Duration) time.Time {
	if t.Before(now) {
		return now
	}
	if latest := now.Add(ceiling); t.After(latest) {
		return latest
	}
	return t
}

// finiteNonNeg reports whether f is a finite number >= 0.
func finiteNonNeg(f float64) bool { return f >= 0 && !math.IsInf(f, 1) }

// usableLimit reports whether f is a provider limit Observe can learn: finite and at least 1 (a limit
// below one request or token per window is not a real figure, and would make a rate that rounds to
// no limit at all).
func usableLimit(f float64) bool { return f >= 1 && !math.IsInf(f, 1) }
