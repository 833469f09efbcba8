package faultproxy

import (
	"net"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// ForTest starts a proxy to the server cfg connects to, closed at the end of the test, and returns it
// with a copy of cfg that connects through it.
func ForTest(t testing.TB, cfg *pgxpool.Config) (*Proxy, *pgxpool.Config) {
	t.Helper()
	target := net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port)))
	p, err := Start(target)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	host, port, err := net.SplitHostPort(p.Addr())
	require.NoError(t, err)
	n, err := strconv.Atoi(port)
	require.NoError(t, err)
	through := cfg.Copy()
	through.ConnConfig.Host, through.ConnConfig.Port = host, uint16(n)
	through.ConnConfig.Fallbacks = nil
	return p, through
}
