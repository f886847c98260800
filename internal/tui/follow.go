package tui

import (
	"context"
	"fmt"
	"io"
	"iter"
	"strings"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/server/api"
)

// followGiveUp is how long following a run keeps reconnecting to a
// server that does not answer (a restart takes seconds; a crashed server
// needs a person) before it exits 1.
const followGiveUp = 10 * time.Minute

// Server is the team server a followed run executes on: the Go client,
// as the command line adapts it.
type Server interface {
	// Events yields run id's events in order, each once (the client's
	// Events, with the same parameters).
	Events(ctx context.Context, id string, p *EventsParams) iter.Seq2[journal.Event, error]
	// Run returns run id as the API shows it.
	Run(ctx context.Context, id string) (*api.Run, error)
	// Cancel cancels run id; a run that has already ended is no error.
	Cancel(ctx context.Context, id string) error
	// Decide records a person's decision on call callID of run id, as
	// keel approve and keel deny do.
	Decide(ctx context.Context, id, callID string, res *agent.ApprovalResolved) error
	// ProposedEdit returns what an edit call waiting for approval would
	// change (the server reads its workspace).
	ProposedEdit(ctx context.Context, id, callID string) (*api.ProposedEdit, error)
}

// EventsParams are the parameters of [Server.Events]: those of the Go
// client's stream of events that following uses.
type EventsParams struct {
	// From is the first sequence number; 0 means 1.
	From int64
	// NoFollow ends after the events stored now; UntilStopped after the
	// next event that stops an execution.
	NoFollow, UntilStopped bool
	// OnDisconnect is called with the error when the stream breaks, and
	// with nil when it is back.
	OnDisconnect func(err error)
	// OnDelta, if set, receives the streamed text of the model's call in
	// progress.
	OnDelta func(d api.Delta)
	// GiveUp ends the stream when reconnecting failed for this long.
	GiveUp time.Duration
}

// FollowParams say how [Follow] prints.
type FollowParams struct {
	// Stdout and Stderr are keel run's.
	Stdout, Stderr io.Writer
	// URL is the server's: commands printed for the person name it.
	URL string
	// From is the first event printed as it happens (earlier ones are
	// the run's history); JSON and Quiet are keel run's --json and -q.
	From        int64
	JSON, Quiet bool
	// NoWait returns at the first wait for an approval, paused.
	NoWait bool
	// Waiting: the run waits for a person's decision on its calls and
	// nothing executes it (a resume that attached to the wait,
	// service.ResumePlan): Follow prints the events stored from From on,
	// then, if the run still waits, returns paused (NoWait) or asks (or
	// says how to decide) and follows the run as it goes on.
	Waiting bool
	// Message is the person's message sent with a resume: when the run
	// stops waiting for approvals before the model read it, Follow says
	// so, as a local resume does.
	Message string
	// Prompt, when set, is the person at this terminal (stdin is one):
	// each call the run waits for is asked there as a local run asks it
	// (Prompt.DecideInline, the edit shown as a diff) and decided through
	// the server, while anyone else may decide it meanwhile (the
	// question then goes away, saying who decided). Without it, Follow
	// says how to decide and waits.
	Prompt *Prompt
}

