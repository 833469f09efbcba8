package main

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/sluicehq/sluice/internal/testkit/temporaltest"
	"github.com/sluicehq/sluice/internal/testkit/testenv"
)

// server is the dev server of the package's tests.
var server *temporaltest.Server

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
