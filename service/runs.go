package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
func (s *Service) run(ctx context.Context, id string, knownSeq int64) (api.Run, error) {
	if journal.IsSystem(id) {
		return api.Run{}, notFound("no run %q", id)
	}
	// The pool's view first, then the journal's: an execution that ends
	// between the two reads has its last events in the summary, so a
	// run shown idle and completed has nothing after what is shown (an
	// event stream ends on that; the other order could end it before a
	// follow-up's events).
	queued, executing, lastErr := s.pool.state(id)
	r, err := s.sums.get(ctx, id, knownSeq)
	if errors.Is(err, journal.ErrNotFound) {
		return r, notFound("no run %q", id)
	}
	if err != nil {
		return r, err
	}
	r.Queued, r.Executing, r.Error = queued, executing, lastErr
	if r.Status == string(journal.StatusRunning) && !r.Queued && !r.Executing && s.pool.dispatcher == nil {
		r.Idle = s.idle(ctx, id, r.LastType)
	}
	return r, nil
}

// The statuses a run is shown with, besides the journal's, for a run the
// journal says is running but that nothing executes (api.Run.Idle).
const (
	StatusQueued      journal.Status = "queued"
	StatusInterrupted journal.Status = "interrupted"
)

// Statuses are the statuses runs are listed with and filtered by.
var Statuses = []journal.Status{journal.StatusRunning, StatusQueued, StatusInterrupted, journal.StatusPaused,
	journal.StatusCompleted, journal.StatusFailed, journal.StatusCanceled}

// The filters of runs lists besides their statuses: runs a process
// executes now, and runs waiting for a person's approval.
const (
	StatusExecuting journal.Status = "executing"
	StatusWaiting   journal.Status = "waiting"
)

// StatusFilters are what runs lists are filtered by, in every front end:
// [Statuses], then [StatusExecuting] and [StatusWaiting].
var StatusFilters = append(slices.Clip(Statuses), StatusExecuting, StatusWaiting)

// MatchStatus says whether run r is kept by status filter st (one of
// [StatusFilters]).
func MatchStatus(r *api.Run, st journal.Status) bool {
	switch st {
	case StatusExecuting:
		return r.Executing
	case StatusWaiting:
		return len(r.Pending) > 0
	}
	return journal.Status(RunStatus(r)) == st
}

// RunStatus is run's status as runs are listed (and filtered): its Idle
// state, else the journal's.
func RunStatus(r *api.Run) string {
	if r.Idle != "" {
		return r.Idle
	}
	return r.Status
}

// idle says whether run id, running in its journal, is executed by
// nobody: no process holds its lease (a store without leases cannot
// tell: ""). It is queued when its journal holds nothing after its
// run.created (lastType), else interrupted.
func (s *Service) idle(ctx context.Context, id, lastType string) string {
	lk, ok := s.rt.Store().(journal.Locker)
	if !ok {
		return ""
	}
	if h, err := lk.Holder(ctx, id); err != nil || h != "" {
		return ""
	}
	if lastType == string(journal.RunCreated) {
		return string(StatusQueued)
	}
	return string(StatusInterrupted)
}

// checkStatuses refuses a status runs are not listed with.
func checkStatuses(status []journal.Status) error {
	for _, st := range status {
		if !slices.Contains(StatusFilters, st) {
			want := make([]string, len(StatusFilters))
			for i, f := range StatusFilters {
				want[i] = string(f)
			}
			return badRequest("status %q: want %s or %s", st, strings.Join(want[:len(want)-1], ", "), want[len(want)-1])
		}
	}
	return nil
}

