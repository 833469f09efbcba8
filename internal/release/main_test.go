package release_test

import (
	"testing"

	"github.com/sluicehq/sluice/internal/testkit/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }
