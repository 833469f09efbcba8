package dashboard

import (
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/pgqueue"
)

// temporalPlaceholders are the placeholders Options.TemporalUIURL may name.
var temporalPlaceholders = []string{"{namespace}", "{workflow_id}", "{run_id}"}

// placeholder matches one placeholder of Options.TemporalUIURL, known or not.
var placeholder = regexp.MustCompile(`\{[^{}]*\}`)

// checkTemporalUIURL checks Options.TemporalUIURL: empty, or an absolute http(s) URL whose
// placeholders are all known. The scheme must be written out before any placeholder, so that no
// ticket's values can make the link anything but a web address.
func checkTemporalUIURL(tmpl string) error {
	if tmpl == "" {
		return nil
	}
	for _, p := range placeholder.FindAllString(tmpl, -1) {
		if !slices.Contains(temporalPlaceholders, p) {
			return fmt.Errorf("dashboard: Options.TemporalUIURL has an unknown placeholder %s (use {namespace}, {workflow_id} and {run_id}), got %q", p, tmpl)
		}
	}
	filled := placeholder.ReplaceAllString(tmpl, "x")
	if strings.ContainsAny(filled, "{}") {
		return fmt.Errorf("dashboard: Options.TemporalUIURL has a { or } that is not part of a placeholder, got %q", tmpl)
	}
	lower := strings.ToLower(tmpl)
	u, err := url.Parse(filled)
	if err != nil || !(strings.HasPrefix(lower, "http://") || strings.HasPrefix(lower, "https://")) || u.Host == "" {
		return fmt.Errorf("dashboard: Options.TemporalUIURL must be an absolute http:// or https:// URL, got %q", tmpl)
	}
	return nil
}

// temporalURL is the link to Temporal's UI for t's workflow, from the template tmpl
// (Options.TemporalUIURL) with t's values path-escaped; "" when there is no template or t lacks a
// value it names (a ticket written without its run ID).
func temporalURL(tmpl string, t pgqueue.Ticket) string {
	if tmpl == "" {
		return ""
	}
	values := map[string]string{"{namespace}": t.Namespace, "{workflow_id}": t.WorkflowID, "{run_id}": t.RunID}
	missing := false
	out := placeholder.ReplaceAllStringFunc(tmpl, func(p string) string {
		v := values[p]
		missing = missing || v == ""
		return url.PathEscape(v)
	})
	if missing {
		return ""
	}
	return out
}
