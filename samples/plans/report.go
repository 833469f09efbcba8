package main

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// report prints each phase: per tenant, what was asked, answered and refused, the tokens and money
// the answers used, the allowance's use and reset, and the first refusal's message.
func report(w io.Writer, cfg Config, res Result) {
	for _, ph := range res.Phases {
		fmt.Fprintf(w, "%s: the sample's clock at %s (%s)\n", ph.Name, ph.Clock.In(cfg.Start.Location()).Format("2006-01-02 15:04 MST"),
			ph.Clock.UTC().Format("15:04 UTC"))
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "TENANT\tPLAN\tON SPENT\tASKED\tANSWERED\tREFUSED\tTOKENS USED\tMONEY USED\tALLOWANCE USED\tREMAINING\tRESETS")
		for _, p := range cfg.Plans {
			a, st := ph.Asked[p.Tenant], ph.Allowances[p.Tenant]
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t$%s\t%s\t%s\t%s\n", p.Tenant, p.Allowance, p.OnSpent, a.Answered+a.Refused,
				a.Answered, a.Refused, a.Tokens, dollars(a.Money), st.Allowance.FormatAmount(st.Used), st.Allowance.FormatAmount(st.Remaining),
				st.ResetsAt.In(cfg.Start.Location()).Format("2006-01-02 15:04 MST"))
		}
		_ = tw.Flush()
		for _, p := range cfg.Plans {
			if a := ph.Asked[p.Tenant]; a.Spent != nil {
				fmt.Fprintf(w, "  %s refused %d times; the first: %s\n    (resets at %s)\n", p.Tenant, a.Refused, a.FirstRefusal,
					a.Spent.ResetAt.In(cfg.Start.Location()).Format("2006-01-02 15:04 MST"))
			}
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "the provider served %d calls; refused calls never reached it\n", res.Calls)
}

// dollars writes micro-units as dollars with 4 decimals.
func dollars(micros int64) string { return fmt.Sprintf("%.4f", float64(micros)/1e6) }
