package service

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/realpath"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/visible"
)

// How a person names a run and a call, the same in every front end (the
// command line in both forms, the API's and the web UI's paths, Keel's
// MCP tools in both forms): these resolvers are the one rule.

// LastRef is the run reference naming the newest run in the caller's
// workspace (the directory it works in), as `codex resume --last` and
// `claude --continue` find one. Run ids never contain an l.
const LastRef = "last"

// MaxRunRef is the longest run reference looked up: far longer than any
// run id, short enough to quote in an error.
const MaxRunRef = 100

// ResolveRun returns the id of the run ref names in store: its id, a
// unique prefix of one (at least journal.MinRunPrefix characters), the
// shortened form the web UI shows (01m9…whbcbs), or [LastRef]: the
// newest run whose workspace is dir or contains it ([LastRun]; dir ""
// says the caller has no directory, as over the API, and "last" names
// nothing). A reference that names no run is a not_found *Error
// ("no run "X""), an ambiguous one an invalid_request *Error listing
// the runs it matches.
func ResolveRun(ctx context.Context, store journal.Store, ref, dir string) (string, error) {
	if ref == LastRef {
		if dir == "" {
			return "", notFound("no run %q: %q names the newest run in the caller's workspace, which only a command on the workspace's machine knows; give the run's id (or a unique prefix of it)", ref, LastRef)
		}
		return LastRun(ctx, store, dir)
	}
	if len(ref) > MaxRunRef {
		// Not echoed whole: it can be anything pasted.
		r := []rune(ref)
		return "", notFound("no run %q… (%d characters: a run id has 26)", string(r[:min(len(r), 26)]), len(ref))
	}
	id, err := journal.ResolveRun(ctx, store, ref)
	switch {
	case errors.Is(err, journal.ErrAmbiguousRun):
		return "", badRequest("%s", strings.TrimPrefix(err.Error(), "journal: "))
	case errors.Is(err, journal.ErrNotFound):
		if run, seq, ok := strings.Cut(ref, "@"); ok && run != "" && seq != "" {
			// A fork's source as the views write it (api.Run.ForkOf).
			if id, err := ResolveRun(ctx, store, run, dir); err == nil {
				return "", notFound("no run %q: RUN@EVENT names event %s of run %s; give the run (%s), and the event where the command takes one (keel runs fork %s --at %s)", ref, seq, id, id, id, seq)
			}
		}
		return "", notFound("no run %q", ref)
	}
	return id, err
}

// ResolveJournal returns the journal ref names for an audit (keel audit
// verify in both forms, POST /v1/audit/verify): a system stream by its
// whole name, as keel audit verify --all lists it (_keel.identity), or
// a run as [ResolveRun] names it (without "last", which only the
// command line resolves). A system stream that does not exist is a
// not_found *Error ("no journal stream X"); system streams are named
// whole, never by a prefix.
func ResolveJournal(ctx context.Context, store journal.Store, ref string) (string, error) {
	if !journal.IsSystem(ref) {
		return ResolveRun(ctx, store, ref, "")
	}
	if _, err := store.Read(ctx, ref, math.MaxInt64); errors.Is(err, journal.ErrNotFound) {
		return "", notFound("no journal stream %q (system streams are named whole: `keel audit verify --all` lists them)", ref)
	} else if err != nil {
		return "", err
	}
	return ref, nil
}

// ResolveRun is [ResolveRun] on the service's journal.
func (s *Service) ResolveRun(ctx context.Context, who *Caller, ref, dir string) (string, error) {
	return ResolveRun(ctx, s.rt.Store(), ref, dir)
}

// LastRun returns the newest run of store (not a child agent's, which
// is its lead's part) whose workspace is dir or contains it; none is a
// not_found *Error.
func LastRun(ctx context.Context, store journal.Store, dir string) (string, error) {
	runs, err := store.Runs(ctx, nil)
	if err != nil {
		return "", err
	}
	dir = realpath.Resolve(dir)
	newest, newestWS := "", ""
	for _, r := range runs {
		if journal.IsSystem(r.RunID) {
			continue
		}
		evs, err := store.Read(ctx, r.RunID, 1)
		if err != nil || len(evs) == 0 || evs[0].Type != journal.RunCreated {
			continue
		}
		v, err := agent.Decode(&evs[0])
		c, ok := v.(*agent.RunCreated)
		if err != nil || !ok || c.Parent != nil {
			continue
		}
		if InWorkspace(dir, c.Workspace) {
			return r.RunID, nil
		}
		if newest == "" {
			newest, newestWS = r.RunID, c.Workspace
		}
	}
	return "", noRunHere(dir, newest, newestWS)
}

// noRunHere is LastRun's and LastIn's refusal: no run worked in dir. It
// names the newest run and where it worked, if there is one (a demo run
// works in a directory of its own: `last` in the directory the demo was
// started from finds none).
func noRunHere(dir, newest, workspace string) error {
	if newest == "" {
		return notFound("no run in this workspace (%s)", dir)
	}
	return notFound("no run in this workspace (%s); the newest run, %s, worked in %s", dir, newest, workspace)
}

// LastIn is [LastRun] over runs listed newest first (the API's list, for
// a front end on a team server): the first that is not a child agent's
// and whose workspace is dir or contains it; none is a not_found *Error.
func LastIn(runs []api.Run, dir string) (string, error) {
	dir = realpath.Resolve(dir)
	newest, newestWS := "", ""
	for _, x := range runs {
		if x.Parent != "" {
			continue
		}
		if InWorkspace(dir, x.Workspace) {
			return x.ID, nil
		}
		if newest == "" {
			newest, newestWS = x.ID, x.Workspace
		}
	}
	return "", noRunHere(dir, newest, newestWS)
}

