package agent_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/identity"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/mem"
)

var update = flag.Bool("update", false, "rewrite the goldens of ../testdata/journals")

// Journals recorded by released versions of keel (testdata/journals, see
// its README.md) keep reading, verifying, folding and replaying to their
// goldens: the promise that a stored run resumes as it was recorded,
// guarded the way temporalio/sdk-go's test/replaytests guards workflow
// histories. For each run the test loads the journal as the runtime does
// (verify, head check, fold), summarises the folded state and the request
// it would send next, and replays it: at every event boundary the step
// function's decision is written to the golden and checked against the
// event the recording has next. The bad-*.jsonl journals are broken on
// purpose (a flipped hash, an edited payload, a gap, reordered events, a
// payload that does not decode, a result for no call, a torn tail ...):
// their goldens hold the error that reports them. newer-unknown-type.jsonl
// holds an event type this release does not know, which the fold skips.
//
// After an intended change: go test ./agent/ -run Recorded -update, and
// review the diff of the goldens. Never re-record an existing journal.
func TestRecordedJournals(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "testdata", "journals", "*.jsonl"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no recorded journals (%v)", err)
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".jsonl")
		t.Run(name, func(t *testing.T) {
			got, diverged := replayRecorded(t, f)
			for _, d := range diverged {
				t.Errorf("replay diverges: %s", d)
			}
			bad := strings.HasPrefix(name, "bad-")
			if hasErr := strings.Contains(got, "\nerror: "); hasErr != bad {
				t.Errorf("bad journal %v, but an error reported %v:\n%s", bad, hasErr, got)
			}
			golden := strings.TrimSuffix(f, ".jsonl") + ".golden"
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (write it with go test ./agent/ -run Recorded -update)", err)
			}
			if diff := cmp.Diff(string(want), got); diff != "" {
				t.Errorf("%s no longer replays to its golden (-golden +now); if intended, go test ./agent/ -run Recorded -update:\n%s", filepath.Base(f), diff)
			}
		})
	}
}

// replayRecorded returns the golden text of a recorded journal file and
// the boundaries where the step function decided something other than
// what the recording did next.
func replayRecorded(t *testing.T, path string) (string, []string) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "# %s\n", filepath.Base(path))
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	events, torn, err := journal.ReadJSONL(f)
	if err != nil {
		fmt.Fprintf(&b, "\nerror: read: %v\n", err)
		return b.String(), nil
	}
	if torn != nil {
		fmt.Fprintf(&b, "\nerror: read: %s (the %d events before it are read)\n", torn, len(events))
	}
	var order []string
	byRun := map[string][]journal.Event{}
	for _, e := range events {
		if _, ok := byRun[e.RunID]; !ok {
			order = append(order, e.RunID)
		}
		byRun[e.RunID] = append(byRun[e.RunID], e)
	}
	var diverged []string
	for _, id := range order {
		evs := byRun[id]
		fmt.Fprintf(&b, "\n## %s: %d events\n", id, len(evs))
		if err := journal.Verify(id, evs); err != nil {
			fmt.Fprintf(&b, "\nerror: verify: %v\n", err)
			continue
		}
		store := mem.New()
		if _, err := journal.Import(t.Context(), store, evs); err != nil {
			fmt.Fprintf(&b, "\nerror: import: %v\n", err)
			continue
		}
		if journal.IsSystem(id) {
			foldSystem(t.Context(), &b, store, id, evs)
			continue
		}
		diverged = append(diverged, foldRun(t.Context(), &b, store, id, evs)...)
	}
	return b.String(), diverged
}

// foldSystem summarises a system stream: the identity directory folded
// from it, or the event types of a stream another package folds.
func foldSystem(ctx context.Context, b *strings.Builder, store journal.Store, id string, evs []journal.Event) {
	for _, e := range evs {
		fmt.Fprintf(b, "%4d %s\n", e.Seq, e.Type)
	}
	if id != identity.StreamID {
		return
	}
	agents, err := identity.NewDirectory(store, nil).List(ctx)
	if err != nil {
		fmt.Fprintf(b, "\nerror: identity: %v\n", err)
		return
	}
	b.WriteString("agents:\n")
	for _, a := range agents {
		state := "active"
		if a.Revoked {
			state = fmt.Sprintf("revoked by %s at %s (%s)", a.RevokedBy, a.RevokedAt.UTC().Format("2006-01-02T15:04:05Z"), a.RevokeReason)
		}
		fmt.Fprintf(b, "  %s (%s%s): %s, %d grants\n", a.Name, a.Kind, map[bool]string{true: ", built in"}[a.Builtin], state, len(a.Grants))
	}
}

