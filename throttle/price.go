package throttle

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"math/bits"
	"slices"
	"strings"
	"time"
)

// MaxPrice is the largest price a PriceTable accepts, in micro-units per million tokens: 1e12, a
// million dollars a million tokens (a dollar a token). It is far above any published price and
// small enough that a price times any token count fits the 128-bit arithmetic Cost uses.
const MaxPrice int64 = 1e12

// perMillion is how many tokens a Price is given for.
const perMillion = 1_000_000

// maxListedModels is how many known models an unknown-model error lists before it says how many
// more there are.
const maxListedModels = 20

// Price is what one model charges, in micro-units of its table's Currency per million tokens:
// $0.15 per million input tokens is Input 150_000. Prices are integers so that a spend cap adds up
// exactly; a price finer than a micro-unit per million tokens cannot be written.
//
// A provider that charges more to write its prompt cache than to read plain input (Anthropic's
// cache writes cost 1.25 or 2 times Input) is charged Input for those tokens here, which is below
// its bill: give such a model's estimates some headroom.
type Price struct {
	// Input is the price of input tokens not read from a prompt cache.
	Input int64 `json:"input"`
	// CachedInput is the price of input tokens read from a prompt cache. Zero means the model has
	// no cache discount and cached input is charged as Input, so a free cache read cannot be
	// written (give it 1).
	CachedInput int64 `json:"cached_input,omitzero"`
	// Output is the price of output tokens, reasoning tokens included where a provider bills them
	// as output.
	Output int64 `json:"output"`
}

// cached is the price of a cached input token: CachedInput, or Input when it is zero.
func (p Price) cached() int64 {
	if p.CachedInput == 0 {
		return p.Input
	}
	return p.CachedInput
}

// check reports the first of p's prices outside 0..MaxPrice, naming model and the field.
func (p Price) check(model string) error {
	for _, f := range []struct {
		name string
		v    int64
	}{{"Input", p.Input}, {"CachedInput", p.CachedInput}, {"Output", p.Output}} {
		if f.v < 0 || f.v > MaxPrice {
			return fmt.Errorf("throttle: price table: Models[%q].%s must be in 0..%d micro-units per million tokens, got %d",
				model, f.name, MaxPrice, f.v)
		}
	}
	return nil
}

// PriceTable is the prices of the models a limit's money allowances pay for, all in one currency:
// what turns a ticket's tokens into the money a MeterMoney Allowance counts (Spend.Money). Estimate
// prices a ticket's reservation at admission and Cost the usage its call reports, so that the
// allowance reconciles to what the provider bills.
//
// Prices change, and differ by account, region and tier: a table is the operator's own, read with
// ParsePriceTable from a file that says when and where its prices were read (AsOf, Source).
// docs/prices-example.json is an example, not a maintained list. A PriceTable is safe for concurrent
// use as long as no one writes its Models.
type PriceTable struct {
	// Currency is the ISO 4217 code, in upper case ("USD"), of every price in the table. It must be
	// the Currency of the money allowances the table's costs are counted against.
	Currency string `json:"currency"`
	// Models maps a model's name, as the calls name it ("gpt-4o-mini"), to its price. Names are
	// matched exactly: a dated snapshot ("gpt-4o-mini-2024-07-18") needs its own entry.
	Models map[string]Price `json:"models"`
	// AsOf is the date the prices were read, YYYY-MM-DD; optional, for the operator to see how old
	// they are.
	AsOf string `json:"as_of,omitempty"`
	// Source is where the prices were read, such as the providers' pricing pages; optional.
	Source string `json:"source,omitempty"`
}

// Validate reports the first problem with t, naming the field and the bad value: Currency a
// 3-letter code in upper case, at least one model, no empty (or space-padded) model name, every
// price in 0..MaxPrice, and AsOf, if set, a date as YYYY-MM-DD. Models are checked in name order,
// so the error is the same from run to run.
func (t PriceTable) Validate() error {
	if !isCurrency(t.Currency) {
		return fmt.Errorf("throttle: price table: Currency must be a 3-letter ISO 4217 code in upper case (USD), got %q",
			t.Currency)
	}
	if len(t.Models) == 0 {
		return errors.New("throttle: price table: Models must price at least one model, got none")
	}
	for _, name := range slices.Sorted(maps.Keys(t.Models)) {
		if name == "" || strings.TrimSpace(name) != name {
			return fmt.Errorf("throttle: price table: Models: a model name must be non-empty, without leading or trailing space, got %q",
				name)
		}
		if err := t.Models[name].check(name); err != nil {
			return err
		}
	}
	if t.AsOf != "" {
		if _, err := time.Parse(time.DateOnly, t.AsOf); err != nil {
			return fmt.Errorf("throttle: price table: AsOf must be a date as YYYY-MM-DD, got %q", t.AsOf)
		}
	}
	return nil
}

