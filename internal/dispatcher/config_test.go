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

	// Told of the pooler already, or another error: no hint.
	require.Equal(t, vanished, Config{TransactionPooler: true}.poolerHint(vanished))
	other := &pgconn.PgError{Code: "53300"}
	require.Equal(t, error(other), Config{}.poolerHint(other))
}
