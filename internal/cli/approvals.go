package cli

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/tui"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/service"
	"github.com/keel-run/keel/visible"
)

// parseDuration is time.ParseDuration that also accepts whole days
// ("3d"), since approvals may wait that long.
func parseDuration(s string) (time.Duration, error) {
	if d, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(d)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("want a duration such as 30m, 12h or 3d")
		}
		if n > maxDays {
			return 0, fmt.Errorf("at most %dd (100 years)", maxDays)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("want a duration such as 30m, 12h or 3d")
	}
	return d, nil
}

// maxDays bounds a duration in days: 100 years, far below where
// time.Duration overflows (292 years).
const maxDays = 36500

func (a *app) approvalsCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "approvals", Short: "List the tool calls waiting for a person's approval"}
	cmd.AddCommand(pendingListCmd(a, "List pending approvals across runs, oldest first", backend.Approvals,
		func(ap api.Approval) (string, agent.PendingApproval) { return ap.RunID, tui.PendingOf(ap) },
		func(pending []agent.PendingApproval, asJSON bool) error {
			return tui.Approvals(a.stdout, pending, asJSON, time.Now())
		}))
	return cmd
}

// pendingListCmd is the list command of a group of things runs wait for
// (approvals, inputs): list reads them from the backend (the API's
// list, of every run), of turns each into its run and what print prints
// (as a table or, with --json, as JSON lines), the ones of --run only.
func pendingListCmd[A, T any](a *app, short string, list func(b backend, ctx context.Context) ([]A, error), of func(A) (string, T), print func(pending []T, asJSON bool) error) *cobra.Command {
	var run string
	var asJSON bool
	cmd := &cobra.Command{
		Use:         "list",
		Short:       short,
		Args:        cobra.NoArgs,
		Annotations: bothForms,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withBackend(cmd, func(ctx context.Context, b backend) error {
				if run != "" {
					// --run takes what a RUN argument takes: a prefix, "last".
					id, err := a.runFlag(ctx, b.(runRefBackend), run)
					if err != nil {
						return err
					}
					run = id
				}
				all, err := list(b, ctx)
				if err != nil {
					return err
				}
				var pending []T
				for _, x := range all {
					if id, p := of(x); run == "" || id == run {
						pending = append(pending, p)
					}
				}
				return print(pending, asJSON)
			}, "run", "json")
		},
	}
	cmd.Flags().StringVar(&run, "run", "", "only this run (an id, a unique prefix of one, or \"last\")")
	cmd.Flags().BoolVar(&asJSON, "json", false, "JSON lines")
	return cmd
}

// approvalsBackend is what the approval commands need of a journal or a
// team server.
type approvalsBackend interface {
	// Approvals lists the pending approvals of every run, oldest first,
	// with Expired set.
	Approvals(ctx context.Context) ([]api.Approval, error)
}

// decideFlags are the flags of approve and deny.
type decideFlags struct {
	by, reason, remember, prefix string
	noResume                     bool
	resume                       runFlags
}

func (d *decideFlags) register(cmd *cobra.Command, approve bool) {
	fl := cmd.Flags()
	fl.StringVar(&d.by, "by", "", "who decides (default: $USER)")
	fl.BoolVar(&d.noResume, "no-resume", false, "only record the decision; do not continue the run in this process")
	fl.BoolVarP(&d.resume.quiet, "quiet", "q", false, "print only the run's final result")
	fl.BoolVar(&d.resume.json, "json", false, "write the run's journal events to stdout as JSON lines")
	fl.StringVar(&d.resume.apiKey, "api-key", "", "API key for continuing the run (default from the environment)")
	fl.StringVar(&d.resume.apiKeyEnv, "api-key-env", "", "environment variable holding the model endpoint's API key, for continuing the run")
	registerWaitFlags(fl, &d.resume.gate)
	if approve {
		fl.StringVar(&d.reason, "reason", "", "why (recorded)")
		fl.StringVar(&d.remember, "remember", "", "also allow matching calls from now on: run (this run) or agent (every run of the agent); only the exact command that asked, or --prefix")
		fl.StringVar(&d.prefix, "prefix", "", "with --remember: allow commands starting with these words (e.g. 'git push origin'), which must start every part that asked")
	} else {
		fl.StringVar(&d.reason, "reason", "", "why (recorded, and shown to the model); required")
	}
	// Continuing the run uses its own settings (d.resume.changed is nil).
}

