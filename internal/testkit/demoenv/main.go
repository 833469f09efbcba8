// Command demoenv runs a sample as a user runs it, against a Temporal server and a Postgres it is
// given; make demo and make demo-anthropic run the samples through it:
//
//	demoenv [temporal server start-dev flags] -- COMMAND [ARGS...]
//
// Temporal is TEMPORAL_ADDRESS when set. Otherwise demoenv starts a dev server on free ports from the
// temporal CLI named by SLUICE_TEMPORAL_CLI (make bin/temporal), with the flags before "--" (such as
// --dynamic-config-value matching.enableFairness=true), and stops it when COMMAND ends. Postgres is
// DATABASE_URL when set, else TEST_DATABASE_URL (what scripts/with-postgres.sh exports). COMMAND runs
// with TEMPORAL_ADDRESS and DATABASE_URL in its environment, and demoenv exits with its exit code.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"syscall"

	"github.com/sluicehq/sluice/internal/testkit/temporaltest"
)

func main() { os.Exit(run(os.Args[1:])) }

// run is main, returning the exit code so that the deferred stop of the dev server runs.
func run(args []string) int {
	i := slices.Index(args, "--")
	if i < 0 || i == len(args)-1 {
		fmt.Fprintf(os.Stderr, "demoenv: want [start-dev flags] -- COMMAND [ARGS...], got %q\n", args)
		return 2
	}
	devArgs, command := args[:i], args[i+1:]
	// Caught before the dev server starts, so that an interrupt stops it rather than demoenv alone.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)

	env := os.Environ()
	if os.Getenv("TEMPORAL_ADDRESS") == "" {
		s, err := temporaltest.Start(context.Background(), devArgs...)
		if err == nil && s == nil {
			err = errors.New("set TEMPORAL_ADDRESS to a Temporal frontend, or SLUICE_TEMPORAL_CLI to a temporal CLI (make bin/temporal)")
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "demoenv:", err)
			return 1
		}
		defer s.Stop()
		env = append(env, "TEMPORAL_ADDRESS="+s.Addr)
	}
	if url := os.Getenv("TEST_DATABASE_URL"); os.Getenv("DATABASE_URL") == "" && url != "" {
		env = append(env, "DATABASE_URL="+url)
	}
	return runCommand(command, env, sigs)
}

// runCommand runs command with env, passing it the signals that come on sigs, and returns its exit
// code.
func runCommand(command, env []string, sigs <-chan os.Signal) int {
	cmd := exec.Command(command[0], command[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr, cmd.Env = os.Stdin, os.Stdout, os.Stderr, env
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "demoenv:", err)
		return 1
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	for {
		select {
		case sig := <-sigs:
			// A terminal's interrupt reaches the command too; a second one does no harm.
			_ = cmd.Process.Signal(sig)
		case err := <-done:
			var exit *exec.ExitError
			switch {
			case errors.As(err, &exit) && exit.ExitCode() >= 0:
				return exit.ExitCode()
			case err != nil:
				fmt.Fprintf(os.Stderr, "demoenv: %s: %v\n", command[0], err)
				return 1
			}
			return 0
		}
	}
}
