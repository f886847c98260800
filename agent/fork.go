package agent

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/keel-run/keel/journal"
)

// ForkDrafts returns the drafts of a fork of events (a run's events 1 to
// the fork point), with first as the run.created payload: the gate's
// decisions, approvals and starts of calls that have no result by the
// fork point are left out (the fork decides and runs them again), and
// copied decisions lose their remembered approvals.
func ForkDrafts(events []journal.Event, first []byte) ([]journal.Draft, error) {
	// Only the newest turn can have calls without a result (a model call
	// needs every call of the turn before it answered).
	turn := 0
	for i, e := range events {
		if e.Type != journal.ModelResponded {
			continue
		}
		if v, err := Decode(&e); err == nil && len(v.(*ModelResponded).Message.ToolCalls) > 0 {
			turn = i
		}
	}
	finished := map[string]bool{}
	for _, e := range events[turn:] {
		if e.Type == journal.ToolFinished {
			v, err := Decode(&e)
			if err != nil {
				return nil, err
			}
			finished[v.(*ToolFinished).CallID] = true
		}
	}
	drafts := make([]journal.Draft, 0, len(events))
	for i, e := range events {
		payload := e.Payload
		switch e.Type {
		case journal.GateDecided, journal.ApprovalRequested, journal.ApprovalResolved, journal.ToolStarted:
			v, err := Decode(&e)
			if err != nil {
				return nil, err
			}
			var call string
			switch x := v.(type) {
			case *GateDecided:
				call = x.CallID
			case *ApprovalRequested:
				call = x.CallID
			case *ApprovalResolved:
				call = x.CallID
			case *ToolStarted:
				call = x.CallID
			}
			if i > turn && !finished[call] {
				// A call without a result by the fork point is decided
				// and run again in the fork, which is told nothing of a
				// start that never ran in its workspace.
				continue
			}
			if d, ok := v.(*ApprovalResolved); ok && (d.Remember != "" || len(d.Grants) > 0) {
				c := *d
				c.Remember, c.Prefix, c.Grants = "", nil, nil
				if payload, err = json.Marshal(&c); err != nil {
					return nil, err
				}
			}
		}
		drafts = append(drafts, journal.Draft{Type: e.Type, Time: e.Time, Payload: payload})
	}
	drafts[0].Payload = first
	return drafts, nil
}

// NotStarted returns the run.paused draft (reason [ReasonForked]) that
// ends fork id (of run src at event seq, made of drafts) when it is not
// started, or none when the fork ended or waits for an approval at the
// fork point (it says so already, and a restart executes neither).
func NotStarted(id, src string, seq int64, drafts []journal.Draft, now time.Time) ([]journal.Draft, error) {
	events := make([]journal.Event, len(drafts))
	for i, d := range drafts {
		events[i] = journal.Event{RunID: id, Seq: int64(i + 1), Type: d.Type, Time: d.Time, Payload: d.Payload}
	}
	st, err := Fold(id, events)
	if err != nil {
		return nil, err
	}
	if st.Status.Terminal() || len(st.Pending()) > 0 {
		return nil, nil
	}
	p, err := json.Marshal(&RunEnded{Reason: ReasonForked,
		Message: fmt.Sprintf("not started: forked from run %s at event %d; resume it to start", src, seq)})
	if err != nil {
		return nil, err
	}
	return []journal.Draft{{Type: journal.RunPaused, Time: now, Payload: p}}, nil
}