func (a *app) approveCmd() *cobra.Command {
	d := &decideFlags{}
	cmd := &cobra.Command{
		Use:   "approve RUN [CALL]",
		Short: "Approve a tool call a run waits for, and continue the run",
		Long: `Approve records a person's approval of a waiting call (see keel approvals
list) in the run's journal. Unless --no-resume, the run then continues in
this process; if another process already continues it (a keel run that was
waiting), that is fine too.

` + callRefHelp + `

--remember run|agent also allows matching calls without asking again: in
this run, or in every run of the agent. Only the exact simple command that
asked is remembered, or the word prefix given with --prefix; never more.`,
		Args:        cobra.RangeArgs(1, 2),
		Annotations: annotated(firstArgIsRun, bothForms),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.decide(cmd, args[0], callArg(args), policy.Allow, d)
		},
	}
	d.register(cmd, true)
	return cmd
}

func (a *app) denyCmd() *cobra.Command {
	d := &decideFlags{}
	cmd := &cobra.Command{
		Use:         "deny RUN [CALL] --reason TEXT",
		Short:       "Deny a tool call a run waits for; the model is told why",
		Long:        "Deny records a person's denial of a waiting call, with the reason the model is told.\n\n" + callRefHelp,
		Args:        cobra.RangeArgs(1, 2),
		Annotations: annotated(firstArgIsRun, bothForms),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.decide(cmd, args[0], callArg(args), policy.Deny, d)
		},
	}
	d.register(cmd, false)
	return cmd
}

// callRefHelp is what approve's and deny's help say about CALL.
const callRefHelp = "CALL is a call id, or a unique prefix of one among the calls the run waits for (keel approvals list --run RUN); without CALL, the one call the run waits for."

// callArg is the CALL argument of approve or deny ("": none given).
func callArg(args []string) string {
	if len(args) < 2 {
		return ""
	}
	return args[1]
}

// resolveCall returns the id of the call ref names among the approvals
// run runID waits for (service.ResolveCall, every front end's rule); a
// refusal is a usage error, with where to see what waits when nothing
// does.
func resolveCall(runID, ref string, pending []api.Approval, keel string) (string, error) {
	id, err := service.ResolveCall(runID, ref, pending)
	switch {
	case err != nil && len(pending) == 0:
		return "", usagef("%v (%s approvals list shows those waiting)", err, keel)
	case err != nil:
		return "", usagef("%v", err)
	}
	return id, nil
}

// decisionFlags are the flags of approve and deny that the server form
// accepts (the server records the token's person as who decided).
var decisionFlags = []string{"reason", "remember", "prefix", "no-resume", "quiet", "json", "no-wait", "wait"}

