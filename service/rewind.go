package service

import (
	"context"
	"errors"
	"slices"
	"strconv"

	"github.com/keel-run/keel/internal/checkpoint"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/server/api"
)

// rewind restores the files of run id as its newest checkpoint at or
// before event to had them, for who, checked as a resume is (who may act
// as its agent, in a workspace under a root), and journals it in the run
// (workspace.restored) and in the API's action log.
func (s *Service) rewind(ctx context.Context, id string, req *api.RewindRun, who *Caller) (*api.Rewound, error) {
	if err := CheckSeq("to", req.To); err != nil {
		return nil, err
	}
	if err := s.rewindable(ctx, id, who); err != nil {
		return nil, err
	}
	to := req.To
	rw, err := checkpoint.Rewind(ctx, s.rt.Store(), id, to, checkpoint.RewindOptions{By: who.Name, Token: who.ID, Force: req.Force})
	if err := s.rewindErr(ctx, id, to, err); err != nil {
		return nil, err
	}
	res := rw.Restored
	out := &api.Rewound{Seq: rw.Event.Seq, To: res.To, Tree: res.Tree, Before: res.Before, MoreFiles: res.MoreFiles, Asked: res.Asked, Later: res.Later, Missing: res.Missing, Undo: rw.Undo, Kept: rw.Kept}
	for _, f := range res.Files {
		out.Files = append(out.Files, api.FileChange{Path: f.Path, Status: f.Status})
	}
	if err := s.record(ctx, who, action{Action: "run.rewind", RunID: id, Detail: "to event " + strconv.FormatInt(res.To, 10)}); err != nil {
		return out, err
	}
	return out, nil
}

// rewindable checks that who may rewind run id's files now: checked as
// a resume is (who may act as its agent, in a workspace under a root),
// and not while it executes.
func (s *Service) rewindable(ctx context.Context, id string, who *Caller) error {
	if journal.IsSystem(id) {
		return notFound("no such run %s", id)
	}
	run, err := s.run(ctx, id, 0)
	if err != nil {
		return err
	}
	// An execution that journaled its stop is finishing: wait for it.
	if run, err = s.untilIdle(ctx, run); err != nil {
		return err
	}
	if run.Executing || run.Queued {
		return conflict(api.CodeConflict, "run %s is executing: cancel it, or wait until it stops, to rewind its files", id)
	}
	c, err := s.sums.created(ctx, id)
	if err != nil {
		return err
	}
	demo := c.Labels[LabelDemo] != ""
	a := &admission{who: who, demo: demo, demoWorkspace: demo, existing: id}
	// Checked as a resume is, but not set up: a rewind puts files back
	// and executes nothing, and setting the run up would hold its
	// workspace beside the execution that holds it now (keel chat's
	// /undo: a false "another run is executing in this workspace").
	_, err = s.admit(ctx, a, c, false)
	return err
}

// rewindErr says a rewind's (or its plan's) error in the API's words.
func (s *Service) rewindErr(ctx context.Context, id string, to int64, err error) error {
	var re *checkpoint.RangeError
	var ce *checkpoint.ConflictError
	switch {
	case errors.As(err, &re):
		return badRequest("%v", re)
	case errors.As(err, &ce):
		return conflict(api.CodeConflict, "run %s: nothing rewound: %v; to put back the run's version of them too, rewind with force (keel runs rewind %s --to %d --force)", id, ce, id, to)
	case errors.Is(err, journal.ErrLocked):
		// Said once, with who executes it (not the journal's and the
		// checkpoint's words for the same fact).
		return conflict(api.CodeConflict, "run %s is executing%s: cancel it, or wait until it stops, to rewind its files", id, s.holder(ctx, id))
	case errors.Is(err, checkpoint.ErrBusy):
		return conflict(api.CodeConflict, "run %s: %v", id, err)
	case errors.Is(err, checkpoint.ErrOff):
		return badRequest("run %s has no checkpoints to rewind to: %v", id, checkpoint.ErrOff)
	case errors.Is(err, checkpoint.ErrNone):
		return badRequest("run %s has %v: it ran without checkpoints (before they existed, or without git on the server)", id, err)
	case err != nil:
		return badRequest("run %s: rewind to event %d: %v", id, to, err)
	}
	return nil
}

// RewindPlan says what a rewind of run id's files to event to would
// change, changing nothing, for who (checked as [Service.Rewind] is): a
// front end shows it for the person to confirm. Files changed outside
// the run since the checkpoint (a person's work after the run) are
// listed apart, as the rewind leaves them (Kept), or marked (Both) when
// the run changed them too.
func (s *Service) RewindPlan(ctx context.Context, who *Caller, id string, to int64) (*api.RewindPlan, error) {
	if err := s.rewindable(ctx, id, who); err != nil {
		return nil, err
	}
	events, err := journal.ReadVerified(ctx, s.rt.Store(), id)
	if err != nil {
		return nil, err
	}
	p, err := checkpoint.PlanRewind(ctx, events, to)
	if err := s.rewindErr(ctx, id, to, err); err != nil {
		return nil, err
	}
	out := &api.RewindPlan{To: p.To, Asked: p.Asked, Later: p.Later, Missing: p.Missing}
	for _, f := range p.Files {
		out.Files = append(out.Files, api.PlannedChange{Path: f.Path, Status: string(f.Status), Both: slices.Contains(p.Both, f.Path)})
	}
	for _, f := range p.Kept {
		out.Kept = append(out.Kept, api.PlannedChange{Path: f.Path, Status: string(f.Status)})
	}
	return out, nil
}

// holder says who holds run id's lease, " (pid 3225 on HOST)", or "".
func (s *Service) holder(ctx context.Context, id string) string {
	if l, ok := s.rt.Store().(journal.Locker); ok {
		if h, err := l.Holder(ctx, id); err == nil && h != "" {
			return " (" + h + ")"
		}
	}
	return ""
}

// Rewind restores the files of run id as its newest checkpoint at or
// before event req.To had them, for who (see [Service.rewind]): the
// files the run changed since; those changed only outside the run are
// left as they are, and those changed by both make it refuse unless
// req.Force (checkpoint.Rewind).
func (s *Service) Rewind(ctx context.Context, who *Caller, id string, req *api.RewindRun) (*api.Rewound, error) {
	out, err := s.rewind(ctx, id, req, who)
	if out != nil {
		if run, rerr := s.run(ctx, id, 0); rerr == nil {
			out.Note = RewindNote(run.Status)
		}
	}
	return out, err
}
