package cluster

import (
	"context"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
)

// Dispatcher hands runs to the workers: the server's side.
type Dispatcher struct {
	c client.Client
}

// NewDispatcher returns a dispatcher over a Temporal client.
func NewDispatcher(c client.Client) *Dispatcher { return &Dispatcher{c: c} }

// Client returns the dispatcher's Temporal client (the server's
// Temporal Schedules driver shares it).
func (d *Dispatcher) Client() client.Client { return d.c }

// Dispatch makes run runID's workflow look at its journal: it signals
// the workflow with [WakeSignal], starting it first if it is not running
// (a new run, a run resumed after it ended, a workflow that failed).
func (d *Dispatcher) Dispatch(ctx context.Context, runID string) error {
	_, err := d.c.SignalWithStartWorkflow(ctx, WorkflowID(runID), WakeSignal, nil,
		client.StartWorkflowOptions{
			ID:                    WorkflowID(runID),
			TaskQueue:             TaskQueue,
			WorkflowIDReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		},
		WorkflowName, RunInput{RunID: runID})
	if err != nil {
		return fmt.Errorf("cluster: hand run %s to the workers: %w", runID, err)
	}
	return nil
}

// Adopt hands run runID to the workers as [Dispatcher.Dispatch] does,
// unless its workflow is running with an activity pending (a step
// executing or waiting for a worker slot, a claim, a ping): that
// workflow looks at the journal again anyway, and a signal would only
// cost it a workflow task. A server's adoption (runs no process holds
// a lease on) finds those runs between two steps; the ones it must wake
// are the runs whose wake-up was lost (a server died between recording
// a decision and signalling) and the runs without a workflow.
func (d *Dispatcher) Adopt(ctx context.Context, runID string) error {
	wf, err := d.c.DescribeWorkflow(ctx, WorkflowID(runID), "")
	if err == nil {
		desc := wf.RawResponse
		if desc.GetWorkflowExecutionInfo().GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING && len(desc.GetPendingActivities()) > 0 {
			return nil
		}
	}
	return d.Dispatch(ctx, runID)
}

// Dial connects to the Temporal frontend at hostPort (namespace default),
// trying again for up to a minute while it is not reachable or not healthy
// yet (servers, workers and Temporal starting together).
func Dial(ctx context.Context, hostPort string, opts *client.Options) (client.Client, error) {
	o := client.Options{}
	if opts != nil {
		o = *opts
	}
	o.HostPort = hostPort
	deadline := time.Now().Add(time.Minute)
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, 5*time.Second) {
		c, err := client.DialContext(ctx, o)
		if err == nil {
			return c, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("cluster: connect to temporal at %s: %w", hostPort, err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("cluster: connect to temporal at %s: %w", hostPort, err)
		case <-time.After(wait):
		}
	}
}
