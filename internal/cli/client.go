package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/audit"
	"github.com/keel-run/keel/client"
	"github.com/keel-run/keel/internal/demo"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/server"
	"github.com/keel-run/keel/server/api"
)

// serverURL returns the team server the command line talks to: --server,
// else $KEEL_SERVER; "" means none (work on the local journal).
func (a *app) serverURL() string {
	if a.server != "" {
		return a.server
	}
	return a.getenv("KEEL_SERVER")
}

// apiClient returns a client of the team server with the caller's token:
// --token, else $KEEL_TOKEN, else the token `keel serve` saved in
// $KEEL_HOME/server-token, but only for a server URL it was saved for:
// an admin token is never sent to another server.
func (a *app) apiClient() (*client.Client, error) {
	srv := a.serverURL()
	tok := a.token
	if tok == "" {
		tok = a.getenv("KEEL_TOKEN")
	}
	if tok == "" {
		file := a.serverTokenFile()
		st, err := readSavedToken(file)
		switch {
		case err != nil:
		case st.isFor(srv):
			tok = st.Token
		case len(st.Servers) == 0:
			return nil, usagef("the token in %s is bound to no server (an older keel serve wrote it), so it is not sent to %s; pass it with --token or KEEL_TOKEN if that is its server", file, srv)
		default:
			return nil, usagef("the token saved in %s is for %s only, not %s; pass --token or set KEEL_TOKEN for this server", file, strings.Join(st.Servers, ", "), srv)
		}
	}
	if tok == "" {
		return nil, usagef("no API token for %s: pass --token or set KEEL_TOKEN (an admin makes one with `keel tokens create`)", srv)
	}
	c, err := client.New(srv, &client.Options{Token: tok})
	if err != nil {
		return nil, usagef("--server: %v", err)
	}
	return c, nil
}

// serverForm is the annotation of a command written once against a
// backend (see backend.go): it works on the local journal and on a team
// server alike.
const serverForm = "keel.server-form"

// bothForms annotates a command that has a server form.
var bothForms = map[string]string{serverForm: "yes"}

// localOnly are the commands that never touch a journal (they work on
// files of this machine), so they run the same with --server.
var localOnly = []string{"keel serve", "keel policy check", "keel policy default", "keel policy test", "keel sandbox info",
	"keel model replay-task", "keel model serve-replay"}

