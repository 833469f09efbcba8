package throttle_test

import (
	"encoding/json"
	"math/rand/v2"
	"testing"
	"time"
	_ "time/tzdata" // the zones these tests name, on machines without a zone database

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/throttle"
)

func TestParseAllowance(t *testing.T) {
	t.Parallel()

	t.Run("ReadsEachForm", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			in   string
			want throttle.Allowance
		}{
			{"tokens=5000000/day@America/Los_Angeles", throttle.Allowance{Meter: throttle.MeterTokens, Amount: 5_000_000,
				Calendar: throttle.CalendarDay, Zone: "America/Los_Angeles"}},
			{"requests=1000/hour", throttle.Allowance{Meter: throttle.MeterRequests, Amount: 1000, Calendar: throttle.CalendarHour}},
			{"usd=5.00/day", throttle.Allowance{Meter: throttle.MeterMoney, Currency: "USD", Amount: 5_000_000, Calendar: throttle.CalendarDay}},
			{"output_tokens=200000/24h", throttle.Allowance{Meter: throttle.MeterOutputTokens, Amount: 200_000, Rolling: 24 * time.Hour}},
			{"input_tokens=1_000_000/week@Europe/Berlin", throttle.Allowance{Meter: throttle.MeterInputTokens, Amount: 1_000_000,
				Calendar: throttle.CalendarWeek, Zone: "Europe/Berlin"}},
			{"EUR=0.000001/month", throttle.Allowance{Meter: throttle.MeterMoney, Currency: "EUR", Amount: 1, Calendar: throttle.CalendarMonth}},
			{"jpy=500/month@Asia/Tokyo", throttle.Allowance{Meter: throttle.MeterMoney, Currency: "JPY", Amount: 500_000_000,
				Calendar: throttle.CalendarMonth, Zone: "Asia/Tokyo"}},
			{"  requests=1/1s  ", throttle.Allowance{Meter: throttle.MeterRequests, Amount: 1, Rolling: time.Second}},
		} {
			t.Run(tc.in, func(t *testing.T) {
				t.Parallel()
				a, err := throttle.ParseAllowance(tc.in)
				require.NoError(t, err)
				require.Equal(t, tc.want, a)
			})
		}
	})

	t.Run("StringRoundTrips", func(t *testing.T) {
		t.Parallel()
		for _, s := range []string{
			"tokens=5000000/day@America/Los_Angeles", "requests=1000/hour", "usd=5.00/day", "output_tokens=200000/24h",
			"input_tokens=7/week@Europe/Berlin", "eur=0.000001/month@Europe/Berlin", "usd=1.234567/1h30m", "usd=0.50/hour",
			"tokens=7/45s", "requests=1/hour@UTC", "tokens=1000000000000000000/8784h", "gbp=1000000000000.00/1h1s",
		} {
			a, err := throttle.ParseAllowance(s)
			require.NoError(t, err, s)
			require.Equal(t, s, a.String())
		}
	})

	t.Run("WritesTheCanonicalForm", func(t *testing.T) {
		t.Parallel()
		for in, want := range map[string]string{
			"USD=5/day":            "usd=5.00/day",
			"usd=5.5/day":          "usd=5.50/day",
			"usd=0012.340/day":     "usd=12.34/day",
			"tokens=5_000_000/2d":  "", // days are not a Go duration: refused
			"tokens=5_000_000/48h": "tokens=5000000/48h",
			"requests=1/90m":       "requests=1/1h30m",
			"requests=1/3600s":     "requests=1/1h",
			"requests=1/1.5h":      "requests=1/1h30m",
		} {
			a, err := throttle.ParseAllowance(in)
			if want == "" {
				require.Error(t, err, in)
				continue
			}
			require.NoError(t, err, in)
			require.Equal(t, want, a.String(), in)
		}
	})

	t.Run("NamesThePartThatIsWrong", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct{ in, want string }{
			{"", `throttle: allowance "": no '=': want METER=AMOUNT/PERIOD[@ZONE], e.g. tokens=5000000/day@America/Los_Angeles`},
			{"tokens 5000/day", `throttle: allowance "tokens 5000/day": no '=': want METER=AMOUNT/PERIOD[@ZONE], e.g. tokens=5000000/day@America/Los_Angeles`},
			{"tokens=5000", `throttle: allowance "tokens=5000": no '/' before the period: want METER=AMOUNT/PERIOD[@ZONE], e.g. tokens=5000000/day@America/Los_Angeles`},
			{"token=5000/day", `throttle: allowance "token=5000/day": meter "token": want requests, tokens, input_tokens, output_tokens or a currency code (usd)`},
			{"us$=5/day", `throttle: allowance "us$=5/day": meter "us$": want requests, tokens, input_tokens, output_tokens or a currency code (usd)`},
			{"tokens=5k/day", `throttle: allowance "tokens=5k/day": amount "5k": want a whole number, e.g. 5000000 or 5_000_000`},
			{"tokens=5.5/day", `throttle: allowance "tokens=5.5/day": amount "5.5": want a whole number, e.g. 5000000 or 5_000_000`},
			{"tokens=-5/day", `throttle: allowance "tokens=-5/day": amount "-5": want a whole number, e.g. 5000000 or 5_000_000`},
			{"tokens=_5/day", `throttle: allowance "tokens=_5/day": amount "_5": want a whole number, e.g. 5000000 or 5_000_000`},
			{"tokens=5__0/day", `throttle: allowance "tokens=5__0/day": amount "5__0": want a whole number, e.g. 5000000 or 5_000_000`},
			{"tokens=0/day", `throttle: allowance "tokens=0/day": amount "0": must be more than 0`},
			{"tokens=1000000000000000001/day", `throttle: allowance "tokens=1000000000000000001/day": amount "1000000000000000001": more than 1000000000000000000`},
			{"tokens=99999999999999999999/day", `throttle: allowance "tokens=99999999999999999999/day": amount "99999999999999999999": more than 1000000000000000000`},
			{"usd=5.0000001/day", `throttle: allowance "usd=5.0000001/day": amount "5.0000001": more than 6 decimals (money counts in millionths)`},
			{"usd=5./day", `throttle: allowance "usd=5./day": amount "5.": want a decimal amount, e.g. 5.00`},
			{"usd=.5/day", `throttle: allowance "usd=.5/day": amount ".5": want a decimal amount, e.g. 5.00`},
			{"usd=$5/day", `throttle: allowance "usd=$5/day": amount "$5": want a decimal amount, e.g. 5.00`},
			{"usd=0.00/day", `throttle: allowance "usd=0.00/day": amount "0.00": must be more than 0`},
			{"usd=1000000000001/day", `throttle: allowance "usd=1000000000001/day": amount "1000000000001": more than 1000000000000`},
			{"tokens=5/dya", `throttle: allowance "tokens=5/dya": period "dya": want hour, day, week, month or a duration such as 24h`},
			{"tokens=5/-24h", `throttle: allowance "tokens=5/-24h": period "-24h": want hour, day, week, month or a duration such as 24h`},
			{"tokens=5/", `throttle: allowance "tokens=5/": period "": want hour, day, week, month or a duration such as 24h`},
			{"tokens=5/24h@UTC", `throttle: allowance "tokens=5/24h@UTC": zone "UTC": a rolling period (24h) takes no zone`},
			{"tokens=5/day@", `throttle: allowance "tokens=5/day@": empty zone after '@': want an IANA zone such as America/Los_Angeles`},
			{"tokens=5/day@Mars/Olympus", `throttle: allowance "tokens=5/day@Mars/Olympus": Zone must be an IANA time zone, got "Mars/Olympus" (unknown time zone Mars/Olympus)`},
			{"tokens=5/day@Local", `throttle: allowance "tokens=5/day@Local": Zone must be an IANA time zone, got "Local" (the machine's Local zone differs between replicas: name the zone)`},
			{"tokens=5/500ms", `throttle: allowance "tokens=5/500ms": Rolling must be in 1s..8784h0m0s, got 500ms`},
			{"tokens=5/1.5s", `throttle: allowance "tokens=5/1.5s": Rolling must be a whole number of seconds, got 1.5s`},
			{"tokens=5/8785h", `throttle: allowance "tokens=5/8785h": Rolling must be in 1s..8784h0m0s, got 8785h0m0s`},
		} {
			_, err := throttle.ParseAllowance(tc.in)
			require.EqualError(t, err, tc.want, tc.in)
		}
	})
}

