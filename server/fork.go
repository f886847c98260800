package server

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/oklog/ulid/v2"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/server/api"
)

// LabelForkOf is the run.created label of a forked run: "RUN@SEQ", the
// source run and the last event copied from it.
const LabelForkOf = "keel.fork_of"

// fork copies the events of run src up to req.Seq into a new run for who
// and returns its id and what was admitted. The copies keep their types,
// times and payloads, with three exceptions, and are sealed into the new
// run's own hash chain:
//
//   - run.created gets the [LabelForkOf] label, the forker as its creator
//     and, if asked, another workspace; the fork is checked as a create
//     is (the forker may act as its agent; the server's sandbox, policy
//     and models; a workspace under a root);
//   - a decision on a call that had not finished by the fork point is
//     left out, with that call's start: the fork asks again, so nobody's
//     approval carries over to a call that runs in the fork (perhaps in
//     another workspace);
//   - remembered approvals (remember: run) are dropped from the copied
//     decisions: they were given for the source run.
func (h *Handler) fork(ctx context.Context, src string, req *api.ForkRun, who *caller) (string, *admission, error) {
	if IsSystemStream(src) {
		return "", nil, notFound("no such run %s", src)
	}
	events, err := journal.ReadVerified(ctx, h.rt.Store(), src)
	if errors.Is(err, journal.ErrNotFound) {
		return "", nil, notFound("no such run %s", src)
	}
	if err != nil {
		return "", nil, err
	}
	seq := req.Seq
	if seq == 0 {
		seq = int64(len(events))
	}
	if seq < 1 || seq > int64(len(events)) {
		return "", nil, badRequest("seq %d: run %s has events 1 to %d", req.Seq, src, len(events))
	}
	events = events[:seq]
	st, err := agent.Fold(src, events)
	if err != nil {
		return "", nil, err
	}
	if req.Start && st.Status == journal.StatusCompleted {
		return "", nil, conflict(api.CodeRunCompleted, "event %d completes the run: fork from an earlier event to continue", seq)
	}
	created := *st.Created
	sameWorkspace := req.Workspace == "" || filepath.Clean(req.Workspace) == filepath.Clean(created.Workspace) ||
		resolve(req.Workspace) == resolve(created.Workspace)
	demo := created.Labels[LabelDemo] != ""
	a := &admission{who: who, demo: demo, demoWorkspace: demo && sameWorkspace}
	if req.Workspace != "" {
		created.Workspace = req.Workspace
	}
	ws, err := h.admit(ctx, a, &created)
	if err != nil {
		return "", nil, err
	}
	created.Workspace = ws
	created.Labels = map[string]string{}
	for k, v := range st.Created.Labels {
		created.Labels[k] = v
	}
	created.Labels[LabelForkOf] = fmt.Sprintf("%s@%d", src, seq)
	stamp(&created, a)
	first, err := jsonPayload(&created)
	if err != nil {
		return "", nil, err
	}
	drafts, err := forkDrafts(events, first)
	if err != nil {
		return "", nil, err
	}
	id := strings.ToLower(ulid.Make().String())
	if _, err := h.rt.Store().Append(ctx, id, 0, drafts...); err != nil {
		return "", nil, fmt.Errorf("server: fork %s: %w", src, err)
	}
	return id, a, nil
}

// forkDrafts returns the drafts of a fork of events (a run's events 1 to
// the fork point), with first as the run.created payload: decisions and
// starts of calls that have no result by the fork point are left out, and
// copied decisions lose their remembered approvals.
func forkDrafts(events []journal.Event, first []byte) ([]journal.Draft, error) {
	// Only the newest turn can have calls without a result (a model call
	// needs every call of the turn before it answered).
	turn := 0
	for i, e := range events {
		if e.Type != journal.ModelResponded {
			continue
		}
		if v, err := agent.Decode(&e); err == nil && len(v.(*agent.ModelResponded).Message.ToolCalls) > 0 {
			turn = i
		}
	}
	finished := map[string]bool{}
	for _, e := range events[turn:] {
		if e.Type == journal.ToolFinished {
			v, err := agent.Decode(&e)
			if err != nil {
				return nil, err
			}
			finished[v.(*agent.ToolFinished).CallID] = true
		}
	}
	undecided := map[string]bool{} // calls whose decision is left out
	drafts := make([]journal.Draft, 0, len(events))
	for i, e := range events {
		payload := e.Payload
		switch e.Type {
		case journal.ApprovalResolved:
			v, err := agent.Decode(&e)
			if err != nil {
				return nil, err
			}
			d := *v.(*agent.ApprovalResolved)
			if i > turn && !finished[d.CallID] {
				undecided[d.CallID] = true
				continue
			}
			if d.Remember != "" || len(d.Grants) > 0 {
				d.Remember, d.Prefix, d.Grants = "", nil, nil
				if payload, err = jsonPayload(&d); err != nil {
					return nil, err
				}
			}
		case journal.ToolStarted:
			v, err := agent.Decode(&e)
			if err != nil {
				return nil, err
			}
			if i > turn && undecided[v.(*agent.ToolStarted).CallID] {
				continue
			}
		}
		drafts = append(drafts, journal.Draft{Type: e.Type, Time: e.Time, Payload: payload})
	}
	drafts[0].Payload = first
	return drafts, nil
}