// clientMode makes the commands that have a server form talk to the team
// server when one is named (--server or KEEL_SERVER), with the same
// output as their local form. The other commands stay local.
func (a *app) clientMode(root *cobra.Command) {
	impl := map[string]func(*cobra.Command, []string) error{
		"keel run":           a.clientRun,
		"keel demo":          a.clientDemo,
		"keel runs list":     a.clientRunsList,
		"keel runs show":     a.clientRunsShow,
		"keel runs resume":   a.clientRunsResume,
		"keel approve":       func(c *cobra.Command, args []string) error { return a.clientDecide(c, args, policy.Allow) },
		"keel deny":          func(c *cobra.Command, args []string) error { return a.clientDecide(c, args, policy.Deny) },
		"keel audit verify":  a.clientAuditVerify,
		"keel tokens create": a.clientTokensCreate,
		"keel tokens list":   a.clientTokensList,
		"keel tokens revoke": a.clientTokensRevoke,
	}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		path := c.CommandPath()
		f, ok := impl[path]
		if c.Annotations[serverForm] != "" {
			// Written once against a backend (backend.go).
			ok = false
		} else if !ok && c.RunE != nil && !slices.Contains(localOnly, path) {
			// A command with no server form must not quietly use the
			// local journal when a server is named.
			f = func(*cobra.Command, []string) error {
				return usagef("%s is not supported with --server (or KEEL_SERVER): it works on a local journal; run it on the server's machine without --server", path)
			}
			ok = true
		}
		if ok && c.RunE != nil {
			local := c.RunE
			c.RunE = func(cmd *cobra.Command, args []string) error {
				if a.serverURL() == "" {
					return local(cmd, args)
				}
				return f(cmd, args)
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// flagValues reads flags of a wrapped command by name.
type flagValues struct {
	fs  *pflag.FlagSet
	err error
}

func (f *flagValues) str(name string) string {
	v, err := f.fs.GetString(name)
	f.err = errors.Join(f.err, err)
	return v
}

func (f *flagValues) strs(name string) []string {
	v, err := f.fs.GetStringArray(name)
	if err != nil {
		v, err = f.fs.GetStringSlice(name)
	}
	f.err = errors.Join(f.err, err)
	return v
}

func (f *flagValues) boolean(name string) bool {
	v, err := f.fs.GetBool(name)
	f.err = errors.Join(f.err, err)
	return v
}

// noWait reports whether the command stops at an approval (exit 3)
// instead of waiting for it, decided as the local form decides it:
// --no-wait, --wait, else whether stdin is a terminal, so that an
// unattended `keel --server URL run` never waits on a question nobody
// sees.
func (f *flagValues) noWait() bool {
	g := gateFlags{noWait: f.boolean("no-wait")}
	if f.fs.Lookup("wait") != nil {
		g.wait = f.boolean("wait")
	}
	return !g.waiting()
}

func (f *flagValues) integer(name string) int {
	v, err := f.fs.GetInt(name)
	f.err = errors.Join(f.err, err)
	return v
}

func (a *app) clientRun(cmd *cobra.Command, args []string) error {
	fs := cmd.Flags()
	if err := only(cmd, "model", "workspace", "mount-path", "env", "setup", "task-file", "system", "system-file", "json", "quiet",
		"max-steps", "max-tokens", "max-cost", "timeout", "sandbox", "allow-host", "completion-marker", "policy", "agent", "on-behalf-of", "no-wait", "wait"); err != nil {
		return err
	}
	fv := &flagValues{fs: fs}
	f := &runFlags{taskFile: fv.str("task-file")}
	task, err := readTask(f, args)
	if err != nil {
		return err
	}
	req := &api.CreateRun{Task: task, Model: fv.str("model"), MountPath: fv.str("mount-path"), Env: fv.strs("env"), Setup: fv.str("setup"),
		System: fv.str("system"), Sandbox: fv.str("sandbox"), Network: fv.strs("allow-host"), OnBehalfOf: fv.str("on-behalf-of")}
	if fs.Changed("agent") {
		// Otherwise the server picks: the token's agent, else its default.
		req.Agent = fv.str("agent")
	}
	if fs.Changed("workspace") || req.Workspace == "" {
		if req.Workspace, err = filepath.Abs(fv.str("workspace")); err != nil {
			return usagef("--workspace: %v", err)
		}
	}
	if sf := fv.str("system-file"); sf != "" {
		b, err := os.ReadFile(sf)
		if err != nil {
			return usagef("--system-file: %v", err)
		}
		req.System = string(b)
	}
	if pf := fv.str("policy"); pf != "" && pf != "default" {
		b, err := os.ReadFile(pf)
		if err != nil {
			return usagef("--policy: %v", err)
		}
		req.Policy = string(b)
	}
	if fs.Changed("completion-marker") {
		m := fv.str("completion-marker")
		req.CompletionMarker = &m
	}
	req.Limits.MaxSteps = fv.integer("max-steps")
	if req.Limits.MaxTokens, err = fs.GetInt64("max-tokens"); err != nil {
		return err
	}
	if req.Limits.MaxCost, err = fs.GetFloat64("max-cost"); err != nil {
		return err
	}
	if d, err := fs.GetDuration("timeout"); err == nil && d > 0 {
		req.Limits.Timeout = d.String()
	}
	jsonOut, quiet, noWait := fv.boolean("json"), fv.boolean("quiet"), fv.noWait()
	if fv.err != nil {
		return fmt.Errorf("keel run --server: %w", fv.err)
	}
	ctx := cmd.Context()
	cl, err := a.apiClient()
	if err != nil {
		return err
	}
	run, err := cl.CreateRun(context.WithoutCancel(ctx), req)
	if err != nil {
		return err
	}
	return a.follow(ctx, cl, run.ID, 1, jsonOut, quiet, noWait)
}

func (a *app) clientDemo(cmd *cobra.Command, _ []string) error {
	if err := only(cmd); err != nil {
		return err
	}
	ctx := cmd.Context()
	cl, err := a.apiClient()
	if err != nil {
		return err
	}
	fmt.Fprintln(a.stderr, "keel demo:", demo.Label)
	run, err := cl.CreateRun(context.WithoutCancel(ctx), &api.CreateRun{Demo: true})
	if err != nil {
		return err
	}
	fmt.Fprintf(a.stderr, "keel demo: run %s on %s; watch it at %s/ui/runs/%s\n", run.ID, cl.URL(), cl.URL(), run.ID)
	return a.follow(ctx, cl, run.ID, 1, false, false, false)
}

// followGiveUp is how long following a run keeps reconnecting to a
// server that does not answer (a restart takes seconds; a crashed server
// needs a person) before it exits 1.
const followGiveUp = 10 * time.Minute

// follow prints run id's events from sequence number from on, as `keel
// run` prints an execution, until the run ends; while it waits for an
// approval it says how to give it (unless noWait: then it returns at
// once with exit status 3). Ctrl-C cancels an executing run and leaves a
// paused one paused.
func (a *app) follow(ctx context.Context, cl *client.Client, id string, from int64, jsonOut, quiet, noWait bool) error {
	p := newPrinter(a.stderr, a.stdout, jsonOut, quiet)
	p.keel = "keel --server " + cl.URL()
	st := &agent.State{RunID: id}
	prompted := map[string]bool{}
	stop := func(st *agent.State) error {
		p.footer(id, &agent.Outcome{Status: st.Status, End: st.Ended, State: st})
		switch st.Status {
		case journal.StatusCompleted:
			return nil
		case journal.StatusPaused:
			return &exitError{3}
		case journal.StatusCanceled:
			return &exitError{130}
		}
		return &exitError{1}
	}
	lost := false
	onDisconnect := func(err error) {
		switch {
		case err != nil && !lost:
			lost = true
			fmt.Fprintf(a.stderr, "keel: lost the server (%s); reconnecting every second for up to %s — the run goes on on the server (Ctrl-C stops following)\n", cell(clip(err.Error(), 200)), followGiveUp)
		case err == nil && lost:
			lost = false
			fmt.Fprintln(a.stderr, "keel: reconnected to the server")
		}
	}
	for e, err := range cl.Events(ctx, id, &client.EventsParams{UntilStopped: noWait, OnDisconnect: onDisconnect, GiveUp: followGiveUp}) {
		if err != nil {
			return err
		}
		if err := st.Apply(&e); err != nil {
			return err
		}
		if e.Seq == 1 {
			p.header(id, st.Created, nil)
		}
		switch {
		case e.Seq >= from || jsonOut:
			p.event(e)
		default:
			// The run's history: learn its calls and steps without
			// printing them, as a local resume does, so that later lines
			// name their tools and the step counter goes on.
			p.prime([]journal.Event{e})
		}
		if e.Seq < from {
			continue
		}
		switch {
		case st.Status.Terminal():
			return stop(st)
		case e.Type == journal.RunPaused && st.Ended != nil && st.Ended.Reason == "revoked":
			return stop(st)
		case e.Type == journal.RunPaused && st.Ended != nil && st.Ended.Reason == "shutdown":
			fmt.Fprintf(a.stderr, "keel: the server shut down; run %s continues when it starts again (waiting; Ctrl-C leaves it paused)\n", id)
		case e.Type == journal.ApprovalRequested && !noWait && !quiet && !jsonOut:
			a.promptApprovals(context.WithoutCancel(ctx), cl, id, prompted)
		}
	}
	if ctx.Err() == nil {
		if noWait && st.Status == journal.StatusPaused {
			return stop(st)
		}
		return fmt.Errorf("the event stream of run %s ended early", id)
	}
	// Ctrl-C: cancel an executing run; a paused one stays paused.
	bg := context.WithoutCancel(ctx)
	run, err := cl.Run(bg, id)
	if err != nil {
		return err
	}
	if run.Status == string(journal.StatusPaused) {
		fmt.Fprintf(a.stderr, "keel: run %s stays paused on the server\n", id)
		return &exitError{3}
	}
	if _, err := cl.Cancel(bg, id); err != nil && !client.IsCode(err, api.CodeRunCompleted) {
		return err
	}
	fmt.Fprintf(a.stderr, "keel: canceled run %s on the server\n", id)
	return &exitError{130}
}

// promptApprovals prints, once per call, what a run waits for and how to
// decide it (as keel run does when it waits), with the web UI's inbox.
func (a *app) promptApprovals(ctx context.Context, cl *client.Client, id string, prompted map[string]bool) {
	run, err := cl.Run(ctx, id)
	if err != nil {
		return
	}
	var fresh []agent.PendingApproval
	for _, ap := range run.Pending {
		if !prompted[ap.CallID] {
			prompted[ap.CallID] = true
			fresh = append(fresh, pendingOf(ap))
		}
	}
	if len(fresh) > 0 {
		a.onWaitRemote(fresh, cl.URL())
	}
}

// onWaitRemote prints what a run on a team server waits for and how to
// decide it there (keel run's onWait, for a server).
func (a *app) onWaitRemote(pending []agent.PendingApproval, srv string) {
	out := escWriter{a.stderr}
	for _, p := range pending {
		fmt.Fprintf(out, "\nkeel: run %s waits for a person to approve call %s (%s):\n", p.RunID, server.Visible(p.CallID), p.Tool)
		for _, line := range strings.Split(server.Visible(p.Action), "\n") {
			fmt.Fprintf(out, "    │ %s\n", line)
		}
		for _, part := range p.Parts {
			fmt.Fprintf(out, "  asks: %s — %s\n", clip(oneLine(server.Visible(part.Text)), 80), server.Visible(part.Reason))
		}
		if p.Expires != nil {
			fmt.Fprintf(out, "  deadline %s, then: %s\n", p.Expires.Local().Format("2006-01-02 15:04:05"), p.Default)
		}
		fmt.Fprintf(out, "  approve: keel --server %s approve %s %s [--remember run|agent]\n  deny:    keel --server %s deny %s %s --reason '...'\n",
			srv, p.RunID, shellWord(p.CallID), srv, p.RunID, shellWord(p.CallID))
	}
	fmt.Fprintf(out, "keel: or in the web UI: %s/ui/approvals\n", srv)
	fmt.Fprintln(out, "keel: waiting (anyone with an approvals:write token for this server may decide; Ctrl-C leaves the run paused)")
}

func (a *app) clientRunsList(cmd *cobra.Command, _ []string) error {
	fv := &flagValues{fs: cmd.Flags()}
	status, limit, asJSON := fv.strs("status"), fv.integer("limit"), fv.boolean("json")
	if fv.err != nil {
		return fv.err
	}
	cl, err := a.apiClient()
	if err != nil {
		return err
	}
	runs, err := cl.Runs(cmd.Context(), &client.RunsParams{Status: status, Limit: limit})
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(a.stdout)
		for _, r := range runs {
			s := journal.RunSummary{RunID: r.ID, Created: r.Created, Updated: r.Updated, LastSeq: r.Events, LastType: journal.Type(r.LastType), Status: journal.Status(r.Status)}
			if err := enc.Encode(s); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN\tSTATUS\tCREATED\tEVENTS\tSTEPS\tCOST\tTASK")
	for _, r := range runs {
		steps, cost, task := fmt.Sprint(r.Steps), fmt.Sprintf("$%.4f", r.Cost), clip(oneLine(r.Task), 50)
		if r.Task == "" && r.Error != "" {
			steps, cost, task = "", "", "("+clip(r.Error, 60)+")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", r.ID, r.Status, r.Created.Local().Format("2006-01-02 15:04"), r.Events, steps, cost, task)
	}
	return tw.Flush()
}

// jsonClient reads a wrapped command's --json flag and returns it with
// the client for --server.
func (a *app) jsonClient(cmd *cobra.Command) (bool, *client.Client, error) {
	fv := &flagValues{fs: cmd.Flags()}
	asJSON := fv.boolean("json")
	if fv.err != nil {
		return false, nil, fv.err
	}
	cl, err := a.apiClient()
	return asJSON, cl, err
}

// allEvents reads run id's stored events from the server.
func allEvents(ctx context.Context, cl *client.Client, id string) ([]journal.Event, error) {
	var out []journal.Event
	for e, err := range cl.Events(ctx, id, &client.EventsParams{NoFollow: true}) {
		if err != nil {
			return out, err
		}
		out = append(out, e)
	}
	return out, nil
}

func (a *app) clientRunsShow(cmd *cobra.Command, args []string) error {
	asJSON, cl, err := a.jsonClient(cmd)
	if err != nil {
		return err
	}
	events, err := allEvents(cmd.Context(), cl, args[0])
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(a.stdout)
		for _, e := range events {
			if err := enc.Encode(e); err != nil {
				return err
			}
		}
		return nil
	}
	return a.showTimeline(args[0], events, journal.Verify(args[0], events))
}

func (a *app) clientRunsResume(cmd *cobra.Command, args []string) error {
	fs := cmd.Flags()
	if err := only(cmd, "message", "json", "quiet", "no-wait", "wait"); err != nil {
		return err
	}
	fv := &flagValues{fs: fs}
	message, jsonOut, quiet, noWait := fv.str("message"), fv.boolean("json"), fv.boolean("quiet"), fv.noWait()
	if fv.err != nil {
		return fv.err
	}
	ctx := cmd.Context()
	cl, err := a.apiClient()
	if err != nil {
		return err
	}
	run, err := cl.Resume(context.WithoutCancel(ctx), args[0], &api.ResumeRun{Message: message})
	if err != nil {
		return err
	}
	return a.follow(ctx, cl, run.ID, run.Events+1, jsonOut, quiet, noWait)
}

func (a *app) clientDecide(cmd *cobra.Command, args []string, dec policy.Effect) error {
	fs := cmd.Flags()
	if err := only(cmd, "reason", "remember", "prefix", "no-resume", "quiet", "json", "no-wait", "wait"); err != nil {
		return err
	}
	fv := &flagValues{fs: fs}
	req := &api.Decide{Reason: fv.str("reason")}
	if dec == policy.Allow {
		req.Remember = fv.str("remember")
		if p := fv.str("prefix"); p != "" {
			req.Prefix = strings.Fields(p)
		}
	}
	noResume, quiet, jsonOut, noWait := fv.boolean("no-resume"), fv.boolean("quiet"), fv.boolean("json"), fv.noWait()
	if fv.err != nil {
		return fv.err
	}
	if dec == policy.Deny && strings.TrimSpace(req.Reason) == "" {
		return usagef("deny needs --reason: the model is told why")
	}
	ctx := cmd.Context()
	cl, err := a.apiClient()
	if err != nil {
		return err
	}
	runID, callID := args[0], args[1]
	decide := cl.Approve
	if dec == policy.Deny {
		decide = cl.Deny
	}
	run, err := decide(context.WithoutCancel(ctx), runID, callID, req)
	if client.IsCode(err, api.CodeNoApproval) {
		return fmt.Errorf("%w (see keel --server %s approvals list --run %s)", err, cl.URL(), runID)
	}
	if err != nil {
		return err
	}
	verb := map[policy.Effect]string{policy.Allow: "approved", policy.Deny: "denied"}[dec]
	fmt.Fprintf(a.stderr, "keel: %s call %s of run %s\n", verb, server.Visible(callID), runID)
	if n := len(run.Pending); n > 0 {
		fmt.Fprintf(a.stderr, "keel: run %s still waits for %d more approval(s): keel --server %s approvals list --run %s\n", runID, n, cl.URL(), runID)
		return nil
	}
	if noResume {
		fmt.Fprintf(a.stderr, "keel: the server continues run %s\n", runID)
		return nil
	}
	return a.follow(ctx, cl, runID, run.Events+1, jsonOut, quiet, noWait)
}

func (a *app) clientAuditVerify(cmd *cobra.Command, args []string) error {
	fv := &flagValues{fs: cmd.Flags()}
	all, asJSON := fv.boolean("all"), fv.boolean("json")
	if fv.err != nil {
		return fv.err
	}
	if all == (len(args) > 0) {
		return usagef("give RUN ids or --all")
	}
	cl, err := a.apiClient()
	if err != nil {
		return err
	}
	rep, err := cl.VerifyAudit(cmd.Context(), &api.VerifyAudit{Runs: args})
	if err != nil {
		return err
	}
	bad := 0
	enc := json.NewEncoder(a.stdout)
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	if !asJSON {
		fmt.Fprintln(tw, "STREAM\tKIND\tEVENTS\tSTATUS\tRESULT")
	}
	for _, j := range rep.Journals {
		r := audit.Report{RunID: j.ID, Kind: j.Kind, Events: j.Events, OK: j.OK, FirstBad: j.FirstBad, Reason: j.Reason, Status: journal.Status(j.Status), Head: j.Head}
		if !r.OK {
			bad++
		}
		if asJSON {
			if err := enc.Encode(r); err != nil {
				return err
			}
			continue
		}
		res := "ok · head " + short(r.Head)
		if !r.OK {
			res = fmt.Sprintf("BAD at event %d: %s", r.FirstBad, r.Reason)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", r.RunID, r.Kind, r.Events, r.Status, res)
	}
	if !asJSON {
		tw.Flush()
		fmt.Fprintf(a.stdout, "%d of %d streams verified\n", len(rep.Journals)-bad, len(rep.Journals))
	}
	if bad > 0 {
		return &exitError{1}
	}
	return nil
}

func (a *app) clientTokensCreate(cmd *cobra.Command, _ []string) error {
	fs := cmd.Flags()
	if err := only(cmd, "name", "scope", "agent"); err != nil {
		return err
	}
	fv := &flagValues{fs: fs}
	req := &api.CreateToken{Name: fv.str("name"), Scopes: fv.strs("scope"), Agents: fv.strs("agent")}
	if fv.err != nil {
		return fv.err
	}
	cl, err := a.apiClient()
	if err != nil {
		return err
	}
	tok, err := cl.CreateToken(cmd.Context(), req)
	if err != nil {
		return err
	}
	printNewToken(a, tok)
	return nil
}

func (a *app) clientTokensList(cmd *cobra.Command, _ []string) error {
	cl, err := a.apiClient()
	if err != nil {
		return err
	}
	toks, err := cl.Tokens(cmd.Context())
	if err != nil {
		return err
	}
	return printTokens(a, toks)
}

func (a *app) clientTokensRevoke(cmd *cobra.Command, args []string) error {
	if err := only(cmd); err != nil {
		return err
	}
	cl, err := a.apiClient()
	if err != nil {
		return err
	}
	if _, err := cl.RevokeToken(cmd.Context(), args[0]); err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "revoked token %s\n", args[0])
	return nil
}
