package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/dashboard"
)

func runServe(ctx context.Context, r *runner, args []string) error {
	fs := r.flagSet("serve")
	addr := fs.String("addr", "127.0.0.1:8080", "where to listen; another interface than localhost only when told")
	writes := fs.Bool("allow-writes", false, "let the page change limits and pause keys (put your own authentication in front)")
	refresh := fs.Duration("refresh", 2*time.Second, "how often the page refreshes")
	window := fs.Duration("window", 10*time.Minute, "how far back the charts go (at most 1h)")
	step := fs.Duration("step", 10*time.Second, "the width of one point of the charts")
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
	if err := r.connect(ctx, false); err != nil {
		return err
	}
	opts := dashboard.Options{AllowWrites: *writes, Refresh: *refresh, Window: *window, Step: *step}
	if host, _, _ := net.SplitHostPort(*addr); host == "localhost" || net.ParseIP(host).IsLoopback() {
		// Only the loopback names: a page rebinding its own name to 127.0.0.1 is refused.
		opts.AllowedHosts = []string{"localhost", "127.0.0.1", "::1"}
	}
	h, err := dashboard.New(r.q, opts)
	if err != nil {
		return usageErr("%v", err)
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
