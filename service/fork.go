package service

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/checkpoint"
	"github.com/keel-run/keel/internal/realpath"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/visible"
)

// LabelForkOf is the run.created label of a forked run: "RUN@SEQ", the
// source run and the last event copied from it.
const LabelForkOf = "keel.fork_of"

// LabelForkEvents is the run.created label of a forked run: how many
// of its first events were copied from the source ("12"). The fork's own
// events follow them, and its duration counts from the first of those
// ([ForkStart]).
const LabelForkEvents = "keel.fork_events"

// ForkDrafts returns the drafts of a fork of events (the source run's
// events 1 to the fork point) with created as its run.created payload,
// labelled with [LabelForkEvents]: [agent.ForkDrafts] says what is
// copied. created's labels must be its own map (the caller's copy). The
// fork's run.created has the time now, when the fork is made (the runs
// index lists a fork by it, among the runs made then, not at its
// source's time); the events it copies keep theirs.
func ForkDrafts(events []journal.Event, created *agent.RunCreated, now time.Time) ([]journal.Draft, error) {
	drafts, err := agent.ForkDrafts(events, nil)
	if err != nil {
		return nil, err
	}
	if created.Labels == nil {
		created.Labels = map[string]string{}
	}
	created.Labels[LabelForkEvents] = strconv.Itoa(len(drafts))
	if drafts[0].Payload, err = jsonPayload(created); err != nil {
		return nil, err
	}
	drafts[0].Time = now
	return drafts, nil
}

// ForkStart returns the index in events (a run's, from event 1) of the
// run's own first event: for a fork, the first after those it copied
// from its source (len(events) while it has none); else 0. A fork made
// before [LabelForkEvents] existed counts from 0 too.
func ForkStart(created *agent.RunCreated, events []journal.Event) int {
	n := forkEvents(created)
	return min(n, len(events))
}

