package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/tool"
)

// LabelForkOf is the run.created label of a forked run: "RUN@SEQ", the
// source run and the last event copied from it.
const LabelForkOf = "keel.fork_of"

// run returns run id's summary with the pool's view of it.
func (h *Handler) run(ctx context.Context, id string, knownSeq int64) (api.Run, error) {
	if IsSystemStream(id) {
		return api.Run{}, notFound("no such run %s", id)
	}
	r, err := h.sums.get(ctx, id, knownSeq)
	if errors.Is(err, journal.ErrNotFound) {
		return r, notFound("no such run %s", id)
	}
	if err != nil {
		return r, err
	}
	r.Queued, r.Executing, r.Error = h.pool.state(id)
	return r, nil
}

// runs lists runs newest first, with statuses among status (all if
// empty), at most limit (all if 0).
func (h *Handler) runs(ctx context.Context, status []journal.Status, limit int) ([]api.Run, error) {
	list, err := h.rt.Store().Runs(ctx, &journal.ListParams{Status: status})
	if err != nil {
		return nil, err
	}
	out := []api.Run{}
	for _, s := range list {
		if IsSystemStream(s.RunID) {
			continue
		}
		if limit > 0 && len(out) == limit {
			break
		}
		r, err := h.run(ctx, s.RunID, s.LastSeq)
		if err != nil {
			// One bad journal must not hide the others: show it with
			// its error.
			r = api.Run{ID: s.RunID, Status: string(s.Status), Created: s.Created, Updated: s.Updated, Events: s.LastSeq, Error: err.Error()}
		}
		out = append(out, r)
	}
	return out, nil
}

func (h *Handler) whoami(w http.ResponseWriter, _ *http.Request, who *caller) error {
	writeJSON(w, http.StatusOK, api.Whoami{Token: *who})
	return nil
}

func (h *Handler) listRuns(w http.ResponseWriter, r *http.Request, _ *caller) error {
	q := r.URL.Query()
	var status []journal.Status
	for _, s := range q["status"] {
		for _, v := range strings.Split(s, ",") {
			switch st := journal.Status(strings.TrimSpace(v)); st {
			case journal.StatusRunning, journal.StatusPaused, journal.StatusCompleted, journal.StatusFailed, journal.StatusCanceled:
				status = append(status, st)
			default:
				return badRequest("status %q: want running, paused, completed, failed or canceled", v)
			}
		}
	}
	limit := 0
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return badRequest("limit %q: want a number >= 0", s)
		}
		limit = n
	}
	runs, err := h.runs(r.Context(), status, limit)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.RunList{Runs: runs})
	return nil
}

func (h *Handler) getRun(w http.ResponseWriter, r *http.Request, _ *caller) error {
	run, err := h.run(r.Context(), r.PathValue("id"), 0)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, run)
	return nil
}

func (h *Handler) createRun(w http.ResponseWriter, r *http.Request, who *caller) error {
	var req api.CreateRun
	if err := decode(r, &req, false); err != nil {
		return err
	}
	run, err := h.create(r.Context(), &req, who)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, run)
	return nil
}

// create prepares, journals and submits a run.
func (h *Handler) create(ctx context.Context, req *api.CreateRun, who *caller) (api.Run, error) {
	if h.opts.Prepare == nil {
		return api.Run{}, &apiError{http.StatusServiceUnavailable, api.CodeUnavailable, "this server does not create runs (no run preparation configured)"}
	}
	if req.Limits.Timeout != "" {
		if _, err := parseDuration(req.Limits.Timeout); err != nil {
			return api.Run{}, badRequest("limits.timeout %q: %v", req.Limits.Timeout, err)
		}
	}
	c, err := h.opts.Prepare(ctx, req)
	if errors.Is(err, ErrInvalid) {
		return api.Run{}, badRequest("%s", strings.TrimPrefix(err.Error(), ErrInvalid.Error()+": "))
	}
	if err != nil {
		return api.Run{}, err
	}
	id, err := h.rt.Create(ctx, c)
	if err != nil {
		return api.Run{}, err
	}
	rerr := h.record(ctx, who, action{Action: "run.create", RunID: id, Detail: c.Model})
	if err := h.pool.submit(id, ""); err != nil {
		return api.Run{}, err
	}
	run, err := h.run(ctx, id, 0)
	if err == nil {
		err = rerr
	}
	return run, err
}

func (h *Handler) cancelRun(w http.ResponseWriter, r *http.Request, who *caller) error {
	ctx := r.Context()
	id := r.PathValue("id")
	run, err := h.run(ctx, id, 0)
	if err != nil {
		return err
	}
	switch journal.Status(run.Status) {
	case journal.StatusCompleted:
		return conflict(api.CodeRunCompleted, "run %s has completed; there is nothing to cancel", id)
	case journal.StatusCanceled:
		writeJSON(w, http.StatusOK, run)
		return nil
	}
	err = h.pool.cancel(ctx, id, func() error {
		_, err := h.rt.Cancel(context.WithoutCancel(ctx), id, who.Name)
		return err
	})
	if err != nil {
		return err
	}
	if err := h.record(ctx, who, action{Action: "run.cancel", RunID: id}); err != nil {
		return err
	}
	run, err = h.run(ctx, id, 0)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, run)
	return nil
}