func TestAllowance_Validate(t *testing.T) {
	t.Parallel()
	day := throttle.Allowance{Meter: throttle.MeterTokens, Amount: 100, Calendar: throttle.CalendarDay}
	with := func(f func(a *throttle.Allowance)) throttle.Allowance { a := day; f(&a); return a }
	require.NoError(t, day.Validate())
	for _, tc := range []struct {
		a    throttle.Allowance
		want string
	}{
		{throttle.Allowance{}, `throttle: allowance "=0/0s": Meter must be one of requests, tokens, input_tokens, output_tokens, money, got ""`},
		{with(func(a *throttle.Allowance) { a.Meter = "dollars" }),
			`throttle: allowance "dollars=100/day": Meter must be one of requests, tokens, input_tokens, output_tokens, money, got "dollars"`},
		{with(func(a *throttle.Allowance) { a.Currency = "USD" }),
			`throttle: allowance "tokens=100/day": Currency must be empty when Meter is not money, got "USD"`},
		{with(func(a *throttle.Allowance) { a.Meter = throttle.MeterMoney }),
			`throttle: allowance "=0.0001/day": Currency must be a 3-letter ISO 4217 code in upper case (USD), got ""`},
		{with(func(a *throttle.Allowance) { a.Meter, a.Currency = throttle.MeterMoney, "usd" }),
			`throttle: allowance "usd=0.0001/day": Currency must be a 3-letter ISO 4217 code in upper case (USD), got "usd"`},
		{with(func(a *throttle.Allowance) { a.Amount = 0 }), `throttle: allowance "tokens=0/day": Amount must be in 1..1000000000000000000, got 0`},
		{with(func(a *throttle.Allowance) { a.Amount = -5 }), `throttle: allowance "tokens=-5/day": Amount must be in 1..1000000000000000000, got -5`},
		{with(func(a *throttle.Allowance) { a.Rolling = time.Hour }),
			`throttle: allowance "tokens=100/day": set either Calendar or Rolling, not both (Calendar "day", Rolling 1h0m0s)`},
		{with(func(a *throttle.Allowance) { a.Calendar = "" }),
			`throttle: allowance "tokens=100/0s": set one of Calendar (hour, day, week, month) or Rolling`},
		{with(func(a *throttle.Allowance) { a.Calendar = "fortnight" }),
			`throttle: allowance "tokens=100/fortnight": Calendar must be one of hour, day, week, month, got "fortnight"`},
		{with(func(a *throttle.Allowance) { a.Calendar, a.Rolling = "", -time.Hour }),
			`throttle: allowance "tokens=100/-1h0m0s": Rolling must be in 1s..8784h0m0s, got -1h0m0s`},
		{with(func(a *throttle.Allowance) { a.Calendar, a.Rolling, a.Zone = "", time.Hour, "UTC" }),
			`throttle: allowance "tokens=100/1h@UTC": Zone must be empty for a rolling period, got "UTC"`},
		{with(func(a *throttle.Allowance) { a.OnSpent = "drop" }), `throttle: allowance "tokens=100/day": OnSpent must be wait or refuse, got "drop"`},
	} {
		require.EqualError(t, tc.a.Validate(), tc.want)
	}
	for _, ok := range []throttle.OnSpent{"", throttle.OnSpentWait, throttle.OnSpentRefuse} {
		require.NoError(t, with(func(a *throttle.Allowance) { a.OnSpent = ok }).Validate())
	}
}

