package throttle

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxKeyLen is the longest limit key accepted, in bytes.
const MaxKeyLen = 200

// MaxRate is the largest rate or burst a Limit accepts (RequestsPerSecond, TokensPerMinute, their
// bursts and the input and output budgets): far above any provider's, and exact in a float64.
const MaxRate = 1e12

// Limit is one named quota that activities draw on: a provider's request and token budget, a tenant's
// concurrency cap, or any mix of those. Every field but Key is optional; a zero field means "no limit of
// that kind", and when several are set the tightest wins. A Limit is a plain value, safe to copy.
//
// Set a provider's bursts a little below the provider's own: Sluice charges a call when it admits it,
// the provider when the request arrives, and while the provider's bucket is full the refill between
// the two is lost to the provider but not to Sluice. Half a second of each rate was enough in
// samples/anthropic; ReportHeaders corrects the rest.
type Limit struct {
	// Key names the limit ("openai", "tenant:acme"). It must be non-empty printable UTF-8 of at most
	// MaxKeyLen bytes.
	Key string `json:"key"`
	// MaxConcurrent caps the tickets admitted and still running, at most math.MaxInt32. Zero means no
	// cap.
	MaxConcurrent int `json:"max_concurrent"`
	// RequestsPerSecond is the rate at which tickets are admitted, refilled continuously. Zero means
	// no request rate.
	RequestsPerSecond float64 `json:"requests_per_second"`
	// Burst is how many requests may be admitted at once after an idle spell. Requires
	// RequestsPerSecond. Defaults to max(1, RequestsPerSecond).
	Burst float64 `json:"burst"`
	// TokensPerMinute is the token budget, refilled continuously (a true rate, not a fixed window).
	// Zero means no token budget.
	TokensPerMinute float64 `json:"tokens_per_minute"`
	// TokenBurst is how many tokens may be spent at once after an idle spell. Requires
	// TokensPerMinute. Defaults to max(1, TokensPerMinute) (one minute's worth).
	TokenBurst float64 `json:"token_burst"`
	// MaxInflightTokens caps the sum of the tokens reserved by running tickets. Zero means no cap.
	MaxInflightTokens int64 `json:"max_inflight_tokens"`
	// InputTokensPerMinute is the budget of input tokens (Anthropic's ITPM), refilled continuously,
	// drawn on by a ticket's Cost.Input. Zero means no input budget.
	InputTokensPerMinute float64 `json:"input_tokens_per_minute"`
	// InputTokenBurst is how many input tokens may be spent at once after an idle spell. Requires
	// InputTokensPerMinute. Defaults to max(1, InputTokensPerMinute).
	InputTokenBurst float64 `json:"input_token_burst"`
	// OutputTokensPerMinute is the budget of output tokens (Anthropic's OTPM), refilled continuously,
	// drawn on by a ticket's Cost.Output. Zero means no output budget.
	OutputTokensPerMinute float64 `json:"output_tokens_per_minute"`
	// OutputTokenBurst is how many output tokens may be spent at once after an idle spell. Requires
	// OutputTokensPerMinute. Defaults to max(1, OutputTokensPerMinute).
	OutputTokenBurst float64 `json:"output_token_burst"`
	// Allowances are windowed quotas beside the rates: so many requests, tokens or money per
	// calendar hour, day, week or month, or per rolling duration (see Allowance). A ticket is
	// admitted only when every one has room; nil means none.
	Allowances Allowances `json:"allowances,omitempty"`
}

// Equal reports whether l and o are the same limit: every field equal, allowances in the same order.
func (l Limit) Equal(o Limit) bool {
	la, oa := l.Allowances, o.Allowances
	l.Allowances, o.Allowances = nil, nil
	return reflect.DeepEqual(l, o) && slices.Equal(la, oa)
}

// WithDefaults returns l with its zero-valued bursts filled in. It does not validate.
func (l Limit) WithDefaults() Limit {
	for _, d := range dimensions {
		// One unit's worth: a second of requests, a minute of tokens.
		if rate, burst := l.fields(d); *rate > 0 && *burst == 0 {
			*burst = math.Max(1, *rate)
		}
	}
	return l
}

