// Package cli is the sluice command: operators' reading and steering of Sluice's tables (status,
// limits, pauses, tickets, migrations, the dashboard). cmd/sluice is its main.
package cli

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/words"
	"github.com/sluicehq/sluice/pgqueue"
)

// Exit codes, as documented in the command's help.
const (
	ExitOK       = 0 // done
	ExitFailed   = 1 // the database could not be reached or a statement failed
	ExitUsage    = 2 // bad arguments: an unknown command or flag, a value out of range
	ExitNotFound = 3 // an unknown key or ticket, or a schema Migrate never ran in
)

// Env is what a run of the command sees of the world: its arguments' environment and its outputs.
type Env struct {
	Stdout, Stderr io.Writer
	// Getenv reads the environment (DATABASE_URL).
	Getenv func(string) string
	// Terminal says Stdout is a terminal: --watch then clears the screen before each frame and heads
	// it with the interval and the time it was read. Into a pipe or a file the frames follow one
	// another, a blank line apart, with no screen codes.
	Terminal bool
	// Operator is who runs the command, as "user@host": the limit history records the changes of
	// limits set as made by "Operator (sluice limits set)". Empty: the OS user and the host name.
	Operator string
	// Now, when set, replaces the database's clock (pgqueue.Options.Now): for tests, which move a fake
	// clock instead of sleeping. The command leaves it nil.
	Now func() time.Time
}

// exitError is an error with its exit code.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// usageErr and notFoundErr wrap an error with its exit code.
func usageErr(format string, a ...any) error {
	return &exitError{ExitUsage, fmt.Errorf(format, a...)}
}

func notFoundErr(err error) error { return &exitError{ExitNotFound, err} }

// global are the flags every command takes.
type global struct {
	database, schema string
	json             bool
}

// register adds the global flags to fs, their defaults what g holds already.
func (g *global) register(fs *flag.FlagSet) {
	fs.StringVar(&g.database, "database", g.database, "the Postgres URL (default $DATABASE_URL)")
	fs.StringVar(&g.schema, "schema", g.schema, "the schema holding Sluice's tables")
	fs.BoolVar(&g.json, "json", g.json, "print JSON instead of a table")
}

// command is one subcommand: its name, its arguments, its help in a few words (short, for the
// summary) and in full, and what runs it.
type command struct {
	name, args, short, help string
	run                     func(ctx context.Context, r *runner, args []string) error
}

func commands() []command {
	return []command{
		{"status", "[KEY... | --prefix P] [--limit N] [--watch D]", "how each limit stands", "how each limit stands: tickets, in-flight tokens, limits set and learned, use over the last minute, pause, oldest wait, why the line's head waits; without KEYs the first --limit keys (of --prefix)", runStatus},
		{"limits", "get [KEY...] | set KEY [--max-concurrent N] [--rps R] [--burst B] [--tpm T] [--token-burst B] [--itpm T] [--input-token-burst B] [--otpm T] [--output-token-burst B] [--max-inflight-tokens N] [--allowance SPEC]... [--on-spent wait|refuse] [--create] | history KEY [--since D] [--max N] | delete KEY --yes", "read, change or delete limits, and who changed them", "read or change limits, on every replica at its next admission; history: who changed KEY's limit, when, from what to what; delete: remove KEY's limit once no unfinished ticket names it", runLimits},
		{"pause", "KEY --for D | --until TIME", "stop admissions on a key for a while", "stop admissions on KEY for D, or until TIME (RFC 3339), exactly: a pause in force is shortened or extended to it (running activities go on)", runPause},
		{"resume", "KEY", "lift a key's pause", "lift KEY's pause at once", runResume},
		{"tickets", "KEY [--max N] [--watch D]", "the tickets drawing on a key, in the order of admission", "the tickets drawing on KEY, from any line: those waiting first, in the order they are to be admitted, with their place, cost and what holds each; then those running", runTickets},
		{"explain", "TICKET_ID | --workflow ID [--activity ID] [--namespace NS] [--max N] [--watch D]", "why a ticket waits, and when it is expected to be admitted", "why a queued ticket waits, limit by limit, and when it is expected to be admitted; by --workflow, each of its tickets, newest first", runExplain},
		{"migrate", "up | status", "create or upgrade the tables", "create or upgrade the tables, or say which migrations are applied", runMigrate},
		{"serve", "[--addr HOST:PORT] [--allow-writes] [--refresh D] [--window D] [--step D] [--temporal-ui URL]", "serve the live dashboard", "serve the live dashboard (on localhost unless told otherwise)", runServe},
		{"gate", "[--address HOST:PORT] [--namespace NS] [--task-queue Q] [--routes FILE] [--prices FILE] [--hold D] [--check-interval D] [--stop-timeout D]", "serve admission to workflows in any Temporal SDK", "serve Sluice's admission to workflows in any Temporal SDK: the activities sluice.gate.v1.Acquire (on --task-queue) and Release (docs/gate.md), until SIGTERM", runGate},
		{"version", "", "print the command's version", "print the command's version (the module's, as built)", runVersion},
		{"help", "[COMMAND]", "the usage of every command, or of one", "the usage of every command, with the flags all take and the exit codes; with COMMAND, its arguments and flags (as sluice COMMAND --help)", runHelp},
	}
}

