package agent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/sandbox"
	"github.com/keel-run/keel/tool"
	"github.com/keel-run/keel/tool/codefiles"
)

// setuper is implemented by sandboxes that can run the setup phase with
// its own network allowlist (sandbox/linux). Others run it with Exec.
type setuper interface {
	Setup(ctx context.Context, cmd *sandbox.Cmd, network sandbox.Network) (*sandbox.Result, error)
}

// SetupTimeout bounds the wall time of the setup script.
const SetupTimeout = 30 * time.Minute

// setupOutputChars bounds the setup output kept in the journal; the whole
// output goes to an artifact.
const setupOutputChars = 16000

func (x *executor) setup(ctx context.Context) error {
	sb := x.p.Env.Sandbox
	if sb == nil {
		return x.appendMany(ctx, []journal.Type{journal.SetupFinished, journal.RunFailed}, []any{
			&SetupFinished{ExitCode: -1, Output: "no sandbox configured: the setup script cannot run"},
			&RunEnded{Reason: ReasonSetup, Message: "no sandbox configured: the setup script cannot run"},
		})
	}
	roots, refused := x.setupFiles()
	if refused != "" {
		return x.appendMany(ctx, []journal.Type{journal.SetupFinished, journal.RunFailed}, []any{
			&SetupFinished{ExitCode: -1, Output: refused},
			&RunEnded{Reason: ReasonSetup, Message: refused},
		})
	}
	out := tool.NewOutput(x.p.Env.Workspace, x.runID, "setup", setupOutputChars)
	timeout := time.Duration(x.st.Created.SetupTimeout)
	if timeout <= 0 {
		timeout = SetupTimeout
	}
	cmd := &sandbox.Cmd{Args: []string{"bash", "-c", x.st.Created.Setup}, Stdout: out, Timeout: timeout}
	start := x.now()
	var res *sandbox.Result
	var err error
	if s, ok := sb.(setuper); ok {
		res, err = s.Setup(ctx, cmd, sandbox.Network{Allow: x.st.Created.SetupNetwork})
	} else {
		res, err = sb.Exec(ctx, cmd)
	}
	out.Close()
	if ctx.Err() != nil {
		return nil // the loop records the stop; setup runs again on resume
	}
	if err != nil {
		return x.appendMany(ctx, []journal.Type{journal.SetupFinished, journal.RunFailed}, []any{
			&SetupFinished{ExitCode: -1, Output: err.Error(), DurationMS: x.since(start)},
			&RunEnded{Reason: ReasonSetup, Message: "the sandbox could not run the setup script: " + err.Error()},
		})
	}
	// The script's output is journaled and shown (API, web UI): the
	// run's secrets are hidden from it as from a call's result, and
	// from its whole output.
	r := tool.Result{Content: x.secrets.hide(out.View()), Artifact: out.Artifact()}
	x.hideInArtifact(&r)
	sf := &SetupFinished{ExitCode: res.ExitCode, TimedOut: res.TimedOut, Limit: res.Limit, Output: r.Content, Artifact: r.Artifact, DurationMS: x.since(start)}
	if roots {
		sf.Files = x.setupRan()
	}
	if res.ExitCode != 0 || res.TimedOut {
		msg := fmt.Sprintf("the setup script failed with exit code %d", res.ExitCode)
		switch {
		case res.TimedOut:
			msg = fmt.Sprintf("the setup script timed out after %s", timeout)
		case res.Limit != "":
			msg += " (" + res.Limit + " limit)"
		}
		return x.appendMany(ctx, []journal.Type{journal.SetupFinished, journal.RunFailed}, []any{sf, &RunEnded{Reason: ReasonSetup, Message: msg}})
	}
	return x.append(ctx, journal.SetupFinished, sf)
}

// ErrNotExecuting is returned by [Recorder.Record] when no execution of
// the run is in progress.
var ErrNotExecuting = errors.New("agent: run is not executing")

// Recorder lets code outside the loop journal events of the run being
// executed, such as the sandbox's egress decisions, without racing the
// executor's own appends. Bind it to an execution with
// [ExecParams].Recorder; it is safe for concurrent use.
type Recorder struct {
	mu   sync.Mutex
	x    *executor
	kept []keptEvent // RecordOrKeep's events waiting for an execution
}

