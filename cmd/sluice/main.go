// Command sluice reads and steers Sluice's tables in Postgres: how each limit stands, changing limits
// at runtime and their history, pausing and resuming keys, the tickets of a key, why a ticket waits,
// migrations, and a live dashboard.
//
//	go install github.com/sluicehq/sluice/cmd/sluice@latest
//	export DATABASE_URL=postgres://user@host:5432/db
//	sluice status                      # every limit; --watch 2s refreshes, --json for scripts
//	sluice limits set openai --tpm 120000 --max-concurrent 20
//	sluice limits history openai       # who changed openai's limit, when, from what to what
//	sluice pause openai --for 10m      # an incident: every replica stops admitting on openai
//	sluice resume openai
//	sluice tickets openai              # what runs and what waits, with why
//	sluice explain 42                  # why ticket 42 waits, and when it should run
//	sluice explain --workflow wf-7     # the same for each ticket of a workflow
//	sluice migrate up                  # create or upgrade the tables
//	sluice serve                       # the dashboard on http://127.0.0.1:8080/
//	sluice version
//
// It reads DATABASE_URL, or --database; --schema names the schema (default sluice). Exit codes: 0
// done; 1 the database could not be reached or a statement failed; 2 bad arguments; 3 an unknown key
// or ticket, or a schema without Sluice's tables. Run sluice -h for every command and flag (on stdout); a
// mistake prints one line on stderr.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/sluicehq/sluice/cmd/sluice/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Run(ctx, os.Args[1:], cli.Env{Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv, Terminal: isTerminal(os.Stdout)})
	stop()
	os.Exit(code)
}

// isTerminal reports whether f is a terminal (a character device), not a pipe or a file.
func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
