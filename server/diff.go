package server

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/checkpoint"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/service"
)

// runDiff is GET /v1/runs/{id}/diff: the files the run changed, as keel
// runs diff prints them (see api.RunDiff). ?at=SEQ compares the run's
// checkpoints up to event SEQ instead of its workspace now with its
// starting commit.
func (h *Handler) runDiff(w http.ResponseWriter, r *http.Request, who *caller) error {
	ctx, id := r.Context(), r.PathValue("id")
	if _, err := h.svc.Run(ctx, who, id); err != nil {
		return err
	}
	var at int64
	if s := r.URL.Query().Get("at"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return badRequest("at %q: want an event's sequence number, 1 or more", s)
		}
		if err := service.CheckSeq("at", n); err != nil {
			return err
		}
		at = n
	}
	events, err := h.rt.Store().Read(ctx, id, 1)
	if err != nil {
		return err
	}
	out := api.RunDiff{Files: []api.FileDiff{}}
	var changes []checkpoint.Change
	if at > 0 {
		if last := events[len(events)-1].Seq; at > last {
			return badRequest("run %s has %d events; at %d is past its end", id, last, at)
		}
		changes, out.From, out.To, err = checkpoint.Diff(ctx, events, at)
		if errors.Is(err, checkpoint.ErrNone) {
			out.NoCheckpoint = true
			writeJSON(w, http.StatusOK, out)
			return nil
		}
		if err != nil {
			return badRequest("diff of run %s at event %d: %v", id, at, err)
		}
	} else {
		c, err := agent.Created(events)
		if err != nil {
			return err
		}
		sum, err := checkpoint.Changed(ctx, c, events)
		var he *checkpoint.HistoryError
		switch {
		case errors.As(err, &he) && he.From > 0:
			changes, out.From, out.To, out.Damaged = he.Changes, he.From, he.To, he.Cause.Error()
		case c.Git == nil && errors.Is(err, checkpoint.ErrNone):
			out.NoCheckpoint = true
			writeJSON(w, http.StatusOK, out)
			return nil
		case err != nil:
			return badRequest("diff of run %s: %v", id, err)
		default:
			sum = sum.Seal(h.svc.RunSecrets(c))
			changes, out.Checkpoint, out.Later = sum.Changes, sum.At, sum.Later
			out.From, out.Before, out.Outside = sum.From, sum.Before, sum.Outside
		}
	}
	if c, err := agent.Created(events); err == nil {
		changes = checkpoint.SealSecrets(changes, h.svc.RunSecrets(c))
	}
	for _, c := range changes {
		out.Files = append(out.Files, api.FileDiff{Path: c.Path, Status: string(c.Status), Binary: c.Binary, Patch: c.Patch, Added: c.Added, Removed: c.Removed, Denied: c.Denied, Hidden: c.Hidden,
			Rewritten: c.Rewritten, Ignored: c.Ignored, Files: c.Files, Autorun: c.Autorun, Link: c.Link, Note: c.Note, NULs: c.NULs, Later: c.Later, Outside: c.Outside})
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