// Run runs the command line args (without the program name) and returns the exit code.
func Run(ctx context.Context, args []string, env Env) int {
	// DATABASE_URL is read when connecting, not given as the flag's default: -h would print it, and
	// its password.
	r := &runner{env: env, g: global{schema: pgqueue.DefaultSchema}}
	defer r.close()
	err := r.dispatch(ctx, args)
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return ExitOK
	}
	code := ExitFailed
	var ee *exitError
	if errors.As(err, &ee) {
		code = ee.code
	}
	msg := strings.TrimPrefix(err.Error(), "sluice: ")
	if r.g.json || wantsJSON(args) {
		// A script that asked for JSON reads its errors as JSON too, one line on stderr.
		_ = writeJSON(env.Stderr, struct {
			Error    string `json:"error"`
			ExitCode int    `json:"exit_code"`
		}{msg, code})
		return code
	}
	fmt.Fprintln(env.Stderr, "sluice:", msg)
	return code
}

// wantsJSON reports whether args ask for --json, for an error met before the flag was parsed.
func wantsJSON(args []string) bool {
	for _, a := range args {
		switch a {
		case "--", "-json=false", "--json=false":
			return false
		case "-json", "--json", "-json=true", "--json=true":
			return true
		}
	}
	return false
}

// runner holds what a run's command needs: the flags, the outputs and, once opened, the queue.
type runner struct {
	env  Env
	g    global
	pool *pgxpool.Pool
	q    *pgqueue.Queue
}

func (r *runner) close() {
	if r.pool != nil {
		r.pool.Close()
	}
}

func (r *runner) dispatch(ctx context.Context, args []string) error {
	fs := r.flagSet("sluice")
	fs.Usage = func() {} // printed below, for -h only: a mistake gets one line on stderr
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			r.usage(fs, r.env.Stdout)
		}
		return r.flagErr(err)
	}
	if fs.NArg() == 0 {
		if !r.g.json {
			summary(r.env.Stderr)
		}
		return usageErr("a command is needed (run sluice help)")
	}
	name := fs.Arg(0)
	for _, c := range commands() {
		if c.name == name {
			return c.run(ctx, r, fs.Args()[1:])
		}
	}
	return usageErr("unknown command %q (run sluice help)", name)
}

// flagSet is a flag set for the command name, with the global flags, writing its errors nowhere:
// Run prints them once.
func (r *runner) flagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	r.g.register(fs)
	return fs
}

// durationFlag defines a duration flag whose error, for a value that is not a duration, explains what
// one looks like (the flag package says only "parse error"). Its default shows in the usage.
func durationFlag(fs *flag.FlagSet, name string, def time.Duration, help string) *time.Duration {
	d := new(time.Duration)
	*d = def
	if def != 0 {
		help = fmt.Sprintf("%s (default %v)", help, def)
	}
	fs.Func(name, help, func(s string) error {
		v, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("must be a duration: a number and a unit (ms, s, m, h), such as 500ms, 2s or 1m30s, got %q", s)
		}
		*d = v
		return nil
	})
	return d
}

