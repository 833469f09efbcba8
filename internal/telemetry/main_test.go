package telemetry

import (
	"testing"

	"github.com/sluicehq/sluice/internal/testkit/testenv"
)

// TestMain fails the package's tests when a goroutine outlives them (goleak, through testenv, with
// the ignores every package of the module shares).
func TestMain(m *testing.M) { testenv.Main(m) }
