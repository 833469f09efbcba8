package main

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/sluicehq/sluice/internal/testkit/temporaltest"
	"github.com/sluicehq/sluice/internal/testkit/testdb"
)

// TestQuickstart runs the sample, so that it cannot rot.
func TestQuickstart(t *testing.T) {
	ctx := context.Background()
	s, err := temporaltest.Start(ctx)
	require.NoError(t, err)
	s = temporaltest.Require(t, s)
	defer s.Stop()
	pool := testdb.Pool(t)
	schema := testdb.Schema(t, pool)
	res, err := run(ctx, testdb.URL(t), s.Addr, schema, 30, noop.NewTracerProvider())
	require.NoError(t, err)
	require.Equal(t, 8555, res.Sum) // 0² + 1² + ... + 29²
	require.LessOrEqual(t, res.Peak, 3)
	// 30 calls at 10/s with a burst of 3 take at least 2.7s of admissions.
	require.GreaterOrEqual(t, res.Elapsed.Seconds(), 2.7)
}
