package calibrate_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/calibrate"
	"github.com/sluicehq/sluice/internal/testkit/testdb"
	"github.com/sluicehq/sluice/internal/testkit/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestCalibration plays every shape on the real engine and a virtual clock. With CALIBRATE set (to the
// file to write, e.g. bin/explain/calibration.txt) it plays the full form and writes the report's
// table there and to stdout, and the samples beside it (calibration-samples.jsonl); unset, a short form of each shape. Either way it asserts only what must
// always hold: no error, every sampled ticket admitted and matched to its samples, and, when the
// estimate is known, low <= estimate <= high, none before the explanation's instant. It never asserts
// an accuracy figure: those are the report's.
func TestCalibration(t *testing.T) {
	out := os.Getenv("CALIBRATE")
	cfg := calibrate.Config{Samples: 20, Short: true}
	if out != "" {
		cfg = calibrate.Config{}
	}
	pool := testdb.Pool(t)
	shapes := calibrate.Shapes()
	results := make([]calibrate.Result, len(shapes))
	for i, s := range shapes {
		t.Run(s.Name, func(t *testing.T) {
			res, err := calibrate.Run(context.Background(), pool, testdb.Schema(t, pool), s, cfg)
			require.NoError(t, err)
			require.GreaterOrEqual(t, len(res.Samples), cfg.Samples)
			for _, sm := range res.Samples {
				require.False(t, sm.Admitted.IsZero(), "sampled ticket %d never admitted", sm.Ticket)
				require.True(t, sm.Admitted.After(sm.At), "ticket %d admitted at %s, explained waiting at %s", sm.Ticket, sm.Admitted, sm.At)
				if sm.Unknown != "" {
					require.True(t, sm.Estimate.IsZero(), "ticket %d: an estimate beside %q", sm.Ticket, sm.Unknown)
					continue
				}
				require.False(t, sm.Estimate.Before(sm.At), "ticket %d: estimate %s before the explanation at %s", sm.Ticket, sm.Estimate, sm.At)
				require.False(t, sm.Low.After(sm.Estimate), "ticket %d: low %s after estimate %s", sm.Ticket, sm.Low, sm.Estimate)
				require.False(t, sm.Estimate.After(sm.High), "ticket %d: estimate %s after high %s", sm.Ticket, sm.Estimate, sm.High)
			}
			results[i] = res
		})
	}
	if out == "" || t.Failed() {
		return
	}
	var b strings.Builder
	require.NoError(t, calibrate.WriteTable(&b, results))
	require.NoError(t, os.MkdirAll(filepath.Dir(out), 0o755))
	require.NoError(t, os.WriteFile(out, []byte(b.String()), 0o644))
	var samples strings.Builder
	require.NoError(t, calibrate.WriteSamples(&samples, results))
	jsonl := strings.TrimSuffix(out, filepath.Ext(out)) + "-samples.jsonl"
	require.NoError(t, os.WriteFile(jsonl, []byte(samples.String()), 0o644))
	_, err := os.Stdout.WriteString(b.String())
	require.NoError(t, err)
}
