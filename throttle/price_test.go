package throttle_test

import (
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/throttle"
)

// mini is gpt-4o-mini's published price: $0.15 in, $0.075 cached, $0.60 out per million tokens.
var mini = throttle.Price{Input: 150_000, CachedInput: 75_000, Output: 600_000}

func table(models map[string]throttle.Price) throttle.PriceTable {
	return throttle.PriceTable{Currency: "USD", Models: models}
}

// exactCost is the reference Cost: the exact sum in big integers, rounded up to a micro-unit.
func exactCost(p throttle.Price, u throttle.Usage) *big.Int {
	cached := p.CachedInput
	if cached == 0 {
		cached = p.Input
	}
	sum := new(big.Int)
	for _, t := range [][2]int64{{u.Input - u.CachedInput, p.Input}, {u.CachedInput, cached}, {u.Output, p.Output}} {
		sum.Add(sum, new(big.Int).Mul(big.NewInt(t[0]), big.NewInt(t[1])))
	}
	sum.Add(sum, big.NewInt(999_999))
	return sum.Quo(sum, big.NewInt(1_000_000))
}

func TestPriceTableCost(t *testing.T) {
	t.Parallel()

	t.Run("RoundsUpOnce", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			name string
			p    throttle.Price
			u    throttle.Usage
			want int64
		}{
			{"Nothing", mini, throttle.Usage{}, 0},
			{"OneToken", mini, throttle.Usage{Input: 1}, 1},    // 0.15 micro-units
			{"SixTokens", mini, throttle.Usage{Input: 6}, 1},   // 0.9
			{"SevenTokens", mini, throttle.Usage{Input: 7}, 2}, // 1.05
			{"AMillion", mini, throttle.Usage{Input: 1_000_000}, 150_000},
			{"AMillionAndOne", mini, throttle.Usage{Input: 1_000_001}, 150_001},
			{"OneOutputToken", mini, throttle.Usage{Output: 1}, 1}, // 0.6
			// 0.15 + 0.6 = 0.75: the sum is rounded, not each part (which would give 2).
			{"SumNotParts", mini, throttle.Usage{Input: 1, Output: 1}, 1},
			// 0.075 + 0.6: one cached token and one output token.
			{"CachedToken", mini, throttle.Usage{Input: 1, CachedInput: 1, Output: 1}, 1},
			{"FreeModel", throttle.Price{}, throttle.Usage{Input: 1e12, Output: 1e12}, 0},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				got, err := table(map[string]throttle.Price{"m": tc.p}).Cost("m", tc.u)
				require.NoError(t, err)
				require.Equal(t, tc.want, got)
				require.Equal(t, exactCost(tc.p, tc.u).Int64(), got)
			})
		}
	})

	t.Run("PricesCachedInputApart", func(t *testing.T) {
		t.Parallel()
		pt := table(map[string]throttle.Price{"gpt-4o-mini": mini})
		// 4,000 uncached at $0.15, 8,000 cached at $0.075, 500 out at $0.60: 600 + 600 + 300.
		got, err := pt.Cost("gpt-4o-mini", throttle.Usage{Input: 12_000, CachedInput: 8_000, Output: 500})
		require.NoError(t, err)
		require.Equal(t, int64(1_500), got)
		// The same call without a cache hit costs more.
		got, err = pt.Cost("gpt-4o-mini", throttle.Usage{Input: 12_000, Output: 500})
		require.NoError(t, err)
		require.Equal(t, int64(2_100), got)
	})

	t.Run("ZeroCachedPriceChargesInput", func(t *testing.T) {
		t.Parallel()
		pt := table(map[string]throttle.Price{"no-cache": {Input: 1_000_000, Output: 2_000_000}})
		cached, err := pt.Cost("no-cache", throttle.Usage{Input: 1_000, CachedInput: 1_000, Output: 10})
		require.NoError(t, err)
		plain, err := pt.Cost("no-cache", throttle.Usage{Input: 1_000, Output: 10})
		require.NoError(t, err)
		require.Equal(t, int64(1_020), cached)
		require.Equal(t, plain, cached)
	})

	t.Run("Extremes", func(t *testing.T) {
		t.Parallel()
		top := throttle.Price{Input: throttle.MaxPrice, CachedInput: throttle.MaxPrice - 1, Output: throttle.MaxPrice}
		dollar := throttle.Price{Input: 1_000_000, Output: 1} // a micro-unit an input token
		pt := table(map[string]throttle.Price{"top": top, "dollar": dollar, "cheapest": {Input: 1, Output: 1}})
		for _, tc := range []struct {
			name  string
			model string
			u     throttle.Usage
			want  int64 // 0: overflow
		}{
			// A million million tokens each way at a dollar a token: 2e24 before the division.
			{"TrillionTokensAtMaxPrice", "top", throttle.Usage{Input: 1e12, Output: 1e12}, 2e18},
			{"TrillionCachedAtMaxPrice", "top", throttle.Usage{Input: 1e12, CachedInput: 1e12, Output: 1e12}, 2e18 - 1e6},
			{"MaxTokensAtOneMicroPerMillion", "cheapest", throttle.Usage{Input: math.MaxInt64}, 9_223_372_036_855},
			{"MaxTokensAtOneMicroEach", "dollar", throttle.Usage{Input: math.MaxInt64}, math.MaxInt64},
			{"OneMicroOver", "dollar", throttle.Usage{Input: math.MaxInt64, Output: 1_000_000}, 0},
			// Exactly MaxInt64 and a fraction: rounding up would pass MaxInt64.
			{"RoundingOver", "dollar", throttle.Usage{Input: math.MaxInt64, Output: 1}, 0},
			{"MaxTokensAtMaxPrice", "top", throttle.Usage{Input: math.MaxInt64, Output: math.MaxInt64}, 0},
			{"JustOverAtMaxPrice", "top", throttle.Usage{Input: 9_223_372_036_855}, 0},
			{"JustUnderAtMaxPrice", "top", throttle.Usage{Input: 9_223_372_036_854}, 9_223_372_036_854_000_000},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				got, err := pt.Cost(tc.model, tc.u)
				if tc.want == 0 {
					require.ErrorContains(t, err, "overflows int64")
					require.Zero(t, got)
					return
				}
				require.NoError(t, err)
				require.Equal(t, tc.want, got)
			})
		}
	})

	t.Run("MatchesBigIntegers", func(t *testing.T) {
		t.Parallel()
		r := rand.New(rand.NewPCG(1, 2))
		for range 10_000 {
			p := throttle.Price{Input: r.Int64N(throttle.MaxPrice + 1), Output: r.Int64N(throttle.MaxPrice + 1)}
			if r.IntN(2) == 0 {
				p.CachedInput = r.Int64N(throttle.MaxPrice + 1)
			}
			limit := []int64{1_000, 1e6, 1e12}[r.IntN(3)]
			u := throttle.Usage{Input: r.Int64N(limit + 1), Output: r.Int64N(limit + 1)}
			u.CachedInput = r.Int64N(u.Input + 1)
			got, err := table(map[string]throttle.Price{"m": p}).Cost("m", u)
			require.NoError(t, err, "%+v %+v", p, u)
			require.Equal(t, exactCost(p, u).Int64(), got, "%+v %+v", p, u)
		}
	})

	t.Run("Refuses", func(t *testing.T) {
		t.Parallel()
		pt := table(map[string]throttle.Price{"gpt-4o-mini": mini, "claude-sonnet-4-20250514": mini, "bad": {Input: -1}})
		for _, tc := range []struct {
			name  string
			pt    throttle.PriceTable
			model string
			u     throttle.Usage
			want  string
		}{
			{"UnknownModel", pt, "gpt-5", throttle.Usage{Input: 1},
				`unknown model "gpt-5": the table prices ["bad" "claude-sonnet-4-20250514" "gpt-4o-mini"]`},
			{"EmptyTable", throttle.PriceTable{}, "gpt-5", throttle.Usage{}, `unknown model "gpt-5": the table prices no models`},
			{"NegativeInput", pt, "gpt-4o-mini", throttle.Usage{Input: -1}, "Usage.Input must not be negative, got -1"},
			{"NegativeCachedInput", pt, "gpt-4o-mini", throttle.Usage{Input: 5, CachedInput: -2},
				"Usage.CachedInput must not be negative, got -2"},
			{"NegativeOutput", pt, "gpt-4o-mini", throttle.Usage{Output: -3}, "Usage.Output must not be negative, got -3"},
			{"CachedOverInput", pt, "gpt-4o-mini", throttle.Usage{Input: 100, CachedInput: 900},
				"Usage.CachedInput (900) must not exceed Usage.Input (100)"},
			{"PriceOutOfBounds", pt, "bad", throttle.Usage{Input: 1}, `Models["bad"].Input must be in 0..1000000000000`},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				got, err := tc.pt.Cost(tc.model, tc.u)
				require.ErrorContains(t, err, tc.want)
				require.Zero(t, got)
			})
		}
	})

	t.Run("UnknownModelListIsCut", func(t *testing.T) {
		t.Parallel()
		models := map[string]throttle.Price{}
		for i := range 25 {
			models[fmt.Sprintf("m%02d", i)] = mini
		}
		_, err := table(models).Cost("nope", throttle.Usage{})
		require.ErrorContains(t, err, `"m00" "m01"`)
		require.ErrorContains(t, err, `"m19"] and 5 more`)
		require.NotContains(t, err.Error(), `"m20"`)
	})
}

