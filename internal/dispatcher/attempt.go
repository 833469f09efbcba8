package dispatcher

import (
	"fmt"

	"go.temporal.io/sdk/activity"

	"github.com/sluicehq/sluice/internal/store"
)

// InvocationKey identifies an attempt by what both Temporal and its ticket know.
func InvocationKey(ns, wf, run, act string, attempt int32) string {
	return fmt.Sprintf("%s|%s|%s|%s|%d", ns, wf, run, act, attempt)
}

func ticketKey(t store.Ticket) string {
	return InvocationKey(t.Namespace, t.WorkflowID, t.RunID, t.ActivityID, int32(t.Attempt))
}

// AttemptParams returns what Temporal's info of an activity attempt puts in its invocation (its key,
// task token, namespace, deadline and heartbeat timeout) and in its ticket (the same, and the
// workflow, run, activity, type and attempt). The plugin's interceptor and the gate fill in the rest:
// the run, the context, the limits and the cost.
func AttemptParams(info activity.Info) (InvocationParams, store.EnqueueParams) {
	ns, wf := info.WorkflowNamespace, info.WorkflowExecution
	return InvocationParams{
			Key:       InvocationKey(ns, wf.ID, wf.RunID, info.ActivityID, info.Attempt),
			TaskToken: info.TaskToken, Namespace: ns, Deadline: info.Deadline, HeartbeatTimeout: info.HeartbeatTimeout,
		}, store.EnqueueParams{
			Namespace: ns, WorkflowID: wf.ID, RunID: wf.RunID, ActivityID: info.ActivityID, ActivityType: info.ActivityType.Name,
			Attempt: int(info.Attempt), TaskToken: info.TaskToken, Deadline: info.Deadline,
		}
}
