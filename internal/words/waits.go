package words

import (
	"cmp"

	"github.com/sluicehq/sluice/throttle"
)

// reasonLabels name the reasons a limit holds a ticket (throttle.Reason's names, and the waits of
// throttle.Explanation): explain's figures, the ROOM of its table.
var reasonLabels = map[string]string{
	"paused": "paused", "concurrency": "concurrency", "inflight_tokens": "in-flight tokens", "rate": "requests",
	"tokens": "tokens", "input_tokens": "input tokens", "output_tokens": "output tokens", "allowance": "allowance",
	throttle.WaitUnknownLimit: "no such limit", throttle.WaitAhead: "tickets ahead", throttle.WaitNotBefore: "retry backoff",
}

// ReasonLabel is reason as people read it: "output tokens" for output_tokens, "requests" for rate;
// an unknown reason as it is.
func ReasonLabel(reason string) string { return cmp.Or(reasonLabels[reason], reason) }

// WaitWords is what holds a ticket, the reason (or wait) and the limit's key, in the words that
// sluice explain, status's HEAD WAITS ON, tickets' WAITS FOR and the dashboard's waiting list share:
// "concurrency of tenant:acme", "output tokens of anthropic", "the pause of openai", "tickets ahead in
// openai"; None for nothing.
func WaitWords(reason, key string) string {
	switch {
	case reason == throttle.WaitNothing:
		return None
	case reason == throttle.WaitNotBefore:
		return "its retry's backoff"
	case key == "":
		return ReasonLabel(reason)
	case reason == throttle.WaitAhead:
		return "tickets ahead in " + key
	case reason == throttle.WaitUnknownLimit:
		return "limit " + key + ", which does not exist"
	case reason == throttle.ReasonPaused.String():
		return "the pause of " + key
	}
	return ReasonLabel(reason) + " of " + key
}
