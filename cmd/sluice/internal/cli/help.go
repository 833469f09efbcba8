package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
)

// summary prints what a bare sluice prints: the commands, a line each, and where to read more.
func summary(w io.Writer) {
	fmt.Fprintln(w, "Usage: sluice [--database URL] [--schema S] [--json] COMMAND [ARGS]")
	fmt.Fprintln(w, "\nCommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.short)
	}
	fmt.Fprintln(w, "\nRun sluice help COMMAND for a command's arguments and flags, sluice help for all of them.")
}

// runHelp prints the usage of every command to stdout, or with a COMMAND (and a subcommand of limits)
// that command's, as sluice COMMAND --help does.
func runHelp(ctx context.Context, r *runner, args []string) error {
	if len(args) == 0 {
		r.usage(r.flagSet("sluice"), r.env.Stdout)
		return flag.ErrHelp
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		r.commandUsage(r.flagSet("help"), "help")
		return flag.ErrHelp
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return c.run(ctx, r, append(append([]string{}, args[1:]...), "--help"))
		}
	}
	return usageErr("help: unknown command %q (run sluice help)", args[0])
}

// usage prints the command's usage to w: stdout when asked for (-h, sluice help).
func (r *runner) usage(fs *flag.FlagSet, w io.Writer) {
	fmt.Fprintln(w, "Usage: sluice [--database URL] [--schema S] [--json] COMMAND [ARGS]")
	fmt.Fprintln(w, "\nCommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %s\n      %s\n", strings.TrimSpace(c.name+" "+c.args), c.help)
	}
	fmt.Fprintln(w, "\nFlags (also after the command):")
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
	fmt.Fprintln(w, "\nExit codes: 0 done; 1 the database could not be reached or a statement failed;")
	fmt.Fprintln(w, "2 bad arguments; 3 an unknown key or ticket, or a schema without Sluice's tables.")
}

func (r *runner) commandUsage(fs *flag.FlagSet, name string) {
	for _, c := range commands() {
		if c.name == name {
			fmt.Fprintf(r.env.Stdout, "Usage: sluice %s\n  %s\n\nFlags:\n", strings.TrimSpace(c.name+" "+c.args), c.help)
		}
	}
	fs.SetOutput(r.env.Stdout)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
}
