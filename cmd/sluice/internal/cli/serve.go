package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/sluicehq/sluice/dashboard"
)

// optionFlags names dashboard.Options' fields as the flags that set them.
var optionFlags = strings.NewReplacer("Options.Refresh", "--refresh", "Options.Window", "--window", "Options.Step", "--step", "Step (", "--step (",
	"Options.TemporalUIURL", "--temporal-ui")

func runServe(ctx context.Context, r *runner, args []string) error {
	fs := r.flagSet("serve")
	addr := fs.String("addr", "127.0.0.1:8080", "where to listen; another interface than localhost only when told")
	writes := fs.Bool("allow-writes", false, "let the page change limits and pause keys (put your own authentication in front)")
	refresh := durationFlag(fs, "refresh", 2*time.Second, "how often the page refreshes")
	window := durationFlag(fs, "window", 10*time.Minute, "how far back the charts go (at most 1h)")
	step := durationFlag(fs, "step", 10*time.Second, "the width of one point of the charts")
	temporalUI := fs.String("temporal-ui", "", "link each ticket to its workflow in Temporal's UI: a `URL` with {namespace}, {workflow_id} and {run_id},\n"+
		"as http://localhost:8233/namespaces/{namespace}/workflows/{workflow_id}/{run_id}/history")
	pos, err := r.parse(fs, "serve", args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usageErr("serve takes no arguments, got %q", pos)
	}
	if _, _, err := net.SplitHostPort(*addr); err != nil {
		return usageErr("--addr %q: %v", *addr, err)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"refresh", *refresh}, {"window", *window}, {"step", *step}} {
		if d.v <= 0 { // 0 would mean the default to dashboard.Options: refused, not replaced
			return usageErr("--%s must be a positive duration, got %v (leave the flag out for its default)", d.name, d.v)
		}
	}
	if err := r.connect(ctx, false); err != nil {
		return err
	}
	opts := dashboard.Options{AllowWrites: *writes, Refresh: *refresh, Window: *window, Step: *step, TemporalUIURL: *temporalUI}
	if host, _, _ := net.SplitHostPort(*addr); host == "localhost" || net.ParseIP(host).IsLoopback() {
		// Only the loopback names: a page rebinding its own name to 127.0.0.1 is refused.
		opts.AllowedHosts = []string{"localhost", "127.0.0.1", "::1"}
	}
	h, err := dashboard.New(r.q, opts)
	if err != nil {
		// The dashboard names its Options' fields; the operator typed flags.
		return usageErr("%s", optionFlags.Replace(strings.TrimPrefix(err.Error(), "dashboard: ")))
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", *addr, err)
	}
	mode := "read-only"
	if *writes {
		mode = "writes allowed: put your own authentication in front"
	}
	fmt.Fprintf(r.env.Stdout, "sluice dashboard (%s) on http://%s/ for schema %s\n", mode, ln.Addr(), r.g.schema)
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