// Usage is the tokens one call used, as its provider reports them: what PriceTable.Cost prices.
type Usage struct {
	// Input is all the call's input tokens, those read from a prompt cache included. OpenAI reports
	// it so (prompt_tokens, input_tokens); Anthropic reports its parts apart, so add input_tokens,
	// cache_creation_input_tokens and cache_read_input_tokens.
	Input int64 `json:"input"`
	// CachedInput is the part of Input read from a prompt cache (OpenAI's cached_tokens,
	// Anthropic's cache_read_input_tokens). It must not exceed Input.
	CachedInput int64 `json:"cached_input,omitzero"`
	// Output is the call's output tokens, reasoning tokens included where the provider counts them
	// as output.
	Output int64 `json:"output"`
}

// Cost is what model charged for the call that used u, in micro-units of t's Currency: Input less
// CachedInput at the model's Input price, CachedInput at its CachedInput price, and Output at its
// Output price. The exact sum is rounded up to the next micro-unit, so that a spend cap counts at
// least what was spent; it is computed in 128-bit integers, exact for any token counts whose cost
// fits an int64.
//
// Cost fails, rather than guess, for a model not in t (naming the ones that are), a negative token
// count, CachedInput over Input (a clamp would count the excess as free; the usual cause is
// Anthropic's input_tokens given alone, without the cache reads it leaves out), a price outside
// 0..MaxPrice, or a cost over math.MaxInt64.
func (t PriceTable) Cost(model string, u Usage) (int64, error) {
	p, err := t.price(model)
	if err != nil {
		return 0, err
	}
	for _, f := range []struct {
		name string
		v    int64
	}{{"Input", u.Input}, {"CachedInput", u.CachedInput}, {"Output", u.Output}} {
		if f.v < 0 {
			return 0, fmt.Errorf("throttle: cost of %q: Usage.%s must not be negative, got %d", model, f.name, f.v)
		}
	}
	if u.CachedInput > u.Input {
		return 0, fmt.Errorf("throttle: cost of %q: Usage.CachedInput (%d) must not exceed Usage.Input (%d), "+
			"which counts all input tokens, cached ones included", model, u.CachedInput, u.Input)
	}
	m, ok := charge(u.Input-u.CachedInput, p.Input, u.CachedInput, p.cached(), u.Output, p.Output)
	if !ok {
		return 0, fmt.Errorf("throttle: cost of %q for %+v overflows int64 micro-units", model, u)
	}
	return m, nil
}

// Estimate is the money to reserve for a ticket on model whose token estimate is c, in micro-units
// of t's Currency: c.Input at the model's full Input price, as if nothing were read from a cache
// (a reservation must not count on a cache hit), and c.Output at its Output price, rounded up to
// the next micro-unit. Put it in Spend.Money beside c. It fails as Cost does, for an unknown model,
// a negative figure or an overflow, and for an estimate over MaxAllowanceAmount, which no money
// allowance could ever admit.
func (t PriceTable) Estimate(model string, c Cost) (int64, error) {
	p, err := t.price(model)
	if err != nil {
		return 0, err
	}
	for _, f := range []struct {
		name string
		v    int64
	}{{"Input", c.Input}, {"Output", c.Output}} {
		if f.v < 0 {
			return 0, fmt.Errorf("throttle: estimate for %q: Cost.%s must not be negative, got %d", model, f.name, f.v)
		}
	}
	m, ok := charge(c.Input, p.Input, 0, 0, c.Output, p.Output)
	if !ok {
		return 0, fmt.Errorf("throttle: estimate for %q of %+v overflows int64 micro-units", model, c)
	}
	if m > MaxAllowanceAmount {
		return 0, fmt.Errorf("throttle: estimate for %q: %d micro-units, more than an allowance may hold (%d)", model, m, MaxAllowanceAmount)
	}
	return m, nil
}