func (h *Handler) resumeRun(w http.ResponseWriter, r *http.Request, who *caller) error {
	ctx := r.Context()
	id := r.PathValue("id")
	var req api.ResumeRun
	if err := decode(r, &req, true); err != nil {
		return err
	}
	run, err := h.resume(ctx, id, req.Message, who)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusAccepted, run)
	return nil
}

func (h *Handler) resume(ctx context.Context, id, message string, who *caller) (api.Run, error) {
	run, err := h.run(ctx, id, 0)
	if err != nil {
		return run, err
	}
	switch {
	case run.Status == string(journal.StatusCompleted):
		return run, conflict(api.CodeRunCompleted, "run %s has completed; fork it to continue from an earlier event", id)
	case run.Executing:
		return run, conflict(api.CodeConflict, "run %s is executing", id)
	case len(run.Pending) > 0:
		return run, conflict(api.CodeConflict, "run %s waits for %d approval(s); approve or deny them", id, len(run.Pending))
	}
	if err := h.pool.submit(id, message); err != nil {
		return run, err
	}
	if err := h.record(ctx, who, action{Action: "run.resume", RunID: id, Detail: message}); err != nil {
		return run, err
	}
	return h.run(ctx, id, 0)
}

func (h *Handler) forkRun(w http.ResponseWriter, r *http.Request, who *caller) error {
	ctx := r.Context()
	var req api.ForkRun
	if err := decode(r, &req, true); err != nil {
		return err
	}
	id, err := h.fork(ctx, r.PathValue("id"), &req)
	if err != nil {
		return err
	}
	rerr := h.record(ctx, who, action{Action: "run.fork", RunID: id, Target: r.PathValue("id"), Detail: strconv.FormatInt(req.Seq, 10)})
	if req.Start {
		if err := h.pool.submit(id, req.Message); err != nil {
			return err
		}
	}
	run, err := h.run(ctx, id, 0)
	if err != nil {
		return err
	}
	if rerr != nil {
		return rerr
	}
	writeJSON(w, http.StatusCreated, run)
	return nil
}

// fork copies the events of run src up to req.Seq into a new run and
// returns its id. The copies keep their types, times and payloads (the
// run.created payload gains the [LabelForkOf] label and, if asked,
// another workspace) and are sealed into the new run's own hash chain.
func (h *Handler) fork(ctx context.Context, src string, req *api.ForkRun) (string, error) {
	if IsSystemStream(src) {
		return "", notFound("no such run %s", src)
	}
	events, err := journal.ReadVerified(ctx, h.rt.Store(), src)
	if errors.Is(err, journal.ErrNotFound) {
		return "", notFound("no such run %s", src)
	}
	if err != nil {
		return "", err
	}
	seq := req.Seq
	if seq == 0 {
		seq = int64(len(events))
	}
	if seq < 1 || seq > int64(len(events)) {
		return "", badRequest("seq %d: run %s has events 1 to %d", req.Seq, src, len(events))
	}
	events = events[:seq]
	st, err := agent.Fold(src, events)
	if err != nil {
		return "", err
	}
	if req.Start && st.Status == journal.StatusCompleted {
		return "", conflict(api.CodeRunCompleted, "event %d completes the run: fork from an earlier event to continue", seq)
	}
	created := *st.Created
	created.Labels = map[string]string{}
	for k, v := range st.Created.Labels {
		created.Labels[k] = v
	}
	created.Labels[LabelForkOf] = fmt.Sprintf("%s@%d", src, seq)
	if req.Workspace != "" {
		created.Workspace = req.Workspace
	}
	first, err := jsonPayload(&created)
	if err != nil {
		return "", err
	}
	drafts := make([]journal.Draft, len(events))
	for i, e := range events {
		drafts[i] = journal.Draft{Type: e.Type, Time: e.Time, Payload: e.Payload}
	}
	drafts[0].Payload = first
	id := strings.ToLower(ulid.Make().String())
	if _, err := h.rt.Store().Append(ctx, id, 0, drafts...); err != nil {
		return "", fmt.Errorf("server: fork %s: %w", src, err)
	}
	return id, nil
}

func (h *Handler) artifact(w http.ResponseWriter, r *http.Request, _ *caller) error {
	id, rel := r.PathValue("id"), r.PathValue("path")
	b, err := h.readArtifact(r.Context(), id, rel)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "sandbox")
	_, _ = w.Write(b)
	return nil
}

// artifactDir is where tools keep whole outputs, relative to the
// workspace (see tool.Output).
const artifactDir = ".keel/artifacts/"

// readArtifact reads a run's artifact: only files under
// .keel/artifacts/ of the run's workspace are served.
func (h *Handler) readArtifact(ctx context.Context, id, rel string) ([]byte, error) {
	run, err := h.run(ctx, id, 0)
	if err != nil {
		return nil, err
	}
	clean := path.Clean(rel)
	if !strings.HasPrefix(clean, artifactDir) || strings.Contains(clean, "..") {
		return nil, badRequest("only artifacts under %s are served", artifactDir)
	}
	ws, err := tool.NewWorkspace(run.Workspace, "", nil)
	if err != nil {
		return nil, notFound("the run's workspace is not available: %v", err)
	}
	defer ws.Close()
	b, err := ws.FS().ReadFile(clean)
	if err != nil {
		return nil, notFound("artifact %s is not in the run's workspace", clean)
	}
	return b, nil
}

func jsonPayload(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("server: encode payload: %w", err)
	}
	return b, nil
}

func parseDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err == nil && d < 0 {
		err = errors.New("negative duration")
	}
	return d, err
}