func TestPriceTableEstimate(t *testing.T) {
	t.Parallel()
	pt := table(map[string]throttle.Price{"gpt-4o-mini": mini, "top": {Input: throttle.MaxPrice, Output: throttle.MaxPrice}})

	// 12,000 in at the full $0.15 (no cache hit assumed) and 1,000 out at $0.60: 1,800 + 600.
	got, err := pt.Estimate("gpt-4o-mini", throttle.Cost{Input: 12_000, Output: 1_000})
	require.NoError(t, err)
	require.Equal(t, int64(2_400), got)
	// The estimate is what the same tokens cost with no cache hit.
	cost, err := pt.Cost("gpt-4o-mini", throttle.Usage{Input: 12_000, Output: 1_000})
	require.NoError(t, err)
	require.Equal(t, cost, got)

	got, err = pt.Estimate("gpt-4o-mini", throttle.Tokens(1))
	require.NoError(t, err)
	require.Equal(t, int64(1), got, "rounded up")

	// The largest estimate is what a money allowance may hold: one micro-unit more fails.
	got, err = pt.Estimate("top", throttle.Cost{Input: 5e11, Output: 5e11})
	require.NoError(t, err)
	require.Equal(t, throttle.MaxAllowanceAmount, got)

	for _, tc := range []struct {
		model string
		c     throttle.Cost
		want  string
	}{
		{"gpt-4o-mini", throttle.Cost{Input: -1}, `estimate for "gpt-4o-mini": Cost.Input must not be negative, got -1`},
		{"gpt-4o-mini", throttle.Cost{Input: 1, Output: -7}, "Cost.Output must not be negative, got -7"},
		{"gpt-5", throttle.Cost{}, `unknown model "gpt-5": the table prices ["gpt-4o-mini" "top"]`},
		{"top", throttle.Cost{Input: math.MaxInt64}, "overflows int64"},
		{"top", throttle.Cost{Input: 5e11 + 1, Output: 5e11}, "1000000000001000000 micro-units, more than an allowance may hold (1000000000000000000)"},
	} {
		got, err := pt.Estimate(tc.model, tc.c)
		require.ErrorContains(t, err, tc.want)
		require.Zero(t, got)
	}
}

