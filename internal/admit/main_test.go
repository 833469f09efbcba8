package admit_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/testenv"
)

// t0 is the fixed instant the tests start from.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestMain(m *testing.M) { testenv.Main(m) }
