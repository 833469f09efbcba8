package main

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/sluicehq/sluice/internal/temporaltest"
	"github.com/sluicehq/sluice/internal/testenv"
)

// server is the dev server of the package's tests, with the fairness the temporal mode uses.
var server *temporaltest.Server

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
