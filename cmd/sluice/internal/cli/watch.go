package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"
)

// checkWatch refuses a --watch given that is not a positive interval of at least 100ms: 0s does not
// mean "print once" (leaving the flag out does), nor "as fast as it can go".
func checkWatch(fs *flag.FlagSet, d time.Duration) error {
	switch {
	case !given(fs, "watch"):
		return nil
	case d <= 0:
		return usageErr("--watch must be a positive interval such as 2s, got %v (leave --watch out to print once)", d)
	case d < 100*time.Millisecond:
		return usageErr("--watch must be at least 100ms, got %v", d)
	}
	return nil
}

// given reports whether the flag name was given on the command line.
func given(fs *flag.FlagSet, name string) bool {
	found := false
	fs.Visit(func(f *flag.Flag) { found = found || f.Name == name })
	return found
}

// watch writes one frame, or with every > 0 a frame every period until ctx ends: on a terminal each
// frame clears the screen, into a pipe each follows a blank line; with --json each is one line of JSON.
func (r *runner) watch(ctx context.Context, every time.Duration, frame func(io.Writer) error) error {
	if every == 0 {
		return frame(r.env.Stdout)
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		var b strings.Builder
		switch {
		case r.g.json: // one line of JSON a frame
		case r.env.Terminal: // a clear screen, and when this frame was read
			fmt.Fprintf(&b, "\x1b[H\x1b[2Jevery %v, at %s (Ctrl-C to stop)\n\n", every, r.clock().UTC().Format("15:04:05 UTC"))
		default:
			b.WriteString("\n")
		}
		if err := frame(&b); err != nil {
			if ctx.Err() != nil { // interrupted during a refresh: that is how a watch ends
				return nil
			}
			return err
		}
		if _, err := io.WriteString(r.env.Stdout, b.String()); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// clock is Env.Now, else the machine's clock: the time a terminal's watch shows.
func (r *runner) clock() time.Time {
	if r.env.Now != nil {
		return r.env.Now()
	}
	return time.Now()
}
