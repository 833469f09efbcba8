package dispatcher

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/sluicehq/sluice/internal/testkit/temporaltest"
	"github.com/sluicehq/sluice/internal/testkit/testenv"
)

var server *temporaltest.Server

// TestMain runs the package's tests against one Temporal dev server, then fails them when a goroutine
// outlives them (goleak, through testenv.Exit).
func TestMain(m *testing.M) {
	s, err := temporaltest.Start(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	server = s
	code := m.Run()
	server.Stop()
	testenv.Exit(code)
}
