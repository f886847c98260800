package service

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/view"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/notify"
	"github.com/keel-run/keel/schedule"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/trigger"
)

// summaries caches each run's [api.Run] summary, folded incrementally:
// a request reads only the events appended since the cached one, and
// verifies their links to it. It keeps a few hundred bytes per run rather
// than the whole state, so listing thousands of runs stays cheap.
type summaries struct {
	store journal.Store
	mu    sync.Mutex
	runs  map[string]*summary
}

// summary is one run's folded summary.
type summary struct {
	mu       sync.Mutex
	run      api.Run
	lastHash string
	// first is the run's own first event (times only): for a fork, the
	// first after those it copied from its source.
	first journal.Event
	// forked is the number of events a fork copied from its source.
	forked int64
	// worked is the run's working time up to its newest pause or end;
	// since is when it last started running (see duration).
	worked int64
	since  time.Time
	// created is the run's run.created payload (shared, read-only) while
	// the run has not ended; it is dropped when the run ends, to keep the
	// cache small (an ended run that is resumed is read again).
	created *agent.RunCreated
	// pending lists the open approvals of the newest turn: requested,
	// neither decided nor given a result.
	pending []api.Approval
	// auths lists the calls of the newest turn that wait for an
	// authorization.
	auths []api.AuthWait
	// enc is the JSON of the run as of event encSeq, without what the
	// pool adds (see encode).
	enc    []byte
	encSeq int64
	// rows reads the events (steps, tokens, cost; no call summaries, so
	// that a summary stays small).
	rows view.Reader
}

func newSummaries(store journal.Store) *summaries {
	return &summaries{store: store, runs: map[string]*summary{}}
}

// get returns run id's summary brought up to date with the journal; an
// unknown run returns an error wrapping journal.ErrNotFound and a journal
// that fails its chain a *journal.CorruptError. knownSeq, if positive, is
// the run's newest sequence number as the caller saw it in the store's
// index: a cached summary at that sequence number is returned without a
// read.
func (c *summaries) get(ctx context.Context, id string, knownSeq int64) (api.Run, error) {
	c.mu.Lock()
	s := c.runs[id]
	if s == nil {
		s = &summary{}
		c.runs[id] = s
	}
	c.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if knownSeq > 0 && s.run.Events >= knownSeq {
		return s.copy(), nil
	}
	events, err := c.store.Read(ctx, id, s.run.Events+1)
	if err != nil {
		if s.run.Events == 0 {
			c.mu.Lock()
			delete(c.runs, id)
			c.mu.Unlock()
		}
		return api.Run{}, err
	}
	if s.run.Events == 0 && len(events) == 0 {
		return api.Run{}, &journal.CorruptError{RunID: id, Seq: 1, Reason: "the run exists but has no events"}
	}
	prev := s.lastHash
	if s.run.Events == 0 {
		prev = journal.GenesisHash
	}
	if err := journal.VerifyFrom(id, prev, s.run.Events+1, events); err != nil {
		return api.Run{}, err
	}
	for i := range events {
		if err := s.apply(&events[i]); err != nil {
			return api.Run{}, err
		}
	}
	return s.copy(), nil
}

// WorkingTime is the working time of a run with these events (all of
// them, from event 1), as its summary counts it (see duration): what
// keel runs show prints, so that it and the API's duration_ms agree.
func WorkingTime(events []journal.Event) (time.Duration, error) {
	var s summary
	for i := range events {
		if err := s.apply(&events[i]); err != nil {
			return 0, err
		}
	}
	return time.Duration(s.run.DurationMS) * time.Millisecond, nil
}