// RequestsPerMinute is l's request rate per minute, the unit of its token budgets and of what
// operators read beside them: RequestsPerSecond times 60. It is 0 when l sets no request rate.
func (l Limit) RequestsPerMinute() float64 { return l.Rate(DimensionRequests).PerMinute() }

// Validate reports the first problem with l, naming the field and the bad value. It checks l as
// given; call WithDefaults first to validate what will be used.
func (l Limit) Validate() error {
	if err := ValidateKey(l.Key); err != nil {
		return err
	}
	bad := func(field string, v any, want string) error {
		return fmt.Errorf("throttle: limit %q: %s must be %s, got %v", l.Key, field, want, v)
	}
	if l.MaxConcurrent < 0 {
		return bad("MaxConcurrent", l.MaxConcurrent, ">= 0 (0 means no cap)")
	}
	if l.MaxConcurrent > math.MaxInt32 {
		return bad("MaxConcurrent", l.MaxConcurrent, fmt.Sprintf("<= %d", math.MaxInt32))
	}
	if l.MaxInflightTokens < 0 {
		return bad("MaxInflightTokens", l.MaxInflightTokens, ">= 0 (0 means no cap)")
	}
	// Every figure is checked before any burst against its rate, in the dimensions' order.
	for _, d := range dimensions {
		rate, burst := l.fields(d)
		for _, f := range [2]struct {
			name string
			v    float64
		}{{dimensionInfo[d].rateField, *rate}, {dimensionInfo[d].burstField, *burst}} {
			if math.IsNaN(f.v) || math.IsInf(f.v, 0) {
				return bad(f.name, f.v, "a finite number")
			}
			if f.v < 0 {
				return bad(f.name, f.v, ">= 0 (0 means not set)")
			}
			if f.v > MaxRate {
				return bad(f.name, f.v, "<= 1e12")
			}
		}
	}
	for _, d := range dimensions {
		rate, burst := l.fields(d)
		if *burst == 0 {
			continue
		}
		if *rate == 0 {
			return bad(dimensionInfo[d].burstField, *burst, "0 when "+dimensionInfo[d].rateField+" is not set")
		}
		if *burst < 1 {
			return bad(dimensionInfo[d].burstField, *burst, ">= 1")
		}
	}
	if err := l.Allowances.Validate(); err != nil {
		return fmt.Errorf("throttle: limit %q: %w", l.Key, err)
	}
	anyRate := false
	for _, r := range l.Rates() {
		anyRate = anyRate || r.IsSet()
	}
	if l.MaxConcurrent == 0 && l.MaxInflightTokens == 0 && !anyRate && len(l.Allowances) == 0 {
		return fmt.Errorf("throttle: limit %q sets none of MaxConcurrent, RequestsPerSecond, TokensPerMinute, "+
			"InputTokensPerMinute, OutputTokensPerMinute, MaxInflightTokens, Allowances", l.Key)
	}
	return nil
}

// ValidateKey reports whether key is usable as a limit key: non-empty printable UTF-8 of at most
// MaxKeyLen bytes, not blank, and neither beginning nor ending with a space (a key of spaces shows as
// an untitled card, and "openai " would be a second limit that reads as "openai").
func ValidateKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("throttle: limit Key must not be empty")
	case strings.TrimSpace(key) == "":
		return fmt.Errorf("throttle: limit Key must not be blank, got %q", key)
	case strings.TrimSpace(key) != key:
		return fmt.Errorf("throttle: limit Key must not begin or end with a space, got %q", key)
	case len(key) > MaxKeyLen:
		return fmt.Errorf("throttle: limit Key must be at most %d bytes, got %d bytes (%.20q...)", MaxKeyLen, len(key), key)
	case !utf8.ValidString(key):
		return fmt.Errorf("throttle: limit Key must be valid UTF-8, got %q", key)
	}
	for _, r := range key {
		if !unicode.IsPrint(r) {
			return fmt.Errorf("throttle: limit Key must be printable, got %q", key)
		}
	}
	return nil
}
