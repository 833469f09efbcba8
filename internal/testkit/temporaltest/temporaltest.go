// Package temporaltest starts a real Temporal dev server (the temporal CLI that `make test` builds
// into bin/, named by SLUICE_TEMPORAL_CLI) on free ports for a test binary.
package temporaltest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/testsuite"

	"github.com/sluicehq/sluice/internal/testkit/testenv"
)

// Server is a running dev server.
type Server struct {
	dev  *testsuite.DevServer
	Addr string
}

// Start starts a dev server, or returns (nil, nil) when SLUICE_TEMPORAL_CLI is unset (tests then skip
// locally; Require fails them under CI). extraArgs go to `temporal server start-dev`, such as
// dynamic configuration values.
func Start(ctx context.Context, extraArgs ...string) (*Server, error) {
	path := os.Getenv("SLUICE_TEMPORAL_CLI")
	if path == "" {
		return nil, nil
	}
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("temporaltest: SLUICE_TEMPORAL_CLI: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	dev, err := testsuite.StartDevServer(ctx, testsuite.DevServerOptions{
		ExistingPath:  path,
		LogLevel:      "error",
		ExtraArgs:     extraArgs,
		ClientOptions: &client.Options{Logger: QuietLogger()},
		Stdout:        io.Discard,
		Stderr:        io.Discard,
	})
	if err != nil {
		return nil, fmt.Errorf("temporaltest: start dev server: %w", err)
	}
	return &Server{dev: dev, Addr: dev.FrontendHostPort()}, nil
}

// Stop closes the client StartDevServer dialled (the SDK's Stop leaves it open, with its gRPC
// goroutines) and stops the server.
func (s *Server) Stop() {
	if s != nil {
		s.dev.Client().Close()
		_ = s.dev.Stop()
	}
}

// Require returns s, skipping the test when there is no server (failing it under CI).
func Require(t testing.TB, s *Server) *Server {
	t.Helper()
	if s == nil {
		testenv.Skip(t, "SLUICE_TEMPORAL_CLI is not set")
	}
	return s
}

// DeadlockTimeout is the test workers' DeadlockDetectionTimeout. The SDK's default of 1s fails a
// workflow task whose coroutine has not yielded for a second of wall time, which a process that the
// OS does not schedule for a second (a 2-core machine under load, the race detector) can reach
// without any fault of the workflow. The tests' workflows do little between yields; this bound only
// keeps a descheduled process from failing them.
const DeadlockTimeout = 20 * time.Second

// RPCTimeout bounds each of a test client's calls, in place of the SDK's default of 10 s, which a dev
// server on a busy 2-core machine can exceed: an outer bound only.
const RPCTimeout = 2 * time.Minute

// Client dials the server, closed at the end of the test. The client, and the workers built on it,
// log to t.Log (see testenv.Logger): shown for a failing test only.
func (s *Server) Client(t testing.TB) client.Client {
	t.Helper()
	c, err := client.Dial(client.Options{HostPort: s.Addr, Logger: TestLogger(t), RPCTimeout: RPCTimeout})
	if err != nil {
		t.Fatalf("temporaltest: dial: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// TestLogger is the Temporal SDK's logger over testenv.Logger(t).
func TestLogger(t testing.TB) log.Logger {
	return log.NewStructuredLogger(testenv.Logger(t))
}

// QuietLogger logs warnings and errors only, so that test output stays readable.
func QuietLogger() log.Logger {
	return log.NewStructuredLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})))
}