// price is model's price in t, checked to be in bounds, or an error naming the known models.
func (t PriceTable) price(model string) (Price, error) {
	p, ok := t.Models[model]
	if !ok {
		if len(t.Models) == 0 {
			return Price{}, fmt.Errorf("throttle: price table: unknown model %q: the table prices no models", model)
		}
		known := slices.Sorted(maps.Keys(t.Models))
		more := ""
		if n := len(known) - maxListedModels; n > 0 {
			known, more = known[:maxListedModels], fmt.Sprintf(" and %d more", n)
		}
		return Price{}, fmt.Errorf("throttle: price table: unknown model %q: the table prices %q%s",
			model, known, more)
	}
	if err := p.check(model); err != nil {
		return Price{}, err
	}
	return p, nil
}

// charge is the sum of three token counts times their prices per million, divided by a million
// and rounded up, and true; or false when it does not fit an int64. Counts and prices must not be
// negative. Each product is below 2^126 and their sum below 2^128, so the sum is exact in 128 bits
// and rounded once.
func charge(n1, p1, n2, p2, n3, p3 int64) (int64, bool) {
	var hi, lo uint64
	for _, t := range [3][2]int64{{n1, p1}, {n2, p2}, {n3, p3}} {
		h, l := bits.Mul64(uint64(t[0]), uint64(t[1]))
		var carry uint64
		lo, carry = bits.Add64(lo, l, 0)
		hi, _ = bits.Add64(hi, h, carry)
	}
	if hi >= perMillion { // the quotient would not fit 64 bits (and Div64 would panic)
		return 0, false
	}
	q, r := bits.Div64(hi, lo, perMillion)
	if q > math.MaxInt64 {
		return 0, false
	}
	if r != 0 {
		q++ // at most 2^63: no wrap
	}
	if q > math.MaxInt64 {
		return 0, false
	}
	return int64(q), true
}

// ParsePriceTable reads a PriceTable from JSON and validates it:
//
//	{"currency": "USD", "as_of": "2025-09-01", "source": "https://openai.com/api/pricing/",
//	 "models": {"gpt-4o-mini": {"input": 150000, "cached_input": 75000, "output": 600000}}}
//
// It is strict, as a table that spends money should be: an unknown field (a misspelt
// "cached_imput" would otherwise leave cached input at the full price), a model named twice, or
// anything after the table is an error, as is any problem Validate finds.
func ParsePriceTable(data []byte) (PriceTable, error) {
	var t PriceTable
	d := json.NewDecoder(bytes.NewReader(data))
	d.DisallowUnknownFields()
	if err := d.Decode(&t); err != nil {
		return PriceTable{}, fmt.Errorf("throttle: price table: %w", err)
	}
	if _, err := d.Token(); err != io.EOF {
		return PriceTable{}, fmt.Errorf("throttle: price table: unexpected data after the table at byte %d",
			d.InputOffset())
	}
	if err := noDuplicateModels(data); err != nil {
		return PriceTable{}, err
	}
	if err := t.Validate(); err != nil {
		return PriceTable{}, err
	}
	return t, nil
}

// noDuplicateModels reports a model named twice in the "models" object of data, a table that has
// already decoded: encoding/json would keep the last of the two without a word.
func noDuplicateModels(data []byte) error {
	var top struct {
		Models json.RawMessage `json:"models"`
	}
	if err := json.Unmarshal(data, &top); err != nil || len(top.Models) == 0 {
		return err
	}
	d := json.NewDecoder(bytes.NewReader(top.Models))
	if tok, err := d.Token(); err != nil || tok != json.Delim('{') {
		return err // null: no models, which Validate reports
	}
	seen := map[string]bool{}
	for d.More() {
		tok, err := d.Token()
		if err != nil {
			return err
		}
		name, _ := tok.(string)
		if seen[name] {
			return fmt.Errorf("throttle: price table: Models: model %q is priced twice", name)
		}
		seen[name] = true
		var skip json.RawMessage
		if err := d.Decode(&skip); err != nil {
			return err
		}
	}
	return nil
}