// randomAllowance is a valid allowance drawn from r, with a zero OnSpent.
func randomAllowance(r *rand.Rand) throttle.Allowance {
	meters := []throttle.Meter{throttle.MeterRequests, throttle.MeterTokens, throttle.MeterInputTokens,
		throttle.MeterOutputTokens, throttle.MeterMoney}
	a := throttle.Allowance{Meter: meters[r.IntN(len(meters))], Amount: 1 + r.Int64N([]int64{10, 1e6, 1e18}[r.IntN(3)])}
	if a.Meter == throttle.MeterMoney {
		a.Currency = []string{"USD", "EUR", "JPY"}[r.IntN(3)]
	}
	if r.IntN(3) == 0 {
		a.Rolling = time.Duration(1+r.Int64N(int64(throttle.MaxRolling/time.Second))) * time.Second
		return a
	}
	a.Calendar = []throttle.Calendar{throttle.CalendarHour, throttle.CalendarDay, throttle.CalendarWeek, throttle.CalendarMonth}[r.IntN(4)]
	a.Zone = []string{"", "UTC", "America/Los_Angeles", "Europe/Berlin", "Asia/Kolkata", "Australia/Lord_Howe"}[r.IntN(6)]
	return a
}

func TestAllowance_StringRoundTripsRandom(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(28, 1))
	for range 5000 {
		a := randomAllowance(r)
		require.NoError(t, a.Validate(), a.String())
		got, err := throttle.ParseAllowance(a.String())
		require.NoError(t, err, a.String())
		require.Equal(t, a, got, a.String())
	}
}

