// Command bench is `make bench`: Sluice's queue beside River's on the same Postgres, in one run,
// interleaved and repeated, with medians and ratios. It writes a Markdown table and a JSON file.
//
// It is its own module so that River, a benchmark-only dependency, stays out of the library's go.mod.
// Run it from the repository root with `make bench` (or `make bench BENCH_FLAGS=-short`), or:
//
//	cd bench && go run . -database postgres://postgres@127.0.0.1:5432/test -out ../bin/bench
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// config is what a run measures, from the flags.
type config struct {
	database string
	out      string
	short    bool
	rounds   int
	tickets  int           // per enqueue run
	queued   []int         // queue lengths of the claim latency figure
	rateFor  time.Duration // each rate accuracy run
	// pgbenchFor is each pgbench run's length in seconds.
	pgbenchFor int
	only       string // run only the figure of this name (for development)
	// claimBatch is the tickets a Sluice claim admits and a completion completes at most: the
	// dispatcher's ClaimBatch and completer batch.
	claimBatch int
	// The fleet figure: replicas and lines (rows: each replica count by each line count, and by the
	// tenant caps shape when fleetTenants > 0), tickets per run, and each replica's pool size.
	fleetReplicas, fleetLines             []int
	fleetTickets, fleetPool, fleetTenants int
	// fsyncOff runs the private clusters of the fleet and connections figures with fsync,
	// synchronous_commit and full_page_writes off, to see what durability costs; they are durable
	// by default.
	fsyncOff bool
	// fleetStatements has each fleet run report its statements from pg_stat_statements.
	fleetStatements bool
	// The connections figure: replicas, tickets per run, line counts and shapes (connDirect,
	// connDirectIdle, connPooledPolling, connPooledListen); the replicas' pool size is fleetPool.
	connReplicas, connTickets int
	connLines                 []int
	connShapes                []string
}

func main() {
	var c config
	flag.StringVar(&c.database, "database", os.Getenv("TEST_DATABASE_URL"), "the Postgres to measure (default $TEST_DATABASE_URL)")
	flag.StringVar(&c.out, "out", "results", "directory the results table and JSON are written to")
	flag.BoolVar(&c.short, "short", false, "a form that runs in a few minutes: fewer tickets, one round, no 1M queue")
	flag.IntVar(&c.rounds, "rounds", 3, "repeats of each figure (medians are reported); -short sets 1")
	flag.StringVar(&c.only, "only", "", "run only this figure: fleet, connections, enqueue, latency, rate, pgbench")
	flag.IntVar(&c.claimBatch, "claim-batch", 1000, "Sluice's claim, take and completion batch (the plugin's Options.ClaimBatch; 1000 by default)")
	replicas := flag.String("fleet-replicas", "", "the fleet figure's replica counts (default 1,8,32,128; -short 1,8,32)")
	lines := flag.String("fleet-lines", "", "the fleet figure's line counts (default 1,100,1000,10000; -short 1,1000)")
	flag.IntVar(&c.fleetTickets, "fleet-tickets", 0, "tickets per fleet run (default 10000; -short 3000)")
	flag.IntVar(&c.fleetPool, "fleet-pool", 2, "each replica's pool size (MaxConns); its listener is one more connection")
	flag.IntVar(&c.fleetTenants, "fleet-tenants", 10_000, "tenant caps of the fleet's tenant-cap rows (0: none)")
	flag.BoolVar(&c.fleetStatements, "fleet-statements", false, "load pg_stat_statements into the fleet's private cluster and log each run's top statements by server time (planning and execution), also in results.json")
	flag.BoolVar(&c.fsyncOff, "fsync-off", false, "run the fleet's and connections' private cluster with fsync, synchronous_commit and full_page_writes off, to compare with the durable default")
	flag.IntVar(&c.connReplicas, "conn-replicas", 128, "the connections figure's replicas")
	flag.IntVar(&c.connTickets, "conn-tickets", 0, "tickets per connections run (default 5000; -short 2000)")
	connLines := flag.String("conn-lines", "", "the connections figure's line counts (default 1,1000; -short 1)")
	shapes := flag.String("conn-shapes", "direct,direct-idle,pgbouncer-polling,pgbouncer-listen,river-pgbouncer,river-pgbouncer-defaults", "the connections figure's shapes")
	flag.Parse()
	if c.database == "" {
		c.database = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	c.tickets, c.queued, c.rateFor, c.pgbenchFor = 20_000, []int{1_000, 100_000, 1_000_000}, 60*time.Second, 10
	if c.short {
		c.rounds, c.tickets, c.queued, c.rateFor, c.pgbenchFor = 1, 5_000, []int{1_000, 100_000}, 15*time.Second, 5
	}
	var err error
	if c.fleetReplicas, err = intList(*replicas, "1,8,32,128", "1,8,32", c.short); err != nil {
		log.Fatalf("-fleet-replicas: %v", err)
	}
	if c.fleetLines, err = intList(*lines, "1,100,1000,10000", "1,1000", c.short); err != nil {
		log.Fatalf("-fleet-lines: %v", err)
	}
	if c.connLines, err = intList(*connLines, "1,1000", "1", c.short); err != nil {
		log.Fatalf("-conn-lines: %v", err)
	}
	c.connShapes = strings.Split(*shapes, ",")
	c.connTickets = cmp.Or(c.connTickets, map[bool]int{false: 5_000, true: 2_000}[c.short])
	c.fleetTickets = cmp.Or(c.fleetTickets, map[bool]int{false: 10_000, true: 3_000}[c.short])
	// An interrupt cancels the runs, so that the private cluster of the fleet figure is stopped and
	// removed on the way out.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	res, err := measureAll(ctx, c)
	stop()
	if err != nil {
		log.Fatal(err)
	}
	if err := os.MkdirAll(c.out, 0o755); err != nil {
		log.Fatal(err)
	}
	js, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		log.Fatal(err)
	}
	table := res.markdown()
	for name, b := range map[string][]byte{"results.json": js, "results.md": []byte(table)} {
		if err := os.WriteFile(filepath.Join(c.out, name), b, 0o644); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Print(table)
	fmt.Printf("\nwritten to %s\n", c.out)
}

// measureAll measures every figure and returns the results.
func measureAll(ctx context.Context, c config) (*results, error) {
	e, err := newEnv(ctx, c.database)
	if err != nil {
		return nil, err
	}
	defer e.close()
	res := &results{Started: time.Now().UTC(), Short: c.short, Rounds: c.rounds, Tickets: c.tickets, ClaimBatch: c.claimBatch, Machine: machine()}
	steps := []struct {
		name string
		fn   func(context.Context, *env, config, *results) error
	}{
		{"pgbench", measurePgbench},
		{"fleet", measureFleet},
		{"connections", measureConnections},
		{"enqueue", measureEnqueue},
		{"latency", measureClaimLatency},
		{"rate", measureRate},
	}
	for _, s := range steps {
		if c.only != "" && c.only != s.name {
			continue
		}
		log.Printf("bench: %s", s.name)
		if err := s.fn(ctx, e, c, res); err != nil {
			return nil, fmt.Errorf("%s: %w", s.name, err)
		}
	}
	res.Finished = time.Now().UTC()
	return res, nil
}

// intList parses a comma-separated list of positive integers; empty means def, or short under -short.
func intList(s, def, short string, isShort bool) ([]int, error) {
	if s == "" {
		s = def
		if isShort {
			s = short
		}
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%q is not a positive integer", f)
		}
		out = append(out, n)
	}
	return out, nil
}
