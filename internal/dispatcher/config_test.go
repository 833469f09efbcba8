package dispatcher

import (
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

func TestPoolerHint(t *testing.T) {
	vanished := fmt.Errorf("migrate: %w", &pgconn.PgError{Code: "26000", Message: `prepared statement "stmtcache_1" does not exist`})
	err := Config{}.poolerHint(vanished)
	require.ErrorContains(t, err, "set Options.TransactionPooler")
	require.True(t, errors.Is(err, vanished), "the cause stays wrapped")

	// A statement a pooler's server connection prepared for another client: the hint too.
	exists := &pgconn.PgError{Code: "42P05", Message: `prepared statement "stmtcache_1" already exists`}
	err = Config{}.poolerHint(exists)
	require.ErrorContains(t, err, "set Options.TransactionPooler")
	require.ErrorIs(t, err, exists)

	// Told of the pooler already, or another error: no hint.
	require.Equal(t, vanished, Config{Tunables: Tunables{TransactionPooler: true}}.poolerHint(vanished))
	other := &pgconn.PgError{Code: "53300"}
	require.Equal(t, error(other), Config{}.poolerHint(other))
}