// FuzzParseAllowance: no input makes ParseAllowance panic, and what it accepts is valid and is
// written back by String as something it reads as the same allowance.
func FuzzParseAllowance(f *testing.F) {
	for _, s := range []string{"tokens=5000000/day@America/Los_Angeles", "requests=1000/hour", "usd=5.00/day",
		"output_tokens=200000/24h", "eur=0.000001/month@Europe/Berlin", "tokens=1_000/1h30m", "=/@", "usd=9.9999999/x@"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := throttle.ParseAllowance(s)
		if err != nil {
			require.Equal(t, throttle.Allowance{}, a)
			return
		}
		require.NoError(t, a.Validate())
		back, err := throttle.ParseAllowance(a.String())
		require.NoError(t, err, a.String())
		require.Equal(t, a, back)
		_, _ = a.Window(time.Date(2026, 3, 8, 10, 0, 0, 0, time.UTC))
	})
}

func TestAllowance_UnmarshalJSON(t *testing.T) {
	t.Parallel()
	var got []throttle.Allowance
	require.NoError(t, json.Unmarshal([]byte(`["usd=5.00/day@America/Los_Angeles",
		{"meter":"tokens","amount":1000,"rolling":3600000000000,"on_spent":"refuse"}]`), &got))
	usd := mustParse(t, "usd=5.00/day@America/Los_Angeles")
	require.Equal(t, []throttle.Allowance{usd, {Meter: throttle.MeterTokens, Amount: 1000, Rolling: time.Hour, OnSpent: throttle.OnSpentRefuse}}, got)
	// What Sluice stores reads back as it was.
	b, err := json.Marshal(got)
	require.NoError(t, err)
	var again []throttle.Allowance
	require.NoError(t, json.Unmarshal(b, &again))
	require.Equal(t, got, again)
	err = json.Unmarshal([]byte(`["tokens=5/fortnight"]`), &got)
	require.EqualError(t, err, `throttle: allowance "tokens=5/fortnight": period "fortnight": want hour, day, week, month or a duration such as 24h`)
}