// forkEvents is the number of events a fork copied from its source (0
// for a run that is not a fork, or whose label is not a count).
func forkEvents(c *agent.RunCreated) int {
	if c == nil || c.Labels[LabelForkOf] == "" {
		return 0
	}
	n, err := strconv.Atoi(c.Labels[LabelForkEvents])
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// ReasonForked is the reason of the run.paused event that ends a fork
// that was not started: it waits, paused, until someone resumes it (a
// restart does not execute it).
const ReasonForked = agent.ReasonForked

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
//
// The fork's workspace: the one the request names; else, for a demo
// run, a fresh copy of the demo project (as for a new demo); else the
// source's, but only if the forker started the source run or is the
// command line on the journal's machine (a fork never silently shares
// another person's workspace). Its files are those at the fork point, as a
// rewind to it gives them (checkpoint.ForkFiles), restored in place or written
// into the fork's own workspace, which must then be new (the fork makes
// it, not its parents) or empty: a fork's files are exactly those its
// workspace.restored names. A fork point with no checkpoint works on the
// files the workspace holds. A fork in another workspace than its
// source's records no git start (its files are a checkpoint's, not a
// commit's: its diff comes from its checkpoints) and keeps the source's
// state directory, where the whole outputs its copied events name are
// (kept per run, so the fork's own never replace them).
//
// A fork at the event that completes its source is a completed run: it
// is started only with a message (a follow-up, in the fork), and not
// started it waits for one (keel runs resume --message). A fork that is
// not started (req.Start false, or a service that executes nothing: the
// caller resumes it) and neither ended nor waits for an approval at the
// fork point ends with run.paused (reason [ReasonForked]), so that it
// says it has not started and no restart executes it.
//
// The limits req gives (only with req.Start) are checked before anything
// is made, and returned applied to those the source had at the fork
// point (nil: unchanged), for the fork's first execution to journal in
// its run.resumed.
func (s *Service) fork(ctx context.Context, src string, req *api.ForkRun, who *Caller) (id string, a *admission, limits *agent.Limits, err error) {
	if journal.IsSystem(src) {
		return "", nil, nil, notFound("no such run %s", src)
	}
	if req.Message != "" && !req.Start {
		return "", nil, nil, badRequest("message is sent when the fork starts: set start, or resume the fork later with the message")
	}
	if req.Limits != nil && !req.Start {
		return "", nil, nil, badRequest("limits apply when the fork starts: set start, or give them when resuming the fork")
	}
	if _, err := ApplyLimits(agent.Limits{}, req.Limits); err != nil {
		return "", nil, nil, err
	}
	if err := CheckSeq("seq", req.Seq); err != nil {
		return "", nil, nil, err
	}
	events, err := journal.ReadVerified(ctx, s.rt.Store(), src)
	if errors.Is(err, journal.ErrNotFound) {
		return "", nil, nil, notFound("no such run %s", src)
	}
	if err != nil {
		return "", nil, nil, err
	}
	seq := req.Seq
	if seq > int64(len(events)) {
		return "", nil, nil, badRequest("%v", &checkpoint.RangeError{Run: src, Seq: req.Seq, Last: int64(len(events))})
	}
	all := events // the files at the fork point may be a later checkpoint's
	events = events[:seq]
	st, err := agent.Fold(src, events)
	if err != nil {
		return "", nil, nil, err
	}
	if err := forkChild(src, st.Created); err != nil {
		return "", nil, nil, err
	}
	if req.Limits != nil {
		n, err := ApplyLimits(st.Limits, req.Limits)
		if err != nil {
			return "", nil, nil, err
		}
		if n != st.Limits {
			limits = &n
		}
	}
	if req.Start && req.Message == "" && st.Status == journal.StatusCompleted {
		return "", nil, nil, conflict(api.CodeRunCompleted, "event %d completes run %s: fork from an earlier event to continue from there, or send a message to follow the run up in the fork", seq, src)
	}
	_, _, cpErr := checkpoint.At(events, seq)
	if errors.Is(cpErr, checkpoint.ErrOff) {
		return "", nil, nil, badRequest("run %s has no checkpoints to fork with its files: %v", src, checkpoint.ErrOff)
	}
	created := *st.Created
	a, unshared, err := s.forkWorkspace(ctx, src, &created, req, who)
	if err != nil {
		return "", nil, nil, err
	}
	if fresh := created.Workspace; a.demoWorkspace && req.Workspace == "" {
		// A fresh copy of the demo project, made for this fork only.
		defer func() {
			if err != nil {
				os.RemoveAll(fresh)
			}
		}()
	}
	own := req.Workspace != "" && !checkpoint.SameDir(req.Workspace, st.Created.Workspace)
	if own {
		made, err := s.forkDir(req.Workspace, a, cpErr == nil)
		if err != nil {
			return "", nil, nil, err
		}
		if made {
			defer func() {
				if err != nil {
					os.Remove(req.Workspace) // made empty here: nothing else is in it
				}
			}()
		}
	}
	ws, err := s.admit(ctx, a, &created, true)
	if err != nil {
		return "", nil, nil, err
	}
	if unshared != nil {
		return "", nil, nil, unshared
	}
	created.Workspace = ws
	cloned := false
	if !checkpoint.SameDir(ws, st.Created.Workspace) {
		created.Git = nil
		// A fresh demo project holds the demo's files at its start
		// already: its repository is the source's also before the
		// first checkpoint.
		freshDemo := a.demoWorkspace && req.Workspace == ""
		if st.Created.Git != nil && (cpErr == nil || freshDemo) {
			// A working copy of the source's repository at its start
			// commit, the checkpoint's files written on top below.
			if cerr := checkpoint.CloneAt(ctx, st.Created.Workspace, ws, st.Created.Git); cerr != nil {
				s.logger.Warn("the fork's workspace gets the files without the repository", "run", src, "workspace", ws, "err", cerr)
			} else {
				cloned = true
				defer func() {
					if err != nil {
						os.RemoveAll(filepath.Join(ws, ".git"))
					}
				}()
			}
		}
	}
	created.Labels = map[string]string{}
	for k, v := range st.Created.Labels {
		created.Labels[k] = v
	}
	created.Labels[LabelForkOf] = fmt.Sprintf("%s@%d", src, seq)
	stamp(&created, a)
	// The fork's files: the source's files at the fork point, as a
	// rewind there gives them, written into the fork's workspace
	// (journaled in the fork).
	var restored *journal.Draft
	files, _, err := checkpoint.ForkFiles(ctx, all, seq, st.Created.Workspace, ws, who.Name)
	switch {
	case errors.Is(err, checkpoint.ErrNone):
	case err != nil:
		return "", nil, nil, fmt.Errorf("service: fork %s: the files of event %d: %w", src, seq, err)
	default:
		p, err := jsonPayload(files)
		if err != nil {
			return "", nil, nil, err
		}
		restored = &journal.Draft{Type: journal.WorkspaceRestored, Time: s.opts.Clock(), Payload: p}
	}
	if cloned {
		// Its diff compares with the source's start commit; the files
		// that differed from it then are the source's.
		if g := checkpoint.StartOf(ctx, ws); g != nil && g.Commit == st.Created.Git.Commit {
			g.Dirty, g.Origin = st.Created.Git.Dirty, st.Created.Git.Origin
			created.Git = g
		}
	}
	drafts, err := ForkDrafts(events, &created, s.opts.Clock())
	if err != nil {
		return "", nil, nil, err
	}
	if restored != nil {
		drafts = append(drafts, *restored)
	}
	id = strings.ToLower(ulid.Make().String())
	if !req.Start || !s.executes() {
		paused, err := s.notStarted(id, src, seq, drafts)
		if err != nil {
			return "", nil, nil, err
		}
		drafts = append(drafts, paused...)
	}
	if _, err := s.rt.Store().Append(ctx, id, 0, drafts...); err != nil {
		return "", nil, nil, fmt.Errorf("service: fork %s: %w", src, err)
	}
	return id, a, limits, nil
}

// forkChild refuses the fork of run src when it is a child agent's
// (created is its run.created): the fork
// would keep a parent link to a lead it is not part of, and no lead
// would ever receive its result. Its team is forked through its lead.
func forkChild(src string, created *agent.RunCreated) error {
	p := created.Parent
	if p == nil {
		return nil
	}
	return conflict(api.CodeConflict, "run %s is a child agent of run %s: a fork of it would belong to no team and deliver to no lead; fork the team's lead, run %s, instead", src, p.Run, p.Root)
}

// forkDir prepares dir, the workspace named for a fork that is not its
// source's: it makes it when it does not exist (not its parents, and
// for a caller confined to the workspace roots only under one), and
// refuses it when it holds files and the fork has a checkpoint's files
// to write there (files would mix with them), or when it cannot be
// listed (not a directory, a loop of links, no permission: whether it
// holds files is unknown). made says it made dir; what else is wrong
// with dir is left to the admission.
func (s *Service) forkDir(dir string, a *admission, files bool) (made bool, err error) {
	if !filepath.IsAbs(dir) {
		return false, nil
	}
	ents, err := os.ReadDir(dir)
	switch {
	case err == nil && len(ents) > 0 && files:
		return false, badRequest("workspace %s is not empty: name a new or empty directory for the fork's files (or the source's own workspace, to fork in it)", visible.String(dir))
	case err == nil:
		return false, nil
	case errors.Is(err, syscall.ENOTDIR):
		return false, badRequest("workspace %s is not a directory: name a new or empty directory for the fork's files (or the source's own workspace, to fork in it)", visible.String(dir))
	case !errors.Is(err, fs.ErrNotExist):
		// Whether dir holds files is unknown: the fork's files could
		// mix with them, or fail half-way.
		return false, badRequest("workspace %s cannot be read (%v): name a new or empty directory Keel can read for the fork's files", visible.String(dir), pathErr(err))
	}
	if err := ForkDir(dir); err != nil {
		return false, badRequest("%v", err)
	}
	if !a.demoWorkspace && !a.who.Local {
		if err := s.conf.underRoot(dir); err != nil {
			return false, err
		}
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		return false, fmt.Errorf("service: fork workspace: %w", err)
	}
	return true, nil
}

// pathErr is err without the path a *fs.PathError repeats (the message
// names it already).
func pathErr(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// forkWorkspace sets the workspace of created, a fork of run src, as
// [Service.fork] says, and returns what to admit it as. unshared is the
// refusal to share another person's workspace that was not named, to
// return once the fork passed the other checks (which say more).
func (s *Service) forkWorkspace(ctx context.Context, src string, created *agent.RunCreated, req *api.ForkRun, who *Caller) (a *admission, unshared, err error) {
	demo := created.Labels[LabelDemo] != ""
	a = &admission{who: who, demo: demo}
	owner := created.Labels[LabelCreatedBy]
	mine := owner != "" && owner == who.Name
	named := req.Workspace != ""
	same := named && (filepath.Clean(req.Workspace) == filepath.Clean(created.Workspace) || realpath.Resolve(req.Workspace) == realpath.Resolve(created.Workspace))
	startedBy := "on the server's machine"
	if owner != "" {
		startedBy = "by " + visible.String(owner)
	}
	switch {
	case demo && !named:
		// As a new demo run: a fresh copy of the demo project, without
		// its own repository: the fork gets the source's at its start
		// commit, as every fork in a directory of its own does (the
		// project's files stay if that copy fails).
		ws, err := s.newDemoWorkspace()
		if err != nil {
			return nil, nil, err
		}
		if err := os.RemoveAll(filepath.Join(ws, ".git")); err != nil {
			os.RemoveAll(ws)
			return nil, nil, err
		}
		created.Workspace, a.demoWorkspace = ws, true
	case demo && same:
		// The demo workspace the server made for the source run: the
		// roots do not apply, so only its creator (or an admin) may
		// share it.
		if !mine && !a.admin() {
			return nil, nil, forbidden("the workspace of demo run %s belongs to the person who started it (%s); fork without a workspace to get a fresh copy of the demo project", src, strings.TrimPrefix(startedBy, "by "))
		}
		a.demoWorkspace = true
	case !named && !mine && !who.Local:
		unshared = badRequest("run %s (started %s) works in %s: a fork does not share another person's workspace unless asked; name the workspace of the fork (that one, to share it, or another under a workspace root)", src, startedBy, visible.String(created.Workspace))
	}
	if named {
		created.Workspace = req.Workspace
	}
	return a, unshared, nil
}

// ForkDir checks dir, the workspace named for a fork: a fork makes that
// directory when it does not exist, but not its parents (a typo in a
// parent would otherwise make a tree of directories without a word).
func ForkDir(dir string) error {
	parent := filepath.Dir(filepath.Clean(dir))
	fi, err := os.Stat(parent)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("workspace %s: its parent directory %s does not exist (a fork makes the workspace directory, not its parents): create it first", visible.String(dir), visible.String(parent))
	case err != nil:
		return fmt.Errorf("workspace %s: %w", visible.String(dir), err)
	case !fi.IsDir():
		return fmt.Errorf("workspace %s: %s is not a directory", visible.String(dir), visible.String(parent))
	}
	return nil
}

// notStarted returns the run.paused draft that ends fork id (of run src
// at event seq, made of drafts) when it is not started (agent.NotStarted).
func (s *Service) notStarted(id, src string, seq int64, drafts []journal.Draft) ([]journal.Draft, error) {
	return agent.NotStarted(id, src, seq, drafts, s.opts.Clock())
}

// Forked is what a fork holds, read from its journal (ForkOf): what to
// tell the person who made it.
type Forked struct {
	// Files is the checkpoint event of the source whose files the fork
	// has (0: none, the source had no checkpoint): the files at the fork
	// point as checkpoint.AtEvent finds them for a rewind and a diff,
	// which is after the fork point for a tool.finished (the checkpoint
	// of its step). After counts the source's tool calls finished up to
	// the fork point whose effects the files lack.
	Files int64
	After int
	// Completed: the fork point completes the source (the fork follows
	// it up with a message).
	Completed bool
	// Made is the fork's last event when it was made: its copied events
	// and the restoring of its files.
	Made int64
	// NoRepo: the source ran in a git repository but the fork, in a
	// workspace of its own, is none (the repository could not be copied
	// at the source's start commit: checkpoint.CloneAt).
	NoRepo bool
}

// ForkOf reads fork, the events of a fork of the run whose events are
// src made at event at.
func ForkOf(fork, src []journal.Event, at int64) (*Forked, error) {
	if len(fork) == 0 || fork[0].Type != journal.RunCreated {
		return nil, errors.New("the fork has no run.created")
	}
	v, err := agent.Decode(&fork[0])
	if err != nil {
		return nil, err
	}
	created, _ := v.(*agent.RunCreated)
	n := ForkStart(created, fork)
	st, err := agent.Fold(fork[0].RunID, fork[:n])
	if err != nil {
		return nil, err
	}
	out := &Forked{Completed: st.Status == journal.StatusCompleted}
	if len(src) > 0 && created != nil && created.Git == nil {
		if v, err := agent.Decode(&src[0]); err == nil {
			if sc, ok := v.(*agent.RunCreated); ok && sc.Git != nil && !checkpoint.SameDir(sc.Workspace, created.Workspace) {
				out.NoRepo = true
			}
		}
	}
	if n >= len(fork) || fork[n].Type != journal.WorkspaceRestored {
		out.NoRepo = false // no files written: the fork works on DIR's
	}
	if n < len(fork) && fork[n].Type == journal.WorkspaceRestored {
		if v, err := agent.Decode(&fork[n]); err == nil {
			r := v.(*agent.WorkspaceRestored)
			out.Files, out.After = r.To, r.Missing
			out.NoRepo = out.NoRepo && r.To > 0
			if r.Missing == 0 && r.Asked == 0 && r.To < at && at <= int64(len(src)) {
				// A fork journaled before Missing was: count as it did.
				_, out.After, _ = checkpoint.At(src, at)
			}
		}
		n++
	}
	out.Made = int64(n)
	return out, nil
}