func TestPriceTableValidate(t *testing.T) {
	t.Parallel()
	with := func(f func(*throttle.PriceTable)) throttle.PriceTable {
		pt := throttle.PriceTable{Currency: "USD", Models: map[string]throttle.Price{"gpt-4o-mini": mini}, AsOf: "2025-09-01"}
		f(&pt)
		return pt
	}
	price := func(p throttle.Price) func(*throttle.PriceTable) {
		return func(pt *throttle.PriceTable) { pt.Models = map[string]throttle.Price{"m": p} }
	}

	for name, pt := range map[string]throttle.PriceTable{
		"Example":       with(func(*throttle.PriceTable) {}),
		"NoAsOf":        with(func(pt *throttle.PriceTable) { pt.AsOf = "" }),
		"FreeModel":     with(price(throttle.Price{})),
		"AtMaxPrice":    with(price(throttle.Price{Input: throttle.MaxPrice, CachedInput: throttle.MaxPrice, Output: throttle.MaxPrice})),
		"OtherCurrency": with(func(pt *throttle.PriceTable) { pt.Currency = "EUR" }),
		"LeapDay":       with(func(pt *throttle.PriceTable) { pt.AsOf = "2028-02-29" }),
	} {
		require.NoError(t, pt.Validate(), name)
	}

	for _, tc := range []struct {
		name string
		pt   throttle.PriceTable
		want string
	}{
		{"NoCurrency", with(func(pt *throttle.PriceTable) { pt.Currency = "" }), `Currency must be a 3-letter ISO 4217 code in upper case (USD), got ""`},
		{"LowerCase", with(func(pt *throttle.PriceTable) { pt.Currency = "usd" }), `Currency must be a 3-letter ISO 4217 code in upper case (USD), got "usd"`},
		{"TwoLetters", with(func(pt *throttle.PriceTable) { pt.Currency = "US" }), `got "US"`},
		{"Symbol", with(func(pt *throttle.PriceTable) { pt.Currency = "U$D" }), `got "U$D"`},
		{"NilModels", with(func(pt *throttle.PriceTable) { pt.Models = nil }), "Models must price at least one model, got none"},
		{"EmptyModels", with(func(pt *throttle.PriceTable) { pt.Models = map[string]throttle.Price{} }), "Models must price at least one model"},
		{"EmptyName", with(func(pt *throttle.PriceTable) { pt.Models[""] = mini }), `a model name must be non-empty, without leading or trailing space, got ""`},
		{"PaddedName", with(func(pt *throttle.PriceTable) { pt.Models["gpt-4o "] = mini }), `got "gpt-4o "`},
		{"NegativeInput", with(price(throttle.Price{Input: -1})), `Models["m"].Input must be in 0..1000000000000 micro-units per million tokens, got -1`},
		{"NegativeCachedInput", with(price(throttle.Price{CachedInput: -5})), `Models["m"].CachedInput must be in 0..1000000000000 micro-units per million tokens, got -5`},
		{"NegativeOutput", with(price(throttle.Price{Output: -9})), `Models["m"].Output must be in 0..1000000000000 micro-units per million tokens, got -9`},
		{"HugeInput", with(price(throttle.Price{Input: throttle.MaxPrice + 1})), `Models["m"].Input must be in 0..1000000000000 micro-units per million tokens, got 1000000000001`},
		{"HugeCachedInput", with(price(throttle.Price{CachedInput: math.MaxInt64})), `Models["m"].CachedInput must be in 0..1000000000000 micro-units per million tokens, got 9223372036854775807`},
		{"HugeOutput", with(price(throttle.Price{Output: throttle.MaxPrice + 1})), `Models["m"].Output must be in 0..1000000000000 micro-units per million tokens, got 1000000000001`},
		{"AsOfNotADate", with(func(pt *throttle.PriceTable) { pt.AsOf = "September 2025" }), `AsOf must be a date as YYYY-MM-DD, got "September 2025"`},
		{"AsOfUnpadded", with(func(pt *throttle.PriceTable) { pt.AsOf = "2025-9-1" }), `got "2025-9-1"`},
		{"AsOfNoSuchDay", with(func(pt *throttle.PriceTable) { pt.AsOf = "2025-02-29" }), `got "2025-02-29"`},
		{"AsOfWithTime", with(func(pt *throttle.PriceTable) { pt.AsOf = "2025-09-01T00:00:00Z" }), `got "2025-09-01T00:00:00Z"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.pt.Validate()
			require.ErrorContains(t, err, "throttle: price table: ")
			require.ErrorContains(t, err, tc.want)
		})
	}

	t.Run("FirstBadModelByName", func(t *testing.T) {
		t.Parallel()
		pt := table(map[string]throttle.Price{"b": {Input: -2}, "a": {Output: -1}, "c": {Input: -3}})
		for range 10 {
			require.ErrorContains(t, pt.Validate(), `Models["a"].Output`)
		}
	})
}

func TestParsePriceTable(t *testing.T) {
	t.Parallel()

	t.Run("RoundTrips", func(t *testing.T) {
		t.Parallel()
		pt := throttle.PriceTable{
			Currency: "USD",
			Models: map[string]throttle.Price{
				"gpt-4o-mini": mini,
				"no-cache":    {Input: 1_000_000, Output: 2_000_000},
			},
			AsOf:   "2025-09-01",
			Source: "https://openai.com/api/pricing/",
		}
		data, err := json.Marshal(pt)
		require.NoError(t, err)
		require.JSONEq(t, `{"currency": "USD", "as_of": "2025-09-01", "source": "https://openai.com/api/pricing/",
			"models": {"gpt-4o-mini": {"input": 150000, "cached_input": 75000, "output": 600000},
			           "no-cache": {"input": 1000000, "output": 2000000}}}`, string(data))
		got, err := throttle.ParsePriceTable(data)
		require.NoError(t, err)
		require.Equal(t, pt, got)

		// AsOf and Source are optional, and whitespace around the table is not trailing data.
		got, err = throttle.ParsePriceTable([]byte("\n {\"currency\": \"EUR\", \"models\": {\"m\": {\"input\": 1, \"output\": 2}}}\n\t"))
		require.NoError(t, err)
		require.Equal(t, throttle.PriceTable{Currency: "EUR", Models: map[string]throttle.Price{"m": {Input: 1, Output: 2}}}, got)
	})

	t.Run("UsageRoundTrips", func(t *testing.T) {
		t.Parallel()
		u := throttle.Usage{Input: 12_000, CachedInput: 8_000, Output: 500}
		data, err := json.Marshal(u)
		require.NoError(t, err)
		require.JSONEq(t, `{"input": 12000, "cached_input": 8000, "output": 500}`, string(data))
		var got throttle.Usage
		require.NoError(t, json.Unmarshal(data, &got))
		require.Equal(t, u, got)
	})

	t.Run("IsStrict", func(t *testing.T) {
		t.Parallel()
		const models = `"models": {"m": {"input": 1, "output": 2}}`
		for _, tc := range []struct {
			name, in, want string
		}{
			{"Empty", ``, "EOF"},
			{"NotJSON", `currency: USD`, "invalid character"},
			{"NotAnObject", `["USD"]`, "cannot unmarshal array"},
			{"UnknownField", `{"currency": "USD", "note": "x", ` + models + `}`, `unknown field "note"`},
			{"MisspeltPriceField", `{"currency": "USD", "models": {"m": {"input": 1, "cached_imput": 1, "output": 2}}}`,
				`unknown field "cached_imput"`},
			{"TrailingObject", `{"currency": "USD", ` + models + `} {}`, "unexpected data after the table at byte"},
			{"TrailingGarbage", `{"currency": "USD", ` + models + `} x`, "unexpected data after the table"},
			{"ModelTwice", `{"currency": "USD", "models": {"m": {"input": 1}, "n": {"input": 1}, "m": {"input": 2}}}`,
				`model "m" is priced twice`},
			{"FractionalPrice", `{"currency": "USD", "models": {"m": {"input": 0.15, "output": 2}}}`, "cannot unmarshal number 0.15"},
			{"PriceAsString", `{"currency": "USD", "models": {"m": {"input": "150000"}}}`, "cannot unmarshal string"},
			{"NullModels", `{"currency": "USD", "models": null}`, "Models must price at least one model"},
			{"Invalid", `{"currency": "usd", ` + models + `}`, `Currency must be a 3-letter ISO 4217 code in upper case (USD), got "usd"`},
			{"BadDate", `{"currency": "USD", "as_of": "2025-09", ` + models + `}`, `AsOf must be a date as YYYY-MM-DD, got "2025-09"`},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				got, err := throttle.ParsePriceTable([]byte(tc.in))
				require.ErrorContains(t, err, "throttle: price table: ")
				require.ErrorContains(t, err, tc.want)
				require.Zero(t, got)
			})
		}
	})
}

// TestPriceExampleFile keeps docs/prices-example.json parsing: it is what operators copy.
func TestPriceExampleFile(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("../docs/prices-example.json")
	require.NoError(t, err)
	pt, err := throttle.ParsePriceTable(data)
	require.NoError(t, err)
	require.Equal(t, "USD", pt.Currency)
	require.NotEmpty(t, pt.AsOf)
	require.Contains(t, pt.Source, "https://openai.com/api/pricing/")
	require.Contains(t, pt.Source, "https://docs.anthropic.com/en/docs/about-claude/pricing")
	require.Contains(t, pt.Source, "supply your own table")
	require.Equal(t, mini, pt.Models["gpt-4o-mini"])
	for _, m := range []string{"gpt-4o", "claude-3-5-haiku-20241022", "claude-sonnet-4-20250514"} {
		p, ok := pt.Models[m]
		require.True(t, ok, m)
		require.Positive(t, p.CachedInput, m)
		require.Less(t, p.CachedInput, p.Input, m)
		require.Less(t, p.Input, p.Output, m)
	}
}