// Follow prints run id's events from sequence number p.From on, as keel
// run prints an execution, until the run ends; while it waits for an
// approval it says how to give it (unless p.NoWait: then it returns at
// once, paused). Ctrl-C (ctx done) cancels an executing run and leaves
// a paused one paused. It returns keel run's exit status for how the run
// ended: 0 completed, 1 failed, 3 paused, 130 canceled.
func Follow(ctx context.Context, srv Server, id string, fp *FollowParams) (int, error) {
	from, jsonOut, quiet, noWait := fp.From, fp.JSON, fp.Quiet, fp.NoWait
	p := NewPrinter(fp.Stderr, fp.Stdout, jsonOut, quiet)
	p.Keel = "keel --server " + fp.URL
	st := &agent.State{RunID: id}
	prompted := map[string]bool{}
	stop := func(st *agent.State) (int, error) {
		p.Footer(id, &agent.Outcome{Status: st.Status, End: st.Ended, State: st})
		p.Unread(id, st, fp.Message)
		switch st.Status {
		case journal.StatusCompleted:
			return 0, nil
		case journal.StatusPaused:
			return 3, nil
		case journal.StatusCanceled:
			return 130, nil
		}
		return 1, nil
	}
	// Approvals asked at this terminal show the call themselves.
	var ask *asker
	if fp.Prompt != nil && !noWait && !quiet && !jsonOut {
		ask = newAsker(ctx, srv, fp, id)
		defer ask.stop()
		p.Inline = true
	}
	// A team's lead waits on the server while a child waits for a
	// person: without waiting here, that ends the follow as it ends keel
	// run (childWatch).
	var watch *childWatch
	lctx := ctx
	if noWait {
		var stopLead context.CancelFunc
		lctx, stopLead = context.WithCancel(ctx)
		defer stopLead()
		watch = newChildWatch(ctx, srv, stopLead)
		defer watch.stop()
	}
	childStop := func(waiting []*agent.State) (int, error) {
		if !jsonOut {
			ChildWaits(fp.Stderr, "keel --server "+fp.URL, id, waiting, true)
		}
		return 3, nil
	}
	lost := false
	live := NewRemoteLive(p)
	onDisconnect := func(err error) {
		switch {
		case err != nil && !lost:
			lost = true
			fmt.Fprintf(fp.Stderr, "keel: lost the server (%s); reconnecting every second for up to %s — the run goes on on the server, or, if the server stopped, when it starts again (Ctrl-C stops following)\n", Cell(agent.Clip(err.Error(), 200)), followGiveUp)
		case err == nil && lost:
			lost = false
			live.Reconnected()
			fmt.Fprintln(fp.Stderr, "keel: reconnected to the server")
		}
	}
	// The model's text as the server streams it, printed as keel run
	// prints a local model's (not with --json or --quiet).
	var onDelta func(api.Delta)
	if !jsonOut && !quiet {
		onDelta = func(d api.Delta) { live.Delta(d, st.LastSeq) }
	}
	// The history before from is read first, without following: a stop
	// in it (the run.failed that a resume continues) must not end the
	// stream that follows the run (?until=stopped ends after the next
	// stop the stream sends).
	prevHash := ""
	// note says, at the first model call whose usage Keel estimated, what
	// keel run says then.
	var note func(journal.Event)
	if from > 1 {
		for e, err := range srv.Events(ctx, id, &EventsParams{NoFollow: true, GiveUp: followGiveUp}) {
			if err != nil {
				return 0, err
			}
			if e.Seq >= from {
				break
			}
			if err := st.Apply(&e); err != nil {
				return 0, err
			}
			watch.children(st)
			if e.Seq == 1 {
				p.Header(id, st.Created, nil)
			}
			if jsonOut {
				p.Event(e)
			} else {
				// The run's history: learn its calls and steps without
				// printing them, as a local resume does, so that later
				// lines name their tools and the step counter goes on.
				p.Prime([]journal.Event{e})
			}
			prevHash = e.Hash
			if e.Seq == from-1 {
				break
			}
		}
	}
	// handle folds and prints event e of the followed stream; it
	// returns true with keel run's exit status when following ends.
	handle := func(e journal.Event) (bool, int, error) {
		if prevHash != "" {
			if e.PrevHash != prevHash {
				return true, 0, &journal.CorruptError{RunID: id, Seq: e.Seq, Reason: "the event does not link to the one before it"}
			}
			prevHash = ""
		}
		if err := st.Apply(&e); err != nil {
			return true, 0, err
		}
		watch.children(st)
		if e.Seq == 1 {
			p.Header(id, st.Created, nil)
		}
		switch {
		case e.Seq >= from || jsonOut:
			live.Event(&e)
			p.Event(e)
			if !jsonOut && e.Seq >= from {
				// What a local execution says of usage Keel estimated.
				if note == nil {
					note = EstimatedUsageNote(p.Err(), st.Created.Model, nil, nil)
				}
				note(e)
			}
		default:
			// The run's history: learn its calls and steps without
			// printing them, as a local resume does, so that later lines
			// name their tools and the step counter goes on.
			p.Prime([]journal.Event{e})
		}
		if e.Seq < from {
			return false, 0, nil
		}
		// A run.paused of a run that still waits for calls (a resume
		// that brought a message or a change) asks them as their
		// approval.requested did.
		asks := e.Type == journal.ApprovalRequested || e.Type == journal.RunPaused && len(st.Pending()) > 0
		switch {
		case st.Status.Terminal():
			code, err := stop(st)
			return true, code, err
		case e.Type == journal.RunPaused && st.Ended != nil && st.Ended.Reason == "revoked":
			code, err := stop(st)
			return true, code, err
		case shutdown(st):
			// Every server resumes, when it starts, the runs a shutdown
			// paused (service.Start): follow the run on through it.
			fmt.Fprintf(fp.Stderr, "keel: the server shut down; run %s goes on when it starts again (following it on; Ctrl-C stops following)\n", id)
		case asks && ask != nil:
			ask.requested(st.Created)
		case asks && !noWait && !quiet && !jsonOut:
			promptApprovals(context.WithoutCancel(ctx), srv, fp, id, prompted)
		case e.Type == journal.ApprovalResolved && ask != nil:
			ask.resolved(&e)
		}
		return false, 0, nil
	}
	if fp.Waiting {
		// The run waits and nothing executes it: what is stored is all
		// there is until someone decides.
		for e, err := range srv.Events(ctx, id, &EventsParams{From: st.LastSeq + 1, NoFollow: true, GiveUp: followGiveUp}) {
			if err != nil {
				return 0, err
			}
			if done, code, err := handle(e); done {
				return code, err
			}
		}
		if st.Status == journal.StatusPaused && len(st.Pending()) > 0 {
			switch {
			case noWait:
				return stop(st)
			case ask != nil:
				ask.requested(st.Created)
			case !quiet && !jsonOut:
				promptApprovals(context.WithoutCancel(ctx), srv, fp, id, prompted)
			}
		}
	}
	for {
		for e, err := range srv.Events(lctx, id, &EventsParams{From: st.LastSeq + 1, UntilStopped: noWait, OnDisconnect: onDisconnect, OnDelta: onDelta, GiveUp: followGiveUp}) {
			if err != nil {
				return 0, err
			}
			if done, code, err := handle(e); done {
				return code, err
			}
		}
		if waiting := watch.waits(); len(waiting) > 0 && ctx.Err() == nil {
			return childStop(waiting)
		}
		if ctx.Err() != nil {
			break
		}
		if noWait && shutdown(st) {
			// The stream ended at the pause of a shutdown
			// (?until=stopped): the run is not stopped, follow it on as
			// the restarted server resumes it.
			continue
		}
		if noWait && st.Status == journal.StatusPaused {
			return stop(st)
		}
		return 0, fmt.Errorf("the event stream of run %s ended early", id)
	}
	// Ctrl-C: cancel an executing run; a paused one stays paused.
	bg := context.WithoutCancel(ctx)
	run, err := srv.Run(bg, id)
	if err != nil {
		return 0, err
	}
	if run.Status == string(journal.StatusPaused) {
		if run.Reason == agent.ReasonShutdown {
			fmt.Fprintf(fp.Stderr, "keel: run %s goes on when the server starts again; follow it with: keel --server %s runs show %s --follow\n", id, fp.URL, id)
		} else {
			staysPaused(fp, run)
		}
		return 3, nil
	}
	if err := srv.Cancel(bg, id); err != nil {
		return 0, err
	}
	fmt.Fprintf(fp.Stderr, "keel: canceled run %s on the server\n", id)
	return 130, nil
}