// encode returns r's JSON, as encoding/json writes it. r is a summary
// that get returned: its JSON is cached with the summary, until the next
// event, unless the pool's view of the run (queued, executing, its last
// error) is part of it.
func (c *summaries) encode(r *api.Run) ([]byte, error) {
	if r.Queued || r.Executing || r.Idle != "" || r.Error != "" || r.Events == 0 {
		return json.Marshal(r)
	}
	c.mu.Lock()
	s := c.runs[r.ID]
	c.mu.Unlock()
	if s == nil {
		return json.Marshal(r)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.Output != s.run.Output || r.Message != s.run.Message ||
		!slices.EqualFunc(r.Pending, s.pending, func(a, b api.Approval) bool { return bytes.Equal(a.Arguments, b.Arguments) }) {
		return json.Marshal(r) // as a caller may see it (hideApprovals)
	}
	if s.enc != nil && s.encSeq == r.Events {
		return s.enc, nil
	}
	b, err := json.Marshal(r)
	if err == nil && s.run.Events == r.Events {
		s.enc, s.encSeq = b, r.Events
	}
	return b, err
}

func (s *summary) copy() api.Run {
	r := s.run
	r.Pending = slices.Clone(s.pending)
	r.AuthWaits = slices.Clone(s.auths)
	return r
}

// apply folds one event into the summary, the way agent.Fold does for the
// fields a summary shows.
func (s *summary) apply(e *journal.Event) error {
	vr := s.rows.Read(e)
	if vr.Err != nil {
		return vr.Err
	}
	r := &s.run
	if e.Seq == 1 {
		c, ok := vr.Payload.(*agent.RunCreated)
		if !ok {
			return &journal.CorruptError{RunID: e.RunID, Seq: 1, Reason: fmt.Sprintf("first event is %s, want run.created", e.Type)}
		}
		s.first = journal.Event{Time: e.Time}
		s.forked = int64(forkEvents(c))
		s.created = c
		r.ID, r.Task, r.Model, r.Agent, r.OnBehalfOf = e.RunID, c.Task, c.Model, c.Principal, c.OnBehalfOf
		r.Workspace, r.Sandbox, r.Created = c.Workspace, c.Sandbox, e.Time
		r.ForkOf, r.CreatedBy, r.Origin = c.Labels[LabelForkOf], c.Labels[LabelCreatedBy], notify.Origin(c.Labels)
		if c.Parent != nil {
			r.Parent = c.Parent.Run
		}
	}
	r.Steps, r.Tokens, r.Cost = vr.Step, vr.Tokens, vr.Cost
	r.Events, r.LastType, r.Updated = e.Seq, string(e.Type), e.Time
	ran := r.Status == string(journal.StatusRunning)
	if f := summaryRows[e.Type]; f != nil && vr.Payload != nil {
		f(s, vr)
	}
	if journal.Status(r.Status).Terminal() {
		s.created = nil
		s.pending, s.auths = nil, nil
	}
	if s.forked > 0 && e.Seq == s.forked+1 {
		s.first = journal.Event{Time: e.Time} // a fork's own first event
		s.since, ran = e.Time, true
	}
	if e.Seq > s.forked {
		if p, ok := vr.Payload.(*agent.RunEnded); ok && e.Type == journal.RunPaused && p.Reason == agent.ReasonForked {
			// A fork made and not started: restoring its files was
			// no work of the run.
			ran = false
		}
		s.duration(e, ran)
	}
	s.lastHash = e.Hash
	return nil
}

// duration folds e into the run's working time: from its start, or a
// resume, to the event that pauses or ends it. The time a run waits
// paused or stays ended is not counted, nor are the events journaled
// then (decisions, rewinds): a run that completed in 2s and was rewound
// an hour later still took 2s. ran says whether the run was running
// before e.
func (s *summary) duration(e *journal.Event, ran bool) {
	runs := s.run.Status == string(journal.StatusRunning)
	switch {
	case ran:
		s.run.DurationMS = s.worked + e.Time.Sub(s.since).Milliseconds()
		if !runs {
			s.worked = s.run.DurationMS
		}
	case runs:
		s.since = e.Time
	}
}

// summaryRows folds each event type into a run's summary, one entry per
// type (view.Check): its pending approvals and authorization waits, how
// it ended, and its status as agent.Fold folds it (a run that asked for
// approvals stays paused until it is resumed, also when its newest event
// is one of several decisions); nil changes nothing but the counts.
var summaryRows = map[journal.Type]func(*summary, *view.Row){
	journal.RunCreated: func(s *summary, _ *view.Row) { s.run.Status = string(journal.StatusRunning) },
	journal.RunResumed: func(s *summary, vr *view.Row) {
		x, r := vr.Payload.(*agent.RunResumed), &s.run
		r.Reason, r.Message, r.Output = "", "", ""
		if x.Settings != nil && s.created != nil {
			s.created = withSettings(s.created, x.Settings)
		}
		r.Status = string(journal.StatusRunning)
	},
	journal.SetupFinished: nil,
	journal.ModelResponded: func(s *summary, vr *view.Row) {
		if len(vr.Payload.(*agent.ModelResponded).Message.ToolCalls) > 0 {
			s.pending, s.auths = nil, nil // a new turn: older approvals are settled
		}
	},
	journal.ModelFailed: nil,
	journal.GateDecided: nil,
	journal.ApprovalRequested: func(s *summary, vr *view.Row) {
		x, r, e := vr.Payload.(*agent.ApprovalRequested), &s.run, vr.Event
		s.pending = append(s.pending, api.Approval{RunID: e.RunID, CallID: x.CallID, Tool: x.Tool, Arguments: x.Arguments,
			Action: x.Action, Reason: x.Reason, Parts: x.Parts, Expires: x.Expires, Default: string(x.Default),
			Seq: e.Seq, Requested: e.Time, Task: r.Task, Agent: r.Agent, OnBehalfOf: r.OnBehalfOf,
			Workspace: r.Workspace, Sandbox: r.Sandbox, CreatedBy: r.CreatedBy})
		r.Status = string(journal.StatusPaused)
	},
	journal.ApprovalResolved: func(s *summary, vr *view.Row) { s.drop(vr.CallID) },
	journal.AuthRequired: func(s *summary, vr *view.Row) {
		x, e := vr.Payload.(*agent.AuthRequired), vr.Event
		s.dropAuth(x.CallID)
		s.auths = append(s.auths, api.AuthWait{RunID: e.RunID, CallID: x.CallID, Tool: x.Tool, Provider: x.Provider, Issuer: x.Issuer,
			Agent: x.Agent, User: x.User, Scopes: x.Scopes, Reason: x.Reason, Resource: x.Resource, Seq: e.Seq, Requested: e.Time, Task: s.run.Task})
		s.run.Status = string(journal.StatusPaused)
	},
	journal.AuthResolved: func(s *summary, vr *view.Row) {
		s.dropAuth(vr.CallID)
		if len(s.pending) == 0 && len(s.auths) == 0 {
			s.run.Status = string(journal.StatusRunning) // executes next
		}
	},
	journal.InputRequested: nil, // the run stays running while a call asks
	journal.InputAnswered:  nil,
	journal.ToolStarted:    nil,
	journal.ToolFinished: func(s *summary, vr *view.Row) {
		s.drop(vr.CallID)
		s.dropAuth(vr.CallID)
	},
	journal.RunCompleted:        runEndedSummary,
	journal.RunFailed:           runEndedSummary,
	journal.RunCanceled:         runEndedSummary,
	journal.RunPaused:           runEndedSummary,
	journal.UserMessage:         nil,
	journal.ContextCompacted:    nil,
	journal.SandboxEgress:       nil,
	journal.SandboxQuarantine:   nil,
	journal.WorkspaceCheckpoint: nil,
	journal.WorkspaceRestored:   nil,
	journal.WorkspaceRestoring:  nil,
	journal.ChildSpawned:        nil,
	journal.ChildDelivered:      nil,
}

func runEndedSummary(s *summary, vr *view.Row) {
	x, r := vr.Payload.(*agent.RunEnded), &s.run
	r.Reason, r.Message, r.Output = x.Reason, x.Message, x.Output
	r.Status = string(journal.StatusOf(vr.Event.Type))
}

func (s *summary) dropAuth(callID string) {
	s.auths = slices.DeleteFunc(s.auths, func(a api.AuthWait) bool { return a.CallID == callID })
}

func (s *summary) drop(callID string) {
	s.pending = slices.DeleteFunc(s.pending, func(a api.Approval) bool { return a.CallID == callID })
}

// withSettings returns a copy of c with the execution settings set.
func withSettings(c *agent.RunCreated, set *agent.Settings) *agent.RunCreated {
	n := *c
	n.Settings = set
	return &n
}

// created returns run id's run.created payload, with the execution
// settings the run has now (a resume may have replaced those of
// run.created, see agent.Settings): from the cache while the run has not
// ended, else read from the journal. The caller must not modify it.
func (c *summaries) created(ctx context.Context, id string) (*agent.RunCreated, error) {
	if _, err := c.get(ctx, id, 0); err != nil {
		return nil, err
	}
	c.mu.Lock()
	s := c.runs[id]
	c.mu.Unlock()
	if s != nil {
		s.mu.Lock()
		created := s.created
		s.mu.Unlock()
		if created != nil {
			return created, nil
		}
	}
	events, err := journal.ReadVerified(ctx, c.store, id)
	if err != nil {
		return nil, err
	}
	v, err := agent.Decode(&events[0])
	if err != nil {
		return nil, err
	}
	created, ok := v.(*agent.RunCreated)
	if !ok {
		return nil, &journal.CorruptError{RunID: id, Seq: 1, Reason: fmt.Sprintf("first event is %s, want run.created", events[0].Type)}
	}
	for i := range events[1:] {
		if events[1+i].Type != journal.RunResumed {
			continue
		}
		if v, err := agent.Decode(&events[1+i]); err == nil && v.(*agent.RunResumed).Settings != nil {
			created = withSettings(created, v.(*agent.RunResumed).Settings)
		}
	}
	return created, nil
}

// StartedBy says what started a run when no person did, from its
// labels: "schedule NAME (fire KEY)", "trigger NAME (message ID)", or ""
// (the run page's origin, with the fire or delivery it came from).
func StartedBy(labels map[string]string) string {
	o := notify.Origin(labels)
	switch {
	case o == "":
		return ""
	case labels[schedule.LabelSchedule] != "" && labels[schedule.LabelFire] != "":
		return o + " (fire " + labels[schedule.LabelFire] + ")"
	case labels[schedule.LabelSchedule] == "" && labels[trigger.LabelMessage] != "":
		return o + " (message " + labels[trigger.LabelMessage] + ")"
	}
	return o
}