// foldRun loads a run as the runtime does, summarises its state and
// replays it event by event; it returns the divergences.
func foldRun(ctx context.Context, b *strings.Builder, store journal.Store, id string, evs []journal.Event) []string {
	st, _, err := agent.NewRuntime(store, nil).Load(ctx, id)
	if err != nil {
		fmt.Fprintf(b, "\nerror: load: %v\n", err)
		return nil
	}
	end := ""
	if st.Ended != nil {
		end = fmt.Sprintf(" (%s)", st.Ended.Reason)
	}
	var calls, synthetic, rerun, denied, asked int
	for _, turn := range st.Turns {
		for _, c := range turn.Calls {
			calls++
			if c.Finished != nil && c.Finished.Synthetic {
				synthetic++
			}
			if c.Attempts > 1 {
				rerun++
			}
			if c.Approval != nil {
				asked++
			}
			if c.Resolved != nil && c.Resolved.Decision != "allow" {
				denied++
			}
		}
	}
	fmt.Fprintf(b, "status %s%s after %d steps; tokens %d in, %d out; cost $%.4f\n", st.Status, end, st.Steps, st.Usage.InputTokens, st.Usage.OutputTokens, st.Cost)
	fmt.Fprintf(b, "%d messages, %d turns, %d calls: %d asked (%d denied), %d synthetic results, %d re-run; %d compactions, %d remembered grants\n",
		len(st.Messages), len(st.Turns), calls, asked, denied, synthetic, rerun, len(st.Compactions()), len(st.Grants))
	req := agent.BuildRequest(st, 0)
	j, err := json.Marshal(req)
	if err != nil {
		fmt.Fprintf(b, "\nerror: request: %v\n", err)
		return nil
	}
	fmt.Fprintf(b, "next request: %d messages, %d tools, sha256 %x\n", len(req.Messages), len(req.Tools), sha256.Sum256(j))

	b.WriteString("replay (event, then the step's decision):\n")
	var diverged []string
	s := &agent.State{RunID: id}
	for i := range evs {
		if err := s.Apply(&evs[i]); err != nil {
			fmt.Fprintf(b, "\nerror: fold: %v\n", err)
			return diverged
		}
		a := agent.Step(s)
		line := fmt.Sprintf("%4d %-18s → %s", evs[i].Seq, evs[i].Type, a.Kind)
		if len(a.Calls) > 0 {
			line += fmt.Sprintf(" %d calls", len(a.Calls))
		}
		if a.End != nil {
			line += " " + a.End.Reason
		}
		b.WriteString(line + "\n")
		if i+1 < len(evs) {
			if next := evs[i+1].Type; !follows(a, next) {
				diverged = append(diverged, fmt.Sprintf("after event %d (%s) the step decided %s, the recording has %s", evs[i].Seq, evs[i].Type, a.Kind, next))
			}
		}
	}
	return diverged
}

// follows reports whether the recorded event next is what executing a
// can append first. Events that come from outside the step (a new
// execution, a pause or cancel, a decision from another process, the
// sandbox's own reports, a limit the executor applies) may follow any
// decision.
func follows(a agent.Action, next journal.Type) bool {
	switch next {
	case journal.RunResumed, journal.RunPaused, journal.RunCanceled, journal.RunFailed,
		journal.ApprovalResolved, journal.AuthResolved, journal.SandboxEgress, journal.SandboxQuarantine:
		return true
	}
	if v, _ := agent.Decode(&journal.Event{Type: next, Payload: []byte("{}")}); v == nil {
		return true // a type of a newer release: the fold skips it
	}
	want := map[agent.ActionKind][]journal.Type{
		agent.ActSetup:     {journal.SetupFinished},
		agent.ActRecover:   {journal.ToolStarted, journal.ToolFinished},
		agent.ActGate:      {journal.GateDecided},
		agent.ActReject:    {journal.ToolFinished},
		agent.ActAsk:       {journal.ApprovalRequested},
		agent.ActRunTools:  {journal.ToolStarted, journal.ToolFinished, journal.AuthRequired},
		agent.ActCallModel: {journal.ModelResponded, journal.ModelFailed},
		agent.ActCompact:   {journal.ContextCompacted},
		agent.ActNudge:     {journal.UserMessage},
		agent.ActCut:       {journal.ToolFinished},
	}[a.Kind]
	if a.Kind == agent.ActFinish {
		want = []journal.Type{a.End.Type}
	}
	return slices.Contains(want, next)
}
