package cli_test

import (
	"testing"

	"github.com/sluicehq/sluice/internal/testkit/testenv"
)

// TestMain fails the package's tests when a goroutine outlives them (goleak).
func TestMain(m *testing.M) { testenv.Main(m) }
