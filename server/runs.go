package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/tool"
)

// run returns run id's summary with the pool's view of it.
func (h *Handler) run(ctx context.Context, id string, knownSeq int64) (api.Run, error) {
	if journal.IsSystem(id) {
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
// Statuses are the runs' folded statuses (a run waiting for the second of
// two approvals is paused, whatever its newest event).
func (h *Handler) runs(ctx context.Context, status []journal.Status, limit int) ([]api.Run, error) {
	if limit > 0 {
		// Most lists are a page of the newest runs: ask the index for a
		// page, with room for the system streams and for runs whose
		// folded status the filter drops; only a page that falls short
		// while the index had more is read again in full.
		page := limit + limitSlack
		out, err := h.runsFrom(ctx, status, limit, page)
		if err != nil || len(out.runs) == limit || !out.more {
			return out.runs, err
		}
	}
	out, err := h.runsFrom(ctx, status, limit, 0)
	return out.runs, err
}

// limitSlack is how many more runs than asked for a limited list reads
// from the index.
const limitSlack = 16

// runPage is a list of runs and whether the index had more than it read.
type runPage struct {
	runs []api.Run
	more bool
}

// runsFrom is runs over at most page entries of the index (all if 0).
func (h *Handler) runsFrom(ctx context.Context, status []journal.Status, limit, page int) (runPage, error) {
	list, err := h.rt.Store().Runs(ctx, &journal.ListParams{Status: indexStatuses(status), Limit: page})
	if err != nil {
		return runPage{}, err
	}
	res := runPage{more: page > 0 && len(list) == page}
	out := []api.Run{}
	for _, s := range list {
		if journal.IsSystem(s.RunID) {
			continue
		}
		if limit > 0 && len(out) == limit {
			break
		}
		r, err := h.run(ctx, s.RunID, s.LastSeq)
		if err != nil {
			// One bad journal must not hide the others: show it with
			// its error.
			e, internal := classify(err)
			if internal {
				h.logger.Error("read run", "run_id", s.RunID, "err", err)
			}
			r = api.Run{ID: s.RunID, Status: string(s.Status), Created: s.Created, Updated: s.Updated, Events: s.LastSeq, Error: e.msg}
		}
		if len(status) > 0 && !slices.Contains(status, journal.Status(r.Status)) {
			continue
		}
		out = append(out, r)
	}
	res.runs = out
	return res, nil
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
	// The body is api.RunList, each run's JSON from the summaries'
	// cache: encoding the same runs' tasks again for every poll of a
	// dashboard was most of a server's CPU.
	body := []byte(`{"runs":[`)
	for i := range runs {
		if i > 0 {
			body = append(body, ',')
		}
		b, err := h.sums.encode(&runs[i])
		if err != nil {
			return err
		}
		body = append(body, b...)
	}
	body = append(body, "]}\n"...)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
	return nil
}

// indexStatuses returns the statuses to ask the store's index for, to find
// the runs whose folded status is among want: a run whose newest event is
// a decision is indexed as running but may still be paused (waiting for
// another decision), so asking for paused runs must include running ones.
func indexStatuses(want []journal.Status) []journal.Status {
	if slices.Contains(want, journal.StatusPaused) && !slices.Contains(want, journal.StatusRunning) {
		return append(slices.Clone(want), journal.StatusRunning)
	}
	return want
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

// create checks, prepares, journals and submits a run for who.
func (h *Handler) create(ctx context.Context, req *api.CreateRun, who *caller) (api.Run, error) {
	if h.opts.Prepare == nil {
		return api.Run{}, &apiError{http.StatusServiceUnavailable, api.CodeUnavailable, "this server does not create runs (no run preparation configured)"}
	}
	// A creation slower than a second logs where its time went.
	start, last := time.Now(), time.Now()
	var phases []any
	phase := func(name string) {
		now := time.Now()
		phases = append(phases, name, now.Sub(last).Round(time.Millisecond).String())
		last = now
	}
	defer func() {
		if d := time.Since(start); d > time.Second {
			h.logger.Warn("slow run creation", append([]any{"duration", d.Round(time.Millisecond).String()}, phases...)...)
		}
	}()
	a := &admission{who: who, demo: req.Demo, demoWorkspace: req.Demo}
	if err := h.admitRequest(ctx, a, req); err != nil {
		return api.Run{}, err
	}
	phase("admit_request")
	c, err := h.opts.Prepare(ctx, req)
	if err != nil {
		return api.Run{}, h.invalid(err)
	}
	phase("prepare")
	ws, err := h.admit(ctx, a, c)
	if err != nil {
		return api.Run{}, err
	}
	phase("admit")
	c.Workspace = ws
	stamp(c, a)
	id, err := h.rt.Create(ctx, c)
	if err != nil {
		return api.Run{}, err
	}
	phase("journal")
	rerr := h.record(ctx, who, action{Action: "run.create", RunID: id, Detail: detail(c.Model, a)})
	phase("audit")
	if err := h.pool.submit(id); err != nil {
		return api.Run{}, err
	}
	run, err := h.run(ctx, id, 0)
	phase("summary")
	if err == nil {
		err = rerr
	}
	return run, err
}

// detail is an api.action's detail: text and the admin's overrides.
func detail(text string, a *admission) string {
	if len(a.overrides) > 0 {
		return strings.TrimSpace(text + " (admin override: " + strings.Join(a.overrides, ", ") + ")")
	}
	return text
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
	record := func() error {
		// Hold the run's lease while recording, as an executor would: if
		// another process executes the run, say so rather than race it.
		if l, ok := h.rt.Store().(journal.Locker); ok {
			unlock, err := l.Lock(ctx, id)
			if errors.Is(err, journal.ErrLocked) {
				return ErrElsewhere
			}
			if err != nil {
				return err
			}
			defer unlock()
		}
		_, err := h.rt.CancelByToken(context.WithoutCancel(ctx), id, who.Name, who.ID)
		return err
	}
	err = h.pool.cancel(ctx, id, who, record)
	if errors.Is(err, ErrElsewhere) {
		// Another server executes it: ask it through the journal.
		err = h.cancelElsewhere(ctx, id, who, record)
	}
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
	run, err := h.resume(ctx, id, &req, who)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusAccepted, run)
	return nil
}

// resume queues a paused, failed or canceled run for who, with req's
// message and changes, after checking it as a create is checked: who may
// act as its agent, and it uses the server's sandbox, policy, models and
// workspace roots.
func (h *Handler) resume(ctx context.Context, id string, req *api.ResumeRun, who *caller) (api.Run, error) {
	message := req.Message
	run, err := h.run(ctx, id, 0)
	if err != nil {
		return run, err
	}
	if run, err = h.untilIdle(ctx, run); err != nil {
		return run, err
	}
	switch {
	case run.Status == string(journal.StatusCompleted) && strings.TrimSpace(message) == "":
		return run, conflict(api.CodeRunCompleted, "run %s has completed: send a message to follow up, or fork it to continue from an earlier event", id)
	case run.Executing:
		return run, conflict(api.CodeConflict, "run %s is executing", id)
	case len(run.Pending) > 0:
		return run, conflict(api.CodeConflict, "run %s waits for %d approval(s); approve or deny them", id, len(run.Pending))
	}
	ch, err := h.resumeChange(ctx, id, req)
	if err != nil {
		return run, err
	}
	c, err := h.sums.created(ctx, id)
	if err != nil {
		return run, err
	}
	demo := c.Labels[LabelDemo] != ""
	a := &admission{who: who, demo: demo, demoWorkspace: demo}
	if _, err := h.admit(ctx, a, c); err != nil {
		return run, err
	}
	queued, queuedChange := message, ch
	if h.pool.dispatch != nil {
		// The workers execute the run: the resume, with the message and
		// the changes, is journaled here (run.resumed naming the person,
		// as an execution's own resume would), and the worker's
		// execution folds it from the journal. (A worker never resumes
		// a run that ended since its workflow last looked: that was a
		// cancel.)
		r := &agent.Resumption{Message: message, Limits: ch.limits, Settings: ch.settings, ContextWindow: ch.contextWindow}
		if who != nil {
			r.By, r.Token = who.Name, who.ID
		}
		if _, err := h.rt.JournalResume(ctx, id, r); err != nil {
			switch {
			case errors.Is(err, agent.ErrRunBusy):
				return run, conflict(api.CodeConflict, "run %s is executing", id)
			case errors.Is(err, agent.ErrRunCompleted):
				return run, conflict(api.CodeRunCompleted, "run %s has completed: send a message to follow up", id)
			}
			return run, err
		}
		queued, queuedChange = "", change{}
	}
	if err := h.pool.resume(id, queued, queuedChange, who); err != nil {
		return run, err
	}
	if err := h.record(ctx, who, action{Action: "run.resume", RunID: id, Detail: detail(resumeDetail(message, ch), a)}); err != nil {
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
	run, err := h.forkAndStart(ctx, r.PathValue("id"), &req, who)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, run)
	return nil
}

// forkAndStart forks run src for who, records it, and starts the fork if
// asked (a fork not started is journaled paused, see Handler.fork).
func (h *Handler) forkAndStart(ctx context.Context, src string, req *api.ForkRun, who *caller) (api.Run, error) {
	id, a, err := h.fork(ctx, src, req, who)
	if err != nil {
		return api.Run{}, err
	}
	rerr := h.record(ctx, who, action{Action: "run.fork", RunID: id, Target: src, Detail: detail(strconv.FormatInt(req.Seq, 10), a)})
	if req.Start {
		if err := h.pool.resume(id, req.Message, change{}, who); err != nil {
			return api.Run{}, err
		}
	}
	run, err := h.run(ctx, id, 0)
	if err != nil {
		return run, err
	}
	return run, rerr
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

// maxServedArtifact bounds an artifact the server sends: 64 MiB.
const maxServedArtifact = 64 << 20

// readArtifact reads a run's artifact: only files under
// .keel/artifacts/ of the run's workspace are served.
func (h *Handler) readArtifact(ctx context.Context, id, rel string) ([]byte, error) {
	run, err := h.run(ctx, id, 0)
	if err != nil {
		return nil, err
	}
	clean := path.Clean(rel)
	c, err := h.sums.created(ctx, id)
	if err != nil {
		return nil, err
	}
	if c.StateDir != "" && !strings.HasPrefix(clean, "/") {
		// The UI's links drop the leading slash of the path.
		clean = "/" + clean
	}
	ws, err := tool.NewWorkspace(run.Workspace, "", nil)
	if err != nil {
		return nil, notFound("the run's workspace is not available: %v", err)
	}
	defer ws.Close()
	if c.StateDir != "" {
		if err := ws.SetState(c.StateDir); err != nil {
			return nil, notFound("the run's state directory is not available")
		}
	}
	if _, ok := ws.ArtifactRel(clean); !ok && (!strings.HasPrefix(clean, artifactDir) || strings.Contains(clean, "..")) {
		return nil, badRequest("only the run's artifacts are served")
	}
	b, err := tool.ReadArtifact(ws, clean, maxServedArtifact)
	if err != nil || len(b) > maxServedArtifact {
		return nil, notFound("artifact %s is not available", rel)
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

// untilIdle waits while run is still executing although its journal says
// it stopped (paused, failed, canceled): its execution is ending (the
// sandbox is torn down), and a person who read the stop and resumes at
// once must not be told the run is executing. It returns the run as it
// is then.
func (h *Handler) untilIdle(ctx context.Context, run api.Run) (api.Run, error) {
	for run.Executing && run.Status != string(journal.StatusRunning) {
		ch := h.pool.watch(run.ID)
		if ch == nil {
			break
		}
		if h.idleWait != nil {
			h.idleWait(run.ID)
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return run, ctx.Err()
		}
		var err error
		if run, err = h.run(ctx, run.ID, 0); err != nil {
			return run, err
		}
	}
	return run, nil
}

// resumeChange checks the limits, settings and context window a resume
// asks for and returns them applied to the run's own: what the run has
// from now on (journaled in run.resumed, as `keel runs resume` locally).
func (h *Handler) resumeChange(ctx context.Context, id string, req *api.ResumeRun) (change, error) {
	var ch change
	if req.Limits == nil && req.Settings == nil && req.ContextWindow == 0 {
		return ch, nil
	}
	st, _, err := h.rt.Load(ctx, id)
	if err != nil {
		return ch, err
	}
	if l := req.Limits; l != nil {
		if l.MaxSteps < 0 || l.MaxTokens < 0 || l.MaxCost < 0 {
			return ch, badRequest("limits must not be negative")
		}
		n := st.Limits
		if l.MaxSteps > 0 {
			n.MaxSteps = l.MaxSteps
		}
		if l.MaxTokens > 0 {
			n.MaxTokens = l.MaxTokens
		}
		if l.MaxCost > 0 {
			n.MaxCost = l.MaxCost
		}
		if l.Timeout != "" {
			d, err := parseDuration(l.Timeout)
			if err != nil {
				return ch, badRequest("limits.timeout %q: %v", l.Timeout, err)
			}
			if d > 0 {
				n.Timeout = agent.Duration(d)
			}
		}
		if n != st.Limits {
			ch.limits = &n
		}
	}
	if s := req.Settings; s != nil {
		set := st.Settings
		for _, d := range []struct {
			name string
			v    string
			to   *agent.Duration
			neg  bool
		}{
			{"command_timeout", s.CommandTimeout, &set.CommandTimeout, false},
			{"command_idle_timeout", s.CommandIdleTimeout, &set.CommandIdleTimeout, true},
			{"model_idle_timeout", s.ModelIdleTimeout, &set.ModelIdleTimeout, false},
		} {
			if d.v == "" {
				continue
			}
			v, err := time.ParseDuration(d.v)
			if err != nil || v < 0 && !d.neg {
				return ch, badRequest("settings.%s %q: want a Go duration such as 90s", d.name, d.v)
			}
			*d.to = agent.Duration(v)
		}
		for _, n := range []struct {
			v  *int
			to *int
		}{
			{s.Concurrency, &set.Concurrency}, {s.MaxResultChars, &set.MaxResultChars}, {s.MaxOutputTokens, &set.MaxOutputTokens},
			{s.ModelStallRetries, &set.ModelStallRetries}, {s.ModelRetries, &set.ModelRetries},
		} {
			if n.v != nil {
				*n.to = *n.v
			}
		}
		if err := set.Validate(); err != nil {
			return ch, badRequest("settings: %v", err)
		}
		if set != st.Settings {
			ch.settings = &set
		}
	}
	if w := req.ContextWindow; w != 0 {
		if fl := agent.MinContextWindow(st.Created); w < fl.Min {
			return ch, badRequest("context_window %d is too small for this run: want at least %d tokens", w, fl.Min)
		}
		ch.contextWindow = w
	}
	return ch, nil
}

// resumeDetail is the audit detail of a resume: the message and what it
// changes.
func resumeDetail(message string, ch change) string {
	var parts []string
	if message != "" {
		parts = append(parts, message)
	}
	if l := ch.limits; l != nil {
		parts = append(parts, fmt.Sprintf("limits: max_steps %d, max_tokens %d, max_cost %g, timeout %s", l.MaxSteps, l.MaxTokens, l.MaxCost, time.Duration(l.Timeout)))
	}
	if ch.settings != nil {
		parts = append(parts, "settings changed")
	}
	if ch.contextWindow > 0 {
		parts = append(parts, fmt.Sprintf("context window %d", ch.contextWindow))
	}
	return strings.Join(parts, "; ")
}
