package cli_test

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/cmd/sluice/internal/cli"
)

// Help asked for goes to stdout; a mistake gets one line on stderr (the usage too when no command is
// given) and nothing on stdout, so that a script reading stdout never reads the usage as output.
func TestCLI_UsageStreams(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, c := range []struct {
		name       string
		args       []string
		code       int
		out, err   string // what stdout and stderr contain; "" for empty
		errOneLine bool
	}{
		{"HelpToStdout", []string{"-h"}, cli.ExitOK, "Usage: sluice", "", false},
		{"CommandHelpToStdout", []string{"limits", "set", "-h"}, cli.ExitOK, "Usage: sluice limits", "", false},
		{"UnknownFlag", []string{"--bogus", "status"}, cli.ExitUsage, "", "flag provided but not defined: -bogus (run sluice -h)", true},
		{"UnknownFlagWithJSON", []string{"--json", "status", "--bogus"}, cli.ExitUsage, "", `{"error":"flag provided but not defined: -bogus (run sluice -h)","exit_code":2}`, true},
		{"UnknownFlagBeforeJSON", []string{"--bogus", "--json", "status"}, cli.ExitUsage, "", `"exit_code":2}`, true},
		{"NoCommandWithJSON", []string{"--json"}, cli.ExitUsage, "", `{"error":"a command is needed (run sluice help)","exit_code":2}`, true},
		{"NoCommand", nil, cli.ExitUsage, "", "Run sluice help COMMAND for a command's arguments and flags", false},
		{"Help", []string{"help"}, cli.ExitOK, "Exit codes:", "", false},
		{"HelpCommand", []string{"help", "status"}, cli.ExitOK, "Usage: sluice status [KEY... | --prefix P]", "", false},
		{"HelpSubcommand", []string{"help", "limits", "set"}, cli.ExitOK, "-max-inflight-tokens", "", false},
		{"HelpHelp", []string{"help", "help"}, cli.ExitOK, "Usage: sluice help [COMMAND]", "", false},
		{"HelpUnknown", []string{"help", "frobnicate"}, cli.ExitUsage, "", `help: unknown command "frobnicate" (run sluice help)`, true},
		{"CommandHelpStill", []string{"tickets", "--help"}, cli.ExitOK, "Usage: sluice tickets KEY", "", false},
		{"VersionTakesNoArguments", []string{"version", "x"}, cli.ExitUsage, "", `version takes no arguments, got ["x"]`, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			code, out, errOut := runCLI(ctx, "", c.args...)
			require.Equal(t, c.code, code, "stderr: %s", errOut)
			if c.out == "" {
				require.Empty(t, out)
			} else {
				require.Contains(t, out, c.out)
			}
			if c.err == "" {
				require.Empty(t, errOut)
			} else {
				require.Contains(t, errOut, c.err)
			}
			if c.errOneLine {
				require.Equal(t, 1, strings.Count(errOut, "\n"), "one line: %q", errOut)
			}
		})
	}
}

// A bare sluice prints the commands, one line each, and where to read more: not every command's
// every flag.
func TestCLI_BareSummary(t *testing.T) {
	t.Parallel()
	code, out, errOut := runCLI(context.Background(), "")
	require.Equal(t, cli.ExitUsage, code)
	require.Empty(t, out)
	lines := strings.Split(strings.TrimSpace(errOut), "\n")
	require.Equal(t, "sluice: a command is needed (run sluice help)", lines[len(lines)-1])
	for _, c := range []string{"status", "limits", "pause", "resume", "tickets", "explain", "migrate", "serve", "version", "help"} {
		require.Regexp(t, "(?m)^  "+c+" +[a-z]", errOut, "one line for %s", c)
	}
	require.NotContains(t, errOut, "--max-inflight-tokens", "no flags of a command")
	require.Less(t, len(lines), 20, "short: %s", errOut)
}

// The usage names every flag of limits set, the input and output budgets included.
func TestCLI_UsageNamesEveryLimitFlag(t *testing.T) {
	t.Parallel()
	code, out, _ := runCLI(context.Background(), "", "-h")
	require.Equal(t, cli.ExitOK, code)
	for _, f := range []string{"--max-concurrent", "--rps", "--burst", "--tpm", "--token-burst", "--itpm", "--input-token-burst",
		"--otpm", "--output-token-burst", "--max-inflight-tokens", "--create"} {
		require.Contains(t, out, "["+f, "the usage names %s", f)
	}
}

// Each command's usage line names every flag it takes (those all commands take are listed once).
func TestCLI_UsageNamesEveryCommandFlag(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	flagLine := regexp.MustCompile(`(?m)^  -(\S+)`)
	for _, cmd := range [][]string{{"status"}, {"tickets"}, {"explain"}, {"pause"}, {"serve"}, {"limits", "set"}} {
		code, out, errOut := runCLI(ctx, "", append(cmd, "-h")...)
		require.Equal(t, cli.ExitOK, code, errOut)
		usage, _, _ := strings.Cut(out, "\n")
		for _, m := range flagLine.FindAllStringSubmatch(out, -1) {
			if name := m[1]; name != "database" && name != "schema" && name != "json" {
				require.Contains(t, usage, "--"+name, "sluice %s's usage names --%s", strings.Join(cmd, " "), name)
			}
		}
	}
}

func TestCLI_Version(t *testing.T) {
	t.Parallel()
	code, out, errOut := runCLI(context.Background(), "", "version")
	require.Equal(t, cli.ExitOK, code, errOut)
	// A test binary is a build between releases: it names the last release and says where its
	// changes are told.
	require.Regexp(t, `^sluice v\d+\.\d+\.\d+\S*-dev\S* \(unreleased changes after v\d+\.\d+\.\d+\S*, see CHANGELOG\.md(; [^)]+)?\)\n$`, out)
	code, out, _ = runCLI(context.Background(), "", "--json", "version")
	require.Equal(t, cli.ExitOK, code)
	require.Regexp(t, `^\{"version":"v[^"]+-dev[^"]*","after_release":"v[^"]+"(,"\w+":[^,]+)*\}\n$`, out)
}
