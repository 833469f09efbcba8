package pgqueue

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/throttle"
)

// LimitChange names the fields of a limit to change; nil fields keep their value. A rate that
// changes without its burst given gets its default burst back (a burst sized for the old rate would
// be wrong for the new one); a rate given unchanged keeps its burst.
type LimitChange struct {
	MaxConcurrent     *int
	RequestsPerSecond *float64
	Burst             *float64
	TokensPerMinute   *float64
	TokenBurst        *float64
	MaxInflightTokens *int64
	// The input and output budgets (Anthropic's ITPM and OTPM) and their bursts.
	InputTokensPerMinute  *float64
	InputTokenBurst       *float64
	OutputTokensPerMinute *float64
	OutputTokenBurst      *float64
}

// Apply returns l with c's fields set.
func (c LimitChange) Apply(l throttle.Limit) throttle.Limit {
	set := func(dst *float64, v *float64) bool {
		if v == nil || *v == *dst {
			return false
		}
		*dst = *v
		return true
	}
	if c.MaxConcurrent != nil {
		l.MaxConcurrent = *c.MaxConcurrent
	}
	if c.MaxInflightTokens != nil {
		l.MaxInflightTokens = *c.MaxInflightTokens
	}
	for _, r := range []struct {
		rate, burst       *float64
		newRate, newBurst *float64
	}{{&l.RequestsPerSecond, &l.Burst, c.RequestsPerSecond, c.Burst}, {&l.TokensPerMinute, &l.TokenBurst, c.TokensPerMinute, c.TokenBurst},
		{&l.InputTokensPerMinute, &l.InputTokenBurst, c.InputTokensPerMinute, c.InputTokenBurst},
		{&l.OutputTokensPerMinute, &l.OutputTokenBurst, c.OutputTokensPerMinute, c.OutputTokenBurst}} {
		if set(r.rate, r.newRate) {
			*r.burst = 0
		}
		if r.newBurst != nil {
			*r.burst = *r.newBurst
		}
	}
	return l
}

// Empty reports whether c changes nothing.
func (c LimitChange) Empty() bool { return c == LimitChange{} }

// ErrInvalidLimit is wrapped by ChangeLimit's error when the changed limit does not validate.
var ErrInvalidLimit = errors.New("sluice: invalid limit")

// ChangeLimit applies c to key's configuration under the limit row's lock, so that two changes at
// the same moment (two operators, the dashboard and the sluice command) both apply, and returns the
// limit stored. The result is validated first: an invalid one returns an error wrapping
// ErrInvalidLimit that names the field and value, and changes nothing. An unknown key is created
// from the zero Limit when create is set, and is otherwise an error wrapping ErrUnknownLimit. Like
// UpsertLimits, it applies at the next admission on every replica.
func (q *Queue) ChangeLimit(ctx context.Context, key string, c LimitChange, create bool) (throttle.Limit, error) {
	if err := throttle.ValidateKey(key); err != nil {
		return throttle.Limit{}, fmt.Errorf("%w: %w", ErrInvalidLimit, err)
	}
	var out throttle.Limit
	err := InTx(ctx, q.pool, func(tx pgx.Tx) error {
		cur := throttle.Limit{Key: key}
		r, err := scanLimit(tx.QueryRow(ctx, q.s(`SELECT `+limitColumns+` FROM {s}.sluice_limit WHERE key = $1 FOR UPDATE`), key))
		switch {
		case err == pgx.ErrNoRows && !create:
			return fmt.Errorf("%w: %q", ErrUnknownLimit, key)
		case err == nil:
			cur = r.configured
		case err != pgx.ErrNoRows:
			return err
		}
		out = c.Apply(cur)
		out.Key = key
		if err := out.WithDefaults().Validate(); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidLimit, err)
		}
		return q.UpsertLimitsTx(ctx, tx, out)
	})
	if err != nil {
		return throttle.Limit{}, err
	}
	return out.WithDefaults(), nil
}