// runs lists runs newest first, with statuses among status (all if
// empty), at most limit (all if 0).
// Statuses are the runs' folded statuses (a run waiting for the second of
// two approvals is paused, whatever its newest event).
func (s *Service) runs(ctx context.Context, status []journal.Status, limit int) ([]api.Run, error) {
	if limit > 0 {
		// Most lists are a page of the newest runs: ask the index for a
		// page, with room for the system streams and for runs whose
		// folded status the filter drops; only a page that falls short
		// while the index had more is read again in full.
		page := limit + limitSlack
		out, err := s.runsFrom(ctx, status, limit, page)
		if err != nil || len(out.runs) == limit || !out.more {
			return out.runs, err
		}
	}
	out, err := s.runsFrom(ctx, status, limit, 0)
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
func (s *Service) runsFrom(ctx context.Context, status []journal.Status, limit, page int) (runPage, error) {
	list, err := s.index.list(ctx, &journal.ListParams{Status: indexStatuses(status), Limit: page})
	if err != nil {
		return runPage{}, err
	}
	res := runPage{more: page > 0 && len(list) == page}
	out := []api.Run{}
	for _, rs := range list {
		if journal.IsSystem(rs.RunID) {
			continue
		}
		if limit > 0 && len(out) == limit {
			break
		}
		r, err := s.run(ctx, rs.RunID, rs.LastSeq)
		if err != nil {
			// One bad journal must not hide the others: show it with
			// its error.
			e, internal := Classify(err)
			if internal {
				s.logger.Error("read run", "run_id", rs.RunID, "err", err)
			}
			r = api.Run{ID: rs.RunID, Status: string(rs.Status), Created: rs.Created, Updated: rs.Updated, Events: rs.LastSeq, Error: e.Message}
		}
		if len(status) > 0 && !slices.ContainsFunc(status, func(st journal.Status) bool { return MatchStatus(&r, st) }) {
			continue
		}
		out = append(out, r)
	}
	res.runs = out
	return res, nil
}

// indexStatuses returns the statuses to ask the store's index for, to find
// the runs whose folded status is among want: a run whose newest event is
// a decision is indexed as running but may still be paused (waiting for
// another decision), so asking for paused runs must include running ones.
func indexStatuses(want []journal.Status) []journal.Status {
	var out []journal.Status
	for _, st := range want {
		switch st {
		case StatusQueued, StatusInterrupted, StatusExecuting:
			st = journal.StatusRunning // idle and executing runs are running in the journal
		case StatusWaiting:
			st = journal.StatusPaused // a run waiting for approval is paused (or running, below)
		}
		if !slices.Contains(out, st) {
			out = append(out, st)
		}
	}
	if slices.Contains(out, journal.StatusPaused) && !slices.Contains(out, journal.StatusRunning) {
		out = append(out, journal.StatusRunning)
	}
	return out
}

// resume queues a paused, failed or canceled run for who, with req's
// message and changes, after checking it as a create is checked: who may
// act as its agent, and it uses the server's sandbox, policy, models and
// workspace roots.
func (s *Service) resume(ctx context.Context, id string, req *api.ResumeRun, who *Caller) (api.Run, error) {
	message := req.Message
	if err := CheckResume(req); err != nil {
		return api.Run{}, err
	}
	run, err := s.run(ctx, id, 0)
	if err != nil {
		return run, err
	}
	if run, err = s.untilIdle(ctx, run); err != nil {
		return run, err
	}
	st, _, err := s.rt.Load(ctx, id)
	if err != nil {
		return run, err
	}
	plan, err := PlanResume(st, req)
	if err != nil {
		return run, err
	}
	if run.Executing {
		return run, Executing(id, "", message != "")
	}
	ch := change{limits: plan.Limits, settings: plan.Settings, contextWindow: plan.ContextWindow}
	c, err := s.sums.created(ctx, id)
	if err != nil {
		return run, err
	}
	demo := c.Labels[LabelDemo] != ""
	a := &admission{who: who, demo: demo, demoWorkspace: demo, existing: id}
	// A resume that attaches executes nothing: the run is not set up.
	if _, err := s.admit(ctx, a, c, !plan.Attach); err != nil {
		return run, err
	}
	if len(c.SecretEnv) > 0 && !c.ForeignSecrets && !a.admin() {
		// The gate decides this run as one whose output only people who
		// may hold its secrets read; a message of another would read it.
		return run, forbidden("run %s holds the server operator's secrets (%s) and an admin made it: only an admin continues it; fork it to continue as yourself (the fork asks before it shows them)", id, strings.Join(c.SecretEnv, ", "))
	}
	if plan.Attach {
		// Nothing to journal, nothing to execute: the run waits for a
		// person, and the caller attaches to the wait (see ResumePlan).
		return run, nil
	}
	if !who.Local && s.executes() {
		// The rule a decision follows (leftToStarter): a run a keel run
		// started on this journal with another policy or sandbox is
		// continued where it was started, not here.
		if err := s.leftToStarter(c); err != nil {
			return run, conflict(api.CodeConflict, "%s", notContinued(err, id))
		}
	}
	queued, queuedChange := message, ch
	if s.pool.dispatcher != nil {
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
		if _, err := s.rt.JournalResume(ctx, id, r); err != nil {
			switch {
			case errors.Is(err, agent.ErrRunBusy):
				return run, Executing(id, "", message != "")
			case errors.Is(err, agent.ErrRunCompleted):
				return run, conflict(api.CodeRunCompleted, "run %s has completed: send a message to follow up", id)
			}
			return run, err
		}
		queued, queuedChange = "", change{}
	}
	if err := s.pool.resume(id, queued, queuedChange, who); err != nil {
		return run, err
	}
	if err := s.record(ctx, who, action{Action: "run.resume", RunID: id, Detail: detail(resumeDetail(message, ch), a)}); err != nil {
		return run, err
	}
	return s.run(ctx, id, 0)
}

// forkAndStart forks run src for who, records it, and starts the fork if
// asked (a fork not started is journaled paused, see Service.fork).
func (s *Service) forkAndStart(ctx context.Context, src string, req *api.ForkRun, who *Caller) (api.Run, error) {
	id, a, limits, err := s.fork(ctx, src, req, who)
	if err != nil {
		return api.Run{}, err
	}
	rerr := s.record(ctx, who, action{Action: "run.fork", RunID: id, Target: src, Detail: detail(strconv.FormatInt(req.Seq, 10), a)})
	if req.Start && s.executes() {
		message, ch := req.Message, change{limits: limits}
		if s.pool.dispatcher != nil && (message != "" || limits != nil) {
			// The workers execute the fork: the message and the limits
			// are journaled here in its run.resumed, as for a resume.
			r := &agent.Resumption{Message: message, Limits: limits}
			if who != nil {
				r.By, r.Token = who.Name, who.ID
			}
			if _, err := s.rt.JournalResume(ctx, id, r); err != nil {
				return api.Run{}, err
			}
			message, ch = "", change{}
		}
		if err := s.pool.resume(id, message, ch, who); err != nil {
			return api.Run{}, err
		}
	}
	run, err := s.run(ctx, id, 0)
	if err != nil {
		return run, err
	}
	return run, rerr
}

// artifactDir is where tools keep whole outputs, relative to the
// workspace (see tool.Output).
const artifactDir = ".keel/artifacts/"

// maxServedArtifact bounds an artifact the server sends: 64 MiB.
const maxServedArtifact = 64 << 20

// readArtifact reads a run's artifact: only files under
// .keel/artifacts/ of the run's workspace are served.
func (s *Service) readArtifact(ctx context.Context, id, rel string) ([]byte, error) {
	run, err := s.run(ctx, id, 0)
	if err != nil {
		return nil, err
	}
	clean := path.Clean(rel)
	c, err := s.sums.created(ctx, id)
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

// untilIdle waits while run is still executing although its journal says
// it stopped (paused, failed, canceled): its execution is ending (the
// sandbox is torn down), and a person who read the stop and resumes at
// once must not be told the run is executing. It returns the run as it
// is then.
func (s *Service) untilIdle(ctx context.Context, run api.Run) (api.Run, error) {
	for run.Executing && run.Status != string(journal.StatusRunning) {
		// No channel: the execution ended since run was read; read it
		// again rather than return it as executing.
		if ch := s.pool.watch(run.ID); ch != nil {
			if s.idleWait != nil {
				s.idleWait(run.ID)
			}
			select {
			case <-ch:
			case <-ctx.Done():
				return run, ctx.Err()
			}
		}
		var err error
		if run, err = s.run(ctx, run.ID, 0); err != nil {
			return run, err
		}
	}
	return run, nil
}

// Changes are what a resume changes of a run from now on (see
// agent.ExecParams; journaled in run.resumed): nil or zero fields change
// nothing.
type Changes struct {
	Limits        *agent.Limits
	Settings      *agent.Settings
	ContextWindow int
}

// CompletedError is the refusal to resume completed run id without a
// message, whoever resumes it (the API, keel runs resume on the
// journal). It wraps agent.ErrRunCompleted.
func CompletedError(id string) error {
	return &Error{Code: api.CodeRunCompleted, cause: agent.ErrRunCompleted,
		Message: fmt.Sprintf("run %s has completed, so there is nothing to resume: follow it up with a message, or fork it to continue from an earlier event", id)}
}

// ResumePlan is what a resume does with a run, decided in one place for
// every front end (the API and the web UI through [Service.Resume], keel
// runs resume on the journal).
type ResumePlan struct {
	// Changes are the limits, settings and context window the run has
	// from now on (journaled in run.resumed).
	Changes
	// Attach: the run waits for a person's decision on its calls, and
	// the resume brings nothing (no message, no limit, setting or
	// context window other than the run's own). Nothing is journaled
	// and nothing executes: the front end attaches to the wait, as keel
	// run does when a run asks. At a terminal it asks about the calls
	// (the edit as a diff, approve or deny) and goes on with the run once
	// they are decided; elsewhere it says what the run waits for and
	// exits as keel run does for a paused run (3). A resume that brings
	// something journals it (run.resumed, the message) and the run
	// pauses again at the same calls.
	Attach bool
}

// PlanResume checks a resume of run st with req and returns what it
// does, with every front end's refusals in one order: req's own values
// (CheckResume), a child agent that ended (it belongs to its parent), a
// completed run without a message, then req's values against the run
// (ResumeChanges). Whether another process executes the run is the
// caller's to check (it holds the run's lease or pool).
func PlanResume(st *agent.State, req *api.ResumeRun) (ResumePlan, error) {
	if err := CheckResume(req); err != nil {
		return ResumePlan{}, err
	}
	if err := agent.CheckResumable(st); err != nil {
		return ResumePlan{}, conflict(api.CodeConflict, "%s", err.Error())
	}
	if st.Status == journal.StatusCompleted && strings.TrimSpace(req.Message) == "" {
		return ResumePlan{}, CompletedError(st.RunID)
	}
	ch, err := ResumeChanges(st, req)
	if err != nil {
		return ResumePlan{}, err
	}
	if err := stillAtLimit(st, ch); err != nil {
		return ResumePlan{}, err
	}
	return ResumePlan{Changes: ch, Attach: len(st.Pending()) > 0 && req.Message == "" && ch == (Changes{})}, nil
}

// limitFlags are the flags of keel runs resume that raise the limit of
// an end reason.
var limitFlags = map[string]string{agent.ReasonMaxSteps: "max_steps (--max-steps)", agent.ReasonMaxTokens: "max_tokens (--max-tokens)",
	agent.ReasonMaxCost: "max_cost (--max-cost)", agent.ReasonMaxToolCalls: "max_tool_calls (--max-tool-calls)"}

// stillAtLimit refuses the resume of a run a limit stopped that the
// limits it would go on under (ch's, else its own) still stop: its
// execution would journal a resume and end again at once, the message
// unread. A raised limit, or a lifted one (0), goes on.
func stillAtLimit(st *agent.State, ch Changes) error {
	if st.Status != journal.StatusFailed || st.Ended == nil || limitFlags[st.Ended.Reason] == "" {
		return nil
	}
	s := *st
	if ch.Limits != nil {
		s.Limits = *ch.Limits
	}
	reason, msg, ok := agent.LimitReached(&s)
	if !ok {
		return nil
	}
	raise := "raise " + limitFlags[reason]
	if v := RaisedLimit(reason, &s); v != "" {
		raise += ", to " + v + " for example"
	}
	return badRequest("run %s stopped at a limit it would stop at again at once (%s): %s, or give 0 to lift it", st.RunID, msg, raise)
}

// CheckResume checks what req asks that does not depend on the run (its
// limits and settings), with the refusals of ResumeChanges: every front
// end checks it before it looks at the run, so a bad value is refused
// first, the same way, whatever state the run is in.
func CheckResume(req *api.ResumeRun) error {
	r := *req
	r.ContextWindow = 0
	_, err := ResumeChanges(&agent.State{Settings: agent.DefaultSettings()}, &r)
	return err
}

// ResumeChanges checks the limits, settings and context window req asks
// of the run st and returns them applied to the run's own, whoever
// resumes it (the API, keel runs resume on the journal). The message is
// not its concern.
func ResumeChanges(st *agent.State, req *api.ResumeRun) (Changes, error) {
	var ch Changes
	if req.Limits != nil {
		n, err := ApplyLimits(st.Limits, req.Limits)
		if err != nil {
			return ch, err
		}
		if n != st.Limits {
			ch.Limits = &n
		}
	}
	if rs := req.Settings; rs != nil {
		set := st.Settings
		for _, d := range []struct {
			name string
			v    string
			to   *agent.Duration
			// want says the values allowed when some are not ("": any).
			want string
			ok   func(time.Duration) bool
		}{
			{"command_timeout", rs.CommandTimeout, &set.CommandTimeout, "a positive duration such as 90s", func(v time.Duration) bool { return v > 0 }},
			{"command_idle_timeout", rs.CommandIdleTimeout, &set.CommandIdleTimeout, "", nil},
			{"model_idle_timeout", rs.ModelIdleTimeout, &set.ModelIdleTimeout, "0 (the provider adapter's default) or more, such as 90s", func(v time.Duration) bool { return v >= 0 }},
		} {
			if d.v == "" {
				continue
			}
			v, err := time.ParseDuration(d.v)
			if err != nil {
				return ch, badRequest("settings.%s %q: want a Go duration such as 90s", d.name, d.v)
			}
			if d.ok != nil && !d.ok(v) {
				// A Go duration out of range: say which range.
				return ch, badRequest("settings.%s %q: want %s", d.name, d.v, d.want)
			}
			*d.to = agent.Duration(v)
		}
		for _, n := range []struct {
			v  *int
			to *int
		}{
			{rs.Concurrency, &set.Concurrency}, {rs.MaxResultChars, &set.MaxResultChars}, {rs.MaxOutputTokens, &set.MaxOutputTokens},
			{rs.ModelStallRetries, &set.ModelStallRetries}, {rs.ModelRetries, &set.ModelRetries},
		} {
			if n.v != nil {
				*n.to = *n.v
			}
		}
		if err := set.Validate(); err != nil {
			return ch, badRequest("settings: %v", err)
		}
		if set != st.Settings {
			ch.Settings = &set
		}
	}
	if w := req.ContextWindow; w != 0 {
		if fl := agent.MinContextWindow(st.Created); w < fl.Min {
			return ch, badRequest("%s", fl.TooSmall(fmt.Sprintf("--context-window %d", w)))
		}
		ch.ContextWindow = w
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

// Run returns run id as the API shows it: its summary folded from the
// journal, with the executor's view of it (queued, executing, its last
// error).
func (s *Service) Run(ctx context.Context, who *Caller, id string) (api.Run, error) {
	r, err := s.run(ctx, id, 0)
	if err != nil {
		return r, err
	}
	one := []api.Run{r}
	err = s.hideRuns(ctx, who, one)
	return one[0], err
}

// ListRuns selects the runs [Service.Runs] lists.
type ListRuns struct {
	// Status keeps the runs whose status is one of these (all if
	// empty): the journal's, or for a running run that nothing
	// executes its Idle state ([Statuses], [RunStatus]); another is
	// refused.
	Status []journal.Status
	// Limit bounds the list (all if 0).
	Limit int
}

// Runs lists runs newest first. p may be nil.
func (s *Service) Runs(ctx context.Context, who *Caller, p *ListRuns) ([]api.Run, error) {
	if p == nil {
		p = &ListRuns{}
	}
	if err := checkStatuses(p.Status); err != nil {
		return nil, err
	}
	if p.Limit < 0 {
		return nil, badRequest("limit %d: want 0 (all runs) or more", p.Limit)
	}
	list, err := s.runs(ctx, p.Status, p.Limit)
	if err != nil {
		return nil, err
	}
	return list, s.hideRuns(ctx, who, list)
}

// EncodeRun returns r's JSON as encoding/json writes it, from the
// summaries' cache when r is a summary [Service.Run] or [Service.Runs]
// returned: encoding the same runs again for every poll of a dashboard
// was most of a server's CPU.
func (s *Service) EncodeRun(r *api.Run) ([]byte, error) { return s.sums.encode(r) }

// Created returns run id's run.created payload (shared: do not change
// it).
func (s *Service) Created(ctx context.Context, id string) (*agent.RunCreated, error) {
	return s.sums.created(ctx, id)
}

// RunSecrets returns the values of the secrets of the run c describes
// that this process holds (Options.Getenv; see
// [agent.RunCreated.SecretValues]), to hide them in what is shown of the
// run's files; nil when it holds none.
func (s *Service) RunSecrets(c *agent.RunCreated) []agent.Secret {
	if s.opts.Getenv == nil || c == nil {
		return nil
	}
	secrets, _ := c.SecretValues(s.opts.Getenv)
	return secrets
}

// Resume queues a paused, failed or canceled run for who, with req's
// message and changes (limits, settings, context window: journaled in
// run.resumed), after checking it as a creation is checked.
func (s *Service) Resume(ctx context.Context, who *Caller, id string, req *api.ResumeRun) (api.Run, error) {
	return s.resume(ctx, id, req, who)
}

// Fork forks run id at req.Seq for who and starts the fork if asked (see
// [Service.fork] for what a fork copies and where it works).
func (s *Service) Fork(ctx context.Context, who *Caller, id string, req *api.ForkRun) (api.Run, error) {
	return s.forkAndStart(ctx, id, req, who)
}

// Artifact returns a run's artifact (a whole tool output): only files
// under the run's artifact directory are served.
func (s *Service) Artifact(ctx context.Context, who *Caller, id, path string) ([]byte, error) {
	return s.readArtifact(ctx, id, path)
}

// Cancel cancels run id for who: its execution here is canceled (it
// journals run.canceled naming the person), a run another server
// executes is asked to through the journal's control stream, and a run
// nobody executes is canceled at once. A canceled run is returned as it
// is; a completed one cannot be canceled.
func (s *Service) Cancel(ctx context.Context, who *Caller, id string) (api.Run, error) {
	run, err := s.run(ctx, id, 0)
	if err != nil {
		return run, err
	}
	c, err := s.sums.created(ctx, id)
	if err != nil {
		return run, err
	}
	if err := (&admission{who: who}).mayContinue(id, c); err != nil {
		return run, err
	}
	switch journal.Status(run.Status) {
	case journal.StatusCompleted:
		return run, CancelCompletedError(id)
	case journal.StatusCanceled:
		return run, nil
	}
	record := func() error {
		// Hold the run's lease while recording, as an executor would: if
		// another process executes the run, say so rather than race it.
		if l, ok := s.rt.Store().(journal.Locker); ok {
			unlock, err := l.Lock(ctx, id)
			if errors.Is(err, journal.ErrLocked) {
				return ErrElsewhere
			}
			if err != nil {
				return err
			}
			defer unlock()
		}
		_, err := s.rt.CancelByToken(context.WithoutCancel(ctx), id, who.Name, who.ID)
		return err
	}
	err = s.pool.cancel(ctx, id, who, record)
	if errors.Is(err, ErrElsewhere) {
		// Another server executes it: ask it through the journal.
		err = s.cancelElsewhere(ctx, id, who, record)
	}
	if err != nil {
		return run, err
	}
	if err := s.record(ctx, who, action{Action: "run.cancel", RunID: id}); err != nil {
		return run, err
	}
	return s.run(ctx, id, 0)
}

// Load reports the runs executing in this process and those queued.
func (s *Service) Load() (executing, queued int) {
	p := s.pool
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.active), len(p.queue)
}

// Subscribe returns a cursor into what run id's execution in this
// process does before it is journaled (the model's text as it streams,
// a call's output as it runs), for an event stream; close it when the
// stream ends.
func (s *Service) Subscribe(id string) *LiveSub { return s.live.subscribe(id) }

// Watch returns a channel closed when run id's place in the executor
// (queued, executing, idle) next changes, or nil when it is neither
// queued nor executing here.
func (s *Service) Watch(id string) <-chan struct{} { return s.pool.watch(id) }

// Tree returns run id with its child runs, as far down as they go (at
// most [agent.MaxTreeRuns] runs), each folded from its journal.
func (s *Service) Tree(ctx context.Context, who *Caller, id string) (api.RunTree, error) {
	if _, err := s.run(ctx, id, 0); err != nil {
		return api.RunTree{}, err
	}
	st, _, err := s.rt.Load(ctx, id)
	if err != nil {
		return api.RunTree{}, err
	}
	t := agent.LoadTree(st, func(id string) ([]journal.Event, error) { return s.rt.Store().Read(ctx, id, 1) }, agent.MaxTreeRuns)
	out := treeOf(t)
	if p := st.Created.Parent; p != nil {
		out.Parent, out.Root = p.Run, p.Root
	}
	return out, nil
}

// leftOf is what is left r of limits l, on the limited axes only: an
// axis without a limit is absent, so that a 0 there means none left.
func leftOf(l agent.Limits, r agent.Spend) api.RunTreeLeft {
	var out api.RunTreeLeft
	if l.MaxSteps > 0 {
		out.Steps = &r.Steps
	}
	if l.MaxTokens > 0 {
		out.Tokens = &r.Tokens
	}
	if l.MaxCost > 0 {
		out.Cost = &r.Cost
	}
	if l.MaxToolCalls > 0 {
		out.ToolCalls = &r.ToolCalls
	}
	if l.MaxChildren > 0 {
		out.Children = &r.Children
	}
	return out
}

func treeOf(t *agent.Tree) api.RunTree {
	sp := func(s agent.Spend) api.RunTreeSpend {
		return api.RunTreeSpend{Steps: s.Steps, Tokens: s.Tokens, Cost: s.Cost, ToolCalls: s.ToolCalls, Children: s.Children}
	}
	l := t.Limits
	out := api.RunTree{ID: t.RunID, Agent: t.Agent, Status: string(t.Status), Reason: t.Reason,
		Limits: api.RunTreeSpend{Steps: l.MaxSteps, Tokens: l.MaxTokens, Cost: l.MaxCost, ToolCalls: l.MaxToolCalls, Children: l.MaxChildren},
		Own:    sp(t.Own), Used: sp(t.Used), Left: leftOf(l, t.Remaining()), Children: []api.RunTree{}}
	for _, c := range t.Children {
		out.Children = append(out.Children, treeOf(c))
	}
	return out
}