// intFlag defines an integer flag from lo to hi, its engine's bounds (a Go int, an int32 column, a
// documented maximum), whose error names them: the flag package's says only "value out of range".
func intFlag(fs *flag.FlagSet, name string, def, lo, hi int64, help string) *int64 {
	v := new(int64)
	*v = def
	if def != 0 {
		help = fmt.Sprintf("%s (default %d)", help, def)
	}
	fs.Func(name, help, func(s string) error {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < lo || n > hi {
			return fmt.Errorf("must be a whole number from %d to %d, got %q", lo, hi, s)
		}
		*v = n
		return nil
	})
	return v
}

// parse parses a subcommand's flags, which may come before or after its arguments, and returns its
// arguments.
func (r *runner) parse(fs *flag.FlagSet, c string, args []string) ([]string, error) {
	fs.Usage = func() {} // printed below, for -h only
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				r.commandUsage(fs, c)
			}
			return nil, r.flagErr(err)
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos, args = append(pos, fs.Arg(0)), fs.Args()[1:]
	}
}

func (r *runner) flagErr(err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return err
	}
	return usageErr("%v (run sluice -h)", err)
}

// connect opens the database and checks that the schema holds Sluice's tables (unless migrating).
func (r *runner) connect(ctx context.Context, migrating bool) error {
	if r.q != nil {
		return nil
	}
	r.g.database = cmp.Or(r.g.database, r.env.Getenv("DATABASE_URL"))
	if r.g.database == "" {
		return usageErr("no database: set DATABASE_URL or pass --database")
	}
	if err := pgqueue.ValidateSchema(r.g.schema); err != nil {
		return usageErr("--schema %q: %v", r.g.schema, err)
	}
	cfg, err := pgxpool.ParseConfig(r.g.database)
	if err != nil {
		return usageErr("--database: not a Postgres URL or DSN: %v", redactErr(err))
	}
	cfg.MaxConns = 4
	// A command sends a few statements: it keeps no prepared statements between transactions, so it
	// works through a pooler in transaction mode (PgBouncer) as directly.
	if cfg.ConnConfig.DefaultQueryExecMode == pgx.QueryExecModeCacheStatement {
		cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	}
	where := fmt.Sprintf("%s:%d/%s", cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database)
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(pctx, cfg)
	if err == nil {
		err = pool.Ping(pctx)
	}
	if err != nil {
		if pool != nil {
			pool.Close()
		}
		return fmt.Errorf("cannot reach the database at %s: %v", where, redactErr(err))
	}
	r.pool = pool
	if !migrating {
		st, err := pgqueue.MigrationState(ctx, pool, pgqueue.MigrateOptions{Schema: r.g.schema})
		if err != nil {
			return err
		}
		if !st.Exists {
			return notFoundErr(fmt.Errorf("schema %q in %s has no Sluice tables (run: sluice migrate up --schema %s)", r.g.schema, where, r.g.schema))
		}
		if len(st.Pending) > 0 {
			return notFoundErr(fmt.Errorf("schema %q in %s is at version %d and lacks migration %d (%s): run sluice migrate up --schema %s",
				r.g.schema, where, st.Version, st.Pending[0].Version, st.Pending[0].Name, r.g.schema))
		}
	}
	r.q, err = pgqueue.New(pool, pgqueue.Options{Schema: r.g.schema, Now: r.env.Now})
	return err
}

// redactErr is err's text without a password that a connection string put in it.
func redactErr(err error) string {
	s := err.Error()
	for _, f := range strings.Fields(s) {
		if u, perr := url.Parse(strings.Trim(f, `"'():,`)); perr == nil && u.User != nil {
			if _, has := u.User.Password(); has {
				s = strings.ReplaceAll(s, u.User.String()+"@", u.User.Username()+":xxxxx@")
			}
		}
	}
	return s
}

// keyErr turns an unknown key into exit code 3.
func keyErr(err error) error {
	if errors.Is(err, pgqueue.ErrUnknownLimit) {
		return notFoundErr(err)
	}
	return err
}

// none is the one word of the command's text (and the dashboard's) for what is not set, not there or
// not known: an unset limit, no pause, no wait, no workflow ID. (Its JSON leaves such a field out or writes null.)
const none = words.None