// keptEvent is an event RecordOrKeep holds until an execution starts.
type keptEvent struct {
	t       journal.Type
	payload any
}

// maxKept bounds the events a Recorder keeps while no execution is
// bound; events beyond it are dropped (the sandbox still logs
// them).
const maxKept = 64

// Record appends one event of type t with payload (a JSON-marshalable
// struct) to the run being executed. It returns [ErrNotExecuting] when no
// execution is bound, or the append's error.
func (r *Recorder) Record(ctx context.Context, t journal.Type, payload any) error {
	r.mu.Lock()
	x := r.x
	r.mu.Unlock()
	if x == nil {
		return ErrNotExecuting
	}
	return x.append(ctx, t, payload)
}

// RecordOrKeep is [Recorder.Record] for events that can happen before an
// execution is bound, such as what a sandbox finds while it starts (it
// starts before the run is created or resumed): when no execution is
// bound it keeps the event (at most 64) and returns nil, and the next
// execution appends the kept events when it starts, before any step.
func (r *Recorder) RecordOrKeep(ctx context.Context, t journal.Type, payload any) error {
	r.mu.Lock()
	x := r.x
	if x == nil {
		if len(r.kept) < maxKept {
			r.kept = append(r.kept, keptEvent{t, payload})
		}
		r.mu.Unlock()
		return nil
	}
	r.mu.Unlock()
	return x.append(ctx, t, payload)
}

// flush appends the events RecordOrKeep kept, in one append.
func (r *Recorder) flush(ctx context.Context, x *executor) error {
	r.mu.Lock()
	kept := r.kept
	r.kept = nil
	r.mu.Unlock()
	if len(kept) == 0 {
		return nil
	}
	types := make([]journal.Type, len(kept))
	payloads := make([]any, len(kept))
	for i, k := range kept {
		types[i], payloads[i] = k.t, k.payload
	}
	return x.appendMany(ctx, types, payloads)
}

func (r *Recorder) bind(x *executor) {
	r.mu.Lock()
	r.x = x
	r.mu.Unlock()
}

// setupFiles compares what the setup script runs from the workspace
// with the files Keel last started code from there ([Wiring].CodeFiles):
// a run of the same workspace may have rewritten them (a hijacked model
// planting code in ci/setup.sh, in a file it sources, in a module
// it imports), and the script runs before the gate, with the sandbox's
// environment and the setup's network. It returns whether the script
// runs files of the workspace, and why it must not run ("" when it
// may).
func (x *executor) setupFiles() (bool, string) {
	cf, ws := x.p.CodeFiles, x.p.Env.Workspace
	if cf == nil || ws == nil {
		return false, ""
	}
	roots := codefiles.ScriptRoots(x.st.Created.Setup, ws)
	if len(roots) == 0 {
		return false, ""
	}
	base, err := cf.Load(ws)
	if err != nil {
		return true, "the setup script was not run: Keel could not read the digests of the files it ran before: " + err.Error()
	}
	now := codefiles.Fingerprint(ws, roots)
	was := codefiles.Since(base, now)
	if was.Sum() == now.Sum() {
		return true, ""
	}
	with := "the sandbox's environment"
	if len(x.st.Created.SecretEnv) > 0 {
		with += ", which holds the run's secrets " + strings.Join(x.st.Created.SecretEnv, ", ")
	}
	return true, fmt.Sprintf("the setup script was not run: files it runs from the workspace changed since Keel last ran code from them here, and a run may have written them: %s. The script runs before any call is decided, with %s. Read the changes; to run the setup with these files, trust them as they are (keel config trust --workspace %s, on the machine that runs the run), then start the run again.",
		strings.Join(codefiles.Changes(was, now), ", "), with, ws.Root())
}

// setupRan records what the setup script ran from the workspace as it
// left it: what the next run's setup is compared with. It returns the
// digests by root, for setup.finished.
func (x *executor) setupRan() map[string]string {
	ws := x.p.Env.Workspace
	roots := codefiles.ScriptRoots(x.st.Created.Setup, ws)
	now := codefiles.Fingerprint(ws, roots)
	if err := x.p.CodeFiles.Update(ws, roots, now); err != nil {
		x.rt.logger.Warn("the digests of what the setup ran were not kept; the next setup is compared with older ones", "run_id", x.runID, "error", err)
	}
	return now.Roots
}
