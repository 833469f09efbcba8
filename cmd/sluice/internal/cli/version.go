package cli

import (
	"context"
	"fmt"
	"runtime/debug"
)

// runVersion prints the version of the module the command was built from: a tag when installed
// with go install ...@version, "(devel)" when built from a checkout.
func runVersion(_ context.Context, r *runner, args []string) error {
	pos, err := r.parse(r.flagSet("version"), "version", args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageErr("version takes no arguments, got %q", pos)
	}
	version := "(unknown)"
	if bi, ok := debug.ReadBuildInfo(); ok {
		version = bi.Main.Version
	}
	if r.g.json {
		return writeJSON(r.env.Stdout, map[string]string{"version": version})
	}
	_, err = fmt.Fprintln(r.env.Stdout, "sluice", version)
	return err
}
