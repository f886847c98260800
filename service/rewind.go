package service

import (
	"context"
	"errors"
	"strconv"

	"github.com/keel-run/keel/internal/checkpoint"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/server/api"
)

// rewind restores the files of run id as its newest checkpoint at or
// before event to had them, for who, checked as a resume is (who may act
// as its agent, in a workspace under a root), and journals it in the run
// (workspace.restored) and in the API's action log.
func (s *Service) rewind(ctx context.Context, id string, to int64, who *Caller) (*api.Rewound, error) {
	if journal.IsSystem(id) {
		return nil, notFound("no such run %s", id)
	}
	run, err := s.run(ctx, id, 0)
	if err != nil {
		return nil, err
	}
	// An execution that journaled its stop is finishing: wait for it.
	if run, err = s.untilIdle(ctx, run); err != nil {
		return nil, err
	}
	if run.Executing || run.Queued {
		return nil, conflict(api.CodeConflict, "run %s is executing: cancel it, or wait until it stops, to rewind its files", id)
	}
	c, err := s.sums.created(ctx, id)
	if err != nil {
		return nil, err
	}
	demo := c.Labels[LabelDemo] != ""
	a := &admission{who: who, demo: demo, demoWorkspace: demo}
	// Checked as a resume is, but not set up: a rewind puts files back
	// and executes nothing, and setting the run up would hold its
	// workspace beside the execution that holds it now (keel chat's
	// /undo: a false "another run is executing in this workspace").
	if _, err := s.admit(ctx, a, c, false); err != nil {
		return nil, err
	}
	res, ev, err := checkpoint.Rewind(ctx, s.rt.Store(), id, to, who.Name, who.ID)
	var re *checkpoint.RangeError
	switch {
	case errors.As(err, &re):
		return nil, badRequest("%v", re)
	case errors.Is(err, journal.ErrLocked):
		// Said once, with who executes it (not the journal's and the
		// checkpoint's words for the same fact).
		return nil, conflict(api.CodeConflict, "run %s is executing%s: cancel it, or wait until it stops, to rewind its files", id, s.holder(ctx, id))
	case errors.Is(err, checkpoint.ErrBusy):
		return nil, conflict(api.CodeConflict, "run %s: %v", id, err)
	case errors.Is(err, checkpoint.ErrOff):
		return nil, badRequest("run %s has no checkpoints to rewind to: %v", id, checkpoint.ErrOff)
	case errors.Is(err, checkpoint.ErrNone):
		return nil, badRequest("run %s has %v: it ran without checkpoints (before they existed, or without git on the server)", id, err)
	case err != nil:
		return nil, badRequest("run %s: rewind to event %d: %v", id, to, err)
	}
	out := &api.Rewound{Seq: ev.Seq, To: res.To, Tree: res.Tree, Before: res.Before, MoreFiles: res.MoreFiles, Asked: res.Asked, Later: res.Later, Missing: res.Missing}
	for _, f := range res.Files {
		out.Files = append(out.Files, api.FileChange{Path: f.Path, Status: f.Status})
	}
	if err := s.record(ctx, who, action{Action: "run.rewind", RunID: id, Detail: "to event " + strconv.FormatInt(res.To, 10)}); err != nil {
		return out, err
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
// before event to had them, for who (see [Service.rewind]).
func (s *Service) Rewind(ctx context.Context, who *Caller, id string, to int64) (*api.Rewound, error) {
	return s.rewind(ctx, id, to, who)
}
