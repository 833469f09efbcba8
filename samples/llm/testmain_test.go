package main

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/sluicehq/sluice/internal/testkit/temporaltest"
	"github.com/sluicehq/sluice/internal/testkit/testenv"
)

// server is the dev server of the package's tests, with the fairness the temporal mode uses.
var server *temporaltest.Server

// FairnessArgs turn on the dev server's priority and fairness matching (Temporal server 1.29:
// matching.enableFairness, which implies matching.useNewMatcher), so that the temporal mode's
// fairness keys and priorities take effect. make demo passes the same to its dev server.
var FairnessArgs = []string{"--dynamic-config-value", "matching.enableFairness=true"}

func TestMain(m *testing.M) {
	s, err := temporaltest.Start(context.Background(), FairnessArgs...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	server = s
	code := m.Run()
	server.Stop()
	testenv.Exit(code)
}
