package dashboard_test

import (
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"net/url"

	"github.com/sluicehq/sluice/dashboard"
)

// Ask a dashboard, from a script, why the activity of a workflow seen in Temporal's UI waits, and
// when it is expected to run, in figures and in the words of sluice explain. An unknown workflow is answered 404, a bad parameter 400, each with
// {"error": "..."}.
func ExampleExplained() {
	q := url.Values{"workflow": {"order-42"}, "activity": {"5"}}
	resp, err := http.Get("http://127.0.0.1:8080/sluice/api/explain?" + q.Encode())
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var e struct{ Error string }
		_ = json.NewDecoder(resp.Body).Decode(&e)
		log.Fatalf("explain: %s", e.Error)
	}
	var x dashboard.Explained
	if err := json.NewDecoder(resp.Body).Decode(&x); err != nil {
		log.Fatal(err)
	}
	for _, t := range x.Tickets {
		e := t.Explanation // nil once the ticket is admitted
		if e == nil {
			// What became of it, in sluice explain's words: "admitted at ... after waiting 3s; running, ..."
			fmt.Printf("ticket %d: %s\n", t.Ticket.ID, t.Words.State)
			continue
		}
		fmt.Printf("ticket %d: place %d in line %s, waits for %q on %s, expected at %v %s\n",
			t.Ticket.ID, e.Place, e.Line, e.WaitsFor, e.Key, e.Estimate, e.Unknown)
		// The same in sluice explain's words: "waits for concurrency of tenant:acme (1/1 in flight)",
		// "in 2m0s (at 12:02:00 UTC) (likely 1m0s to 3m0s, as recent runs vary)".
		fmt.Printf("  %s\n  expected admission: %s\n", t.Words.Holds, t.Words.Expected)
	}
}