// staysPaused says that run, left paused on the server by Ctrl-C, stays
// paused, and how it goes on: the decision each waiting call needs (on
// the command line with --server and in the web UI), else a resume.
func staysPaused(fp *FollowParams, run *api.Run) {
	w := Esc(fp.Stderr)
	keel := "keel"
	if fp.URL != "" {
		keel = "keel --server " + fp.URL
	}
	fmt.Fprintf(w, "keel: run %s stays paused on the server\n", run.ID)
	switch {
	case len(run.Pending) > 0:
		for _, ap := range run.Pending {
			fmt.Fprintf(w, "keel: decide with: %s approve %s %s   or   %s deny %s %s --reason TEXT\n",
				keel, run.ID, ShellWord(ap.CallID), keel, run.ID, ShellWord(ap.CallID))
		}
		if fp.URL != "" {
			fmt.Fprintf(w, "keel: or in the web UI: %s/ui/approvals\n", fp.URL)
		}
	case len(run.AuthWaits) > 0:
		if fp.URL != "" {
			fmt.Fprintf(w, "keel: it waits for an authorization: connect it in the web UI, %s/ui/approvals\n", fp.URL)
		}
	case run.Executing || run.Queued:
		// The server goes on with it by itself.
	default:
		fmt.Fprintf(w, "keel: resume with: %s runs resume %s\n", keel, run.ID)
	}
}

// shutdown reports whether st is paused by a server's shutdown, which
// the server resumes when it starts again.
func shutdown(st *agent.State) bool {
	return st.Status == journal.StatusPaused && st.Ended != nil && st.Ended.Reason == agent.ReasonShutdown && len(st.Pending()) == 0
}

// promptApprovals prints, once per call, what a run waits for and how to
// decide it (as keel run does when it waits), with the web UI's inbox.
func promptApprovals(ctx context.Context, srv Server, fp *FollowParams, id string, prompted map[string]bool) {
	run, err := srv.Run(ctx, id)
	if err != nil {
		return
	}
	var fresh []agent.PendingApproval
	for _, ap := range run.Pending {
		if !prompted[ap.CallID] {
			prompted[ap.CallID] = true
			fresh = append(fresh, PendingOf(ap))
		}
	}
	if len(fresh) > 0 {
		Waiting(fp.Stderr, fresh, fp.URL)
	}
}

// PendingOf converts the API's approval to the runtime's.
func PendingOf(ap api.Approval) agent.PendingApproval {
	return agent.PendingApproval{RunID: ap.RunID, Seq: ap.Seq, Time: ap.Requested, Principal: ap.Agent, OnBehalfOf: ap.OnBehalfOf, Task: ap.Task,
		Expired: ap.Expired,
		ApprovalRequested: agent.ApprovalRequested{CallID: ap.CallID, Tool: ap.Tool, Arguments: ap.Arguments, Reason: ap.Reason,
			Action: ap.Action, Parts: ap.Parts, Expires: ap.Expires, Default: policy.Effect(ap.Default)}}
}

// Cell makes s one table cell: no tab or newline to break the columns.
func Cell(s string) string {
	return strings.NewReplacer("\t", " ", "\n", " ").Replace(s)
}