func (a *app) decide(cmd *cobra.Command, runID, callID string, dec policy.Effect, d *decideFlags) error {
	ctx := cmd.Context()
	var prefix []string
	if d.prefix != "" {
		prefix = strings.Fields(d.prefix)
	}
	// The service's checks in the service's order (report 15, Q4): the
	// decision's own form, the run, the call.
	if err := service.CheckDecision(dec, &api.Decide{Reason: d.reason, Remember: d.remember, Prefix: prefix}); err != nil {
		return err
	}
	b, err := a.openAs(ctx, cmd, d.by, decisionFlags...)
	if err != nil {
		return err
	}
	defer b.Close()
	if err := a.checkRuns(); err != nil {
		return err
	}
	all, err := b.Approvals(ctx)
	if err != nil {
		return err
	}
	pending := slices.DeleteFunc(all, func(p api.Approval) bool { return p.RunID != runID })
	if callID == "" {
		// The API names the call: the one the run waits for, by the
		// service's rule.
		if callID, err = resolveCall(runID, callID, pending, b.Keel()); err != nil {
			return err
		}
	}
	// A call named is the service's to find among those the run waits
	// for, after whatever the server checks first (a token's scope).
	res := &agent.ApprovalResolved{Decision: dec, By: a.person(d.by), Reason: d.reason, Remember: d.remember, Prefix: prefix}
	if err := b.Decide(ctx, runID, callID, res); err != nil {
		if _, rerr := service.ResolveCall(runID, callID, pending); rerr != nil && errorCode(err) == api.CodeNoApproval {
			// The call named is not among those waiting: as a run that
			// names nothing, a usage error in both forms (report 15,
			// Q16). (A deadline that passed is the run's state.)
			_, err = resolveCall(runID, callID, pending, b.Keel())
		}
		return err
	}
	if id, err := service.ResolveCall(runID, callID, pending); err == nil {
		callID = id // its whole id, as the service found it
	}
	// What the decision did, from the journal: the remembered approvals,
	// the approvals the run still waits for, and the decision's event,
	// after which the run continues.
	events, err := b.Events(ctx, runID)
	if err != nil {
		return err
	}
	st, err := agent.Fold(runID, events)
	if err != nil {
		return err
	}
	var mine int64
	for i := len(events) - 1; i >= 0 && mine == 0; i-- {
		if events[i].Type != journal.ApprovalResolved {
			continue
		}
		if v, err := agent.Decode(&events[i]); err == nil && v.(*agent.ApprovalResolved).CallID == callID {
			mine = events[i].Seq
			res = v.(*agent.ApprovalResolved)
		}
	}
	verb := map[policy.Effect]string{policy.Allow: "approved", policy.Deny: "denied"}[dec]
	fmt.Fprintf(a.stderr, "keel: %s call %s of run %s\n", verb, callID, runID)
	for _, g := range res.Grants {
		what := "exactly: " + g.Exact
		if len(g.Prefix) > 0 {
			what = "commands starting: " + strings.Join(g.Prefix, " ")
		}
		fmt.Fprintf(a.stderr, "keel: remembered for the %s (%s %s)\n", g.Scope, g.Tool, visible.String(what))
	}
	// Continue the run only if nobody else did: a keel run waiting for
	// this decision continues it itself (a server always does), and the
	// run may still wait for other calls.
	if n := len(st.Pending()); n > 0 {
		fmt.Fprintf(a.stderr, "keel: run %s still waits for %d more approval(s): %s approvals list --run %s\n", runID, n, b.Keel(), runID)
		return nil
	}
	if d.noResume {
		fmt.Fprintf(a.stderr, "keel: %s\n", b.ContinuesLater(runID))
		return nil
	}
	err = b.Continue(ctx, runID, &continuation{f: &d.resume, after: mine})
	if errors.Is(err, agent.ErrRunBusy) || errors.Is(err, agent.ErrRunCompleted) {
		// The process that waited for the decision took the run on (and
		// may have completed it before this one looked).
		fmt.Fprintf(a.stderr, "keel: run %s continues in another process\n", runID)
		return nil
	}
	return err
}

// execBackend is what the commands that decide on and continue runs
// need of a journal or a team server.
type execBackend interface {
	// Decide records a person's decision on a pending approval of run
	// runID; the local backend also stores the standing approvals it
	// makes for the agent.
	Decide(ctx context.Context, runID, callID string, res *agent.ApprovalResolved) error
	// Continue continues run runID (locally: executes it in this
	// process; remotely: the server does) and prints its events as keel
	// run does until it ends or waits.
	Continue(ctx context.Context, runID string, c *continuation) error
	// ContinuesLater says what becomes of a decided run that this
	// process does not continue (--no-resume).
	ContinuesLater(runID string) string
	// Keel is how hints name the command: "keel", or "keel --server URL".
	Keel() string
}

// continuation says how to continue a run.
type continuation struct {
	// f has the flags of keel runs resume (the server form uses json,
	// quiet and no-wait).
	f *runFlags
	// message, when set, is a user message added first (keel runs
	// resume --message).
	message string
	// after is the sequence number of the decision this process made
	// (0: none, keel runs resume): the run is continued only if nothing
	// came after it (another process continues it otherwise), and events
	// are printed from the next one on.
	after int64
}
