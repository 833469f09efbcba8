package cli

import (
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/sluicehq/sluice/pgqueue"
)

func runMigrate(ctx context.Context, r *runner, args []string) error {
	pos, err := r.parse(r.flagSet("migrate"), "migrate", args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || (pos[0] != "up" && pos[0] != "status") {
		return usageErr("migrate takes up or status, got %q", pos)
	}
	if err := r.connect(ctx, true); err != nil {
		return err
	}
	opts := pgqueue.MigrateOptions{Schema: r.g.schema}
	if pos[0] == "up" {
		res, err := pgqueue.Migrate(ctx, r.pool, opts)
		if err != nil {
			return err
		}
		if r.g.json {
			return writeJSON(r.env.Stdout, map[string]any{"schema": r.g.schema, "applied": append([]int{}, res.Applied...), "version": res.Version})
		}
		if len(res.Applied) == 0 {
			fmt.Fprintf(r.env.Stdout, "schema %s is current at version %d\n", r.g.schema, res.Version)
			return nil
		}
		fmt.Fprintf(r.env.Stdout, "schema %s: applied %v, now at version %d\n", r.g.schema, res.Applied, res.Version)
		return nil
	}
	st, err := pgqueue.MigrationState(ctx, r.pool, opts)
	if err != nil {
		return err
	}
	if r.g.json {
		type m struct {
			Version   int    `json:"version"`
			Name      string `json:"name"`
			AppliedAt any    `json:"applied_at"`
		}
		var rows []m
		for _, a := range st.Applied {
			rows = append(rows, m{a.Version, a.Name, a.AppliedAt})
		}
		for _, p := range st.Pending {
			rows = append(rows, m{p.Version, p.Name, nil})
		}
		return writeJSON(r.env.Stdout, map[string]any{"schema": st.Schema, "exists": st.Exists, "version": st.Version, "migrations": rows})
	}
	tw := tabwriter.NewWriter(r.env.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "schema %s: version %d, %d pending\n", st.Schema, st.Version, len(st.Pending))
	fmt.Fprintln(tw, "VERSION\tNAME\tAPPLIED")
	for _, a := range st.Applied {
		fmt.Fprintf(tw, "%d\t%s\t%s\n", a.Version, a.Name, a.AppliedAt.UTC().Format("2006-01-02 15:04:05 UTC"))
	}
	for _, p := range st.Pending {
		fmt.Fprintf(tw, "%d\t%s\tpending\n", p.Version, p.Name)
	}
	return tw.Flush()
}