// InWorkspace reports whether dir (resolved) is workspace or lies in it.
func InWorkspace(dir, workspace string) bool {
	return workspace != "" && realpath.Within(dir, realpath.Resolve(workspace))
}

// ResolveCall returns the id of the call ref names among pending, the
// approvals run runID waits for: the call with that id, else the one
// whose id it starts, else (ref "") the only one. Anything else is an
// *Error naming the calls the run waits for: no_approval when the run
// waits for no call ref names, invalid_request when ref names more than
// one (or none is named and more than one waits).
func ResolveCall(runID, ref string, pending []api.Approval) (string, error) {
	var match []string
	for _, p := range pending {
		if p.CallID == ref {
			return ref, nil
		}
		if strings.HasPrefix(p.CallID, ref) {
			match = append(match, p.CallID)
		}
	}
	// Not waiting for the call is the runtime's refusal (agent.ErrNoApproval), in
	// words that name what the run waits for.
	notWaiting := func(format string, args ...any) error {
		return &Error{Code: api.CodeNoApproval, Message: fmt.Sprintf(format, args...), cause: agent.ErrNoApproval}
	}
	var list strings.Builder
	for _, p := range pending {
		fmt.Fprintf(&list, "\n  %s (%s)", visible.String(p.CallID), p.Tool)
	}
	switch {
	case len(match) == 1:
		return match[0], nil
	case len(pending) == 0 && ref == "":
		return "", notWaiting("run %s waits for no approval", runID)
	case len(pending) == 0:
		return "", notWaiting("run %s waits for no approval, so not for call %s: it was decided already, or never asked", runID, visible.String(ref))
	case ref == "":
		return "", badRequest("run %s waits for %d approvals: name the call (its id, or the start of it):%s", runID, len(pending), list.String())
	case len(match) > 1:
		return "", badRequest("call %s of run %s is ambiguous: %d waiting calls start with it:%s", visible.String(ref), runID, len(match), list.String())
	}
	return "", notWaiting("run %s does not wait for call %s (decided already, or never asked); it waits for:%s", runID, visible.String(ref), list.String())
}

// ResolveInput returns the id of the input request ref names among
// pending (the requests of every run, as [Service.Inputs] lists them)
// for run runID: the request with that id, else the one whose id it
// starts, else (ref "") the only one the run waits for. Anything else is
// an *Error naming the requests the run waits for, by the rule of
// [ResolveCall].
func ResolveInput(runID, ref string, pending []api.Input) (string, error) {
	var mine []api.Input
	for _, p := range pending {
		if p.RunID == runID {
			mine = append(mine, p)
		}
	}
	var match []string
	for _, p := range mine {
		if p.ID == ref {
			return ref, nil
		}
		if strings.HasPrefix(p.ID, ref) {
			match = append(match, p.ID)
		}
	}
	var list strings.Builder
	for _, p := range mine {
		fmt.Fprintf(&list, "\n  %s (%s: %s)", visible.String(p.ID), p.Server, visible.String(p.Message))
	}
	switch {
	case len(match) == 1:
		return match[0], nil
	case len(mine) == 0 && ref == "":
		return "", conflict(api.CodeNoInput, "run %s waits for no input", runID)
	case len(mine) == 0:
		return "", conflict(api.CodeNoInput, "run %s does not wait for input %s (it was answered already, or never asked)", runID, visible.String(ref))
	case ref == "":
		return "", badRequest("run %s waits for %d inputs: name the input (its id, or the start of it):%s", runID, len(mine), list.String())
	case len(match) > 1:
		return "", badRequest("input %s of run %s is ambiguous: %d waiting inputs start with it:%s", visible.String(ref), runID, len(match), list.String())
	}
	return "", conflict(api.CodeNoInput, "run %s does not wait for input %s (answered already, or never asked); it waits for:%s", runID, visible.String(ref), list.String())
}

// NoReason is the refusal of a denial without a reason, in every front
// end: the model is told the reason, and without one it can only guess
// what to do instead. Every decider gives one (a person at the terminal
// who gives none is recorded as "denied at the terminal"; an
// evaluation's rule and an approval's deadline say theirs).
func NoReason() error {
	return badRequest("a denial needs a reason: the model is told it, so that it can do something else")
}

// CheckSeq is the one check of an event named by its sequence number
// (keel runs rewind --to, fork --at and diff --at; the API's to, seq and
// at): name is how the caller named it.
func CheckSeq(name string, seq int64) error {
	if seq < 1 {
		return badRequest("%s %d: want an event's sequence number, 1 or more", name, seq)
	}
	return nil
}

// CheckSeqGiven is CheckSeq of an event a request may leave out (the
// API's fork seq and rewind to, the web UI's forms): absent (nil) is
// refused as required, as the command line's --at and --to are, never
// taken to mean an event of Keel's choosing.
func CheckSeqGiven(name string, seq *int64) error {
	if seq == nil {
		return badRequest("%s is required: an event's sequence number, 1 or more (the run's checkpoints list them)", name)
	}
	return CheckSeq(name, *seq)
}

// CancelCompletedError is the refusal to cancel completed run id,
// whoever cancels it (the API, keel runs cancel on the journal).
func CancelCompletedError(id string) error {
	return &Error{Code: api.CodeRunCompleted, cause: agent.ErrRunCompleted, Message: fmt.Sprintf("run %s has completed; there is nothing to cancel", id)}
}

// NoTask is the refusal of a run without a task (what the agent should
// do), said before anything else of the model: only a recording
// (replay:PATH) brings a task of its own.
func NoTask() error { return badRequest("no task: give the run a task (what the agent should do)") }
