package cli

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/client"
	"github.com/keel-run/keel/internal/demo"
	"github.com/keel-run/keel/internal/serve"
	"github.com/keel-run/keel/internal/tui"
	"github.com/keel-run/keel/journal"
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
		st, err := serve.ReadTokens(file)
		switch {
		case err != nil:
		case st.Lookup(srv) != nil:
			tok = st.Lookup(srv).Token
		case len(st.AllServers()) == 0:
			return nil, usagef("the token in %s is bound to no server (an older keel serve wrote it), so it is not sent to %s; pass it with --token or KEEL_TOKEN if that is its server", file, srv)
		default:
			return nil, usagef("the token saved in %s is for %s only, not %s; pass --token or set KEEL_TOKEN for this server", file, strings.Join(st.AllServers(), ", "), srv)
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
var localOnly = []string{"keel serve", "keel mcp call", "keel policy check", "keel policy default", "keel policy test",
	"keel model replay-task", "keel model serve-replay"}

// clientMode makes the commands that have a server form talk to the team
// server when one is named (--server or KEEL_SERVER), with the same
// output as their local form. The other commands stay local.
func (a *app) clientMode(root *cobra.Command) {
	impl := map[string]func(*cobra.Command, []string) error{
		"keel run":  a.clientRun,
		"keel demo": a.clientDemo,
		// keel auth: the server's vault.
		"keel auth connect": a.clientAuthConnect,
		"keel auth waits":   a.clientAuthWaits,
		"keel eval report":  a.clientEvalReport,
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
				return usagef("%s is not supported with --server (or KEEL_SERVER): it works on this machine (its journal, files or sandbox), not the server's; run it on the server's machine without --server", path)
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

// clientRunFlags are the flags of keel run that keel --server URL run
// sends with the run.
var clientRunFlags = []string{"model", "workspace", "mount-path", "env", "secret-env", "secret-for-host", "secret-in-body", "setup", "task-file", "system", "system-file", "json", "quiet",
	"max-steps", "max-tokens", "max-cost", "timeout", "max-tool-calls", "max-children", "max-depth", "label", "sandbox", "allow-host", "completion-marker", "policy", "agent", "on-behalf-of", "no-wait", "wait",
	"mcp", "sql", "openapi", "no-mcp", "checkpoints", "no-checkpoints", "no-memory", "no-skills", "propose-skills", "context-window", "team"}

func (a *app) clientRun(cmd *cobra.Command, args []string) error {
	fs := cmd.Flags()
	if err := only(cmd, clientRunFlags...); err != nil {
		return err
	}
	if err := a.clientRunDefaults(cmd); err != nil {
		return err
	}
	fv := &flagValues{fs: fs}
	f := &runFlags{taskFile: fv.str("task-file")}
	task, err := readTask(f, args)
	if err != nil {
		return err
	}
	req := &api.CreateRun{Task: task, Model: fv.str("model"), MountPath: fv.str("mount-path"), Env: fv.strs("env"), SecretEnv: fv.strs("secret-env"), Setup: fv.str("setup"),
		System: fv.str("system"), Sandbox: fv.str("sandbox"), Network: fv.strs("allow-host"), OnBehalfOf: fv.str("on-behalf-of")}
	if strings.TrimSpace(task) == "" && req.Model != "" && !strings.HasPrefix(req.Model, "replay:") {
		return usagef("no task: give TASK as an argument or --task-file") // as keel run says it, before the server's model
	}
	for _, e := range fv.strs("secret-for-host") {
		// NAME alone: the host the server's operator bound NAME to.
		name, host, ok := strings.Cut(e, "=")
		if name == "" || ok && host == "" {
			return usagef("--secret-for-host %q: want NAME=HOST or NAME (a variable the server offers and the host its operator bound it to)", e)
		}
		req.SecretHosts = append(req.SecretHosts, api.SecretHost{Name: name, Host: host, Body: slices.Contains(fv.strs("secret-in-body"), name)})
	}
	for _, n := range fv.strs("secret-in-body") {
		if !slices.ContainsFunc(req.SecretHosts, func(h api.SecretHost) bool { return h.Name == n }) {
			return usagef("--secret-in-body %s: want the NAME of a --secret-for-host NAME=HOST", n)
		}
	}
	// On a server, connectors are the server's or the agent's: the run
	// names which of them it offers.
	conn := &api.Connectors{MCP: fv.strs("mcp"), SQL: fv.strs("sql"), OpenAPI: fv.strs("openapi")}
	for _, n := range slices.Concat(conn.MCP, conn.SQL, conn.OpenAPI) {
		if strings.Contains(n, "=") {
			return usagef("keel run --server: --mcp, --sql and --openapi name the server's connectors (or the agent's): %q defines one (an admin gives an agent its own with keel agents create --mcp NAME=...)", n)
		}
	}
	if len(conn.MCP)+len(conn.SQL)+len(conn.OpenAPI) > 0 {
		req.Connectors = conn
	}
	req.NoConnectors = fv.boolean("no-mcp")
	req.NoMemory, req.NoSkills, req.ProposeSkills, req.Team = fv.boolean("no-memory"), fv.boolean("no-skills"), fv.boolean("propose-skills"), fv.boolean("team")
	req.NoCheckpoints = fv.boolean("no-checkpoints") || fs.Changed("checkpoints") && !fv.boolean("checkpoints")
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
		// Named as keel run --policy names it: refusals name the file.
		if req.PolicyFile, err = filepath.Abs(pf); err != nil {
			return usagef("--policy: %v", err)
		}
		req.Policy = string(b)
	}
	if fs.Changed("completion-marker") {
		m := fv.str("completion-marker")
		req.CompletionMarker = &m
	}
	// The limits as keel run would journal them: each flag's value, the
	// default when it was not given, and 0 for no limit (the server checks
	// and applies them as for a local run).
	maxSteps := fv.integer("max-steps")
	maxTokens, errT := fs.GetInt64("max-tokens")
	maxCost, errC := fs.GetFloat64("max-cost")
	timeout, errD := fs.GetDuration("timeout")
	fv.err = errors.Join(fv.err, errT, errC, errD)
	req.Limits = api.Limits{MaxSteps: &maxSteps, MaxTokens: &maxTokens, MaxCost: &maxCost, Timeout: timeout.String()}
	// The limits a local run leaves at 0 (no limit) unless given, and the
	// context window: sent only when given, checked as the API's are.
	for name, p := range map[string]**int{"max-tool-calls": &req.Limits.MaxToolCalls, "max-children": &req.Limits.MaxChildren, "max-depth": &req.Limits.MaxDepth, "context-window": &req.ContextWindow} {
		if fs.Changed(name) {
			v := fv.integer(name)
			*p = &v
		}
	}
	if req.Labels, err = parseLabels(fv.strs("label")); err != nil {
		return err
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
		// As keel run says it: a refused request is a usage error.
		return err
	}
	followErr := a.follow(ctx, cl, run.ID, &tui.FollowParams{From: 1, JSON: jsonOut, Quiet: quiet, NoWait: noWait})
	if !jsonOut && !quiet {
		// What the run changed, as keel run prints it at its end (also
		// when Ctrl-C ended the following).
		ctx, cancel := closingContext(ctx)
		defer cancel()
		r := &remote{Client: cl, a: a}
		events := func() ([]journal.Event, error) { return r.Events(ctx, run.ID) }
		if evs, err := events(); err == nil {
			if created, err := agent.Created(evs); err == nil {
				tui.EndDiff(ctx, a.stderr, r, run.ID, created, events, r.Keel())
			}
		}
	}
	return followErr
}

// clientRunDefaults applies the config files' [run] defaults (runDefaults)
// to the flags of keel --server URL run, as keel run does: those the
// server takes are sent with the run; of the others, it says that they
// are not.
func (a *app) clientRunDefaults(cmd *cobra.Command) error {
	ws, _ := cmd.Flags().GetString("workspace")
	rs, err := a.runDefaults(cmd, &runFlags{workspace: ws})
	if err != nil {
		return err
	}
	var notSent []string
	cmd.LocalNonPersistentFlags().VisitAll(func(f *pflag.Flag) {
		if src := rs.source[f.Name]; f.Changed && src != fromFlag && !slices.Contains(clientRunFlags, f.Name) {
			notSent = append(notSent, f.Name+" ("+src+")")
		}
	})
	if len(notSent) > 0 {
		fmt.Fprintf(a.stderr, "keel: with --server, these defaults of your config files are not sent: the server's own settings apply: %s\n", strings.Join(notSent, ", "))
	}
	return nil
}

func (a *app) clientDemo(cmd *cobra.Command, _ []string) error {
	if err := only(cmd, "wait", "no-wait"); err != nil {
		return err
	}
	// The server's demo asks before it edits: stop there, as keel run
	// does, unless a person can answer (see gateFlags.waiting).
	var g gateFlags
	g.wait, _ = cmd.Flags().GetBool("wait")
	g.noWait, _ = cmd.Flags().GetBool("no-wait")
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
	followErr := a.follow(ctx, cl, run.ID, &tui.FollowParams{From: 1, NoWait: !g.waiting()})
	var exit *exitError
	if followErr != nil && !errors.As(followErr, &exit) {
		return followErr
	}
	// What the run did, as the local demo prints it, also when Ctrl-C
	// ended the following.
	ctx, cancel := closingContext(ctx)
	defer cancel()
	if err := a.demoShow(ctx, &remote{Client: cl, a: a}, run.ID, "keel --server "+cl.URL()); err != nil {
		return err
	}
	return followErr
}

// follow prints run id's events from sequence number from on, as keel
// run prints an execution, until the run ends (tui.Follow over the
// client), and exits as keel run does.
func (a *app) follow(ctx context.Context, cl *client.Client, id string, fp *tui.FollowParams) error {
	fp.Stdout, fp.Stderr, fp.URL = a.stdout, a.stderr, cl.URL()
	if a.inline() {
		// At a terminal, the run's calls are asked as keel run asks a
		// local run's, and decided through the server.
		fp.Prompt = &a.prompt
	}
	code, err := tui.Follow(ctx, followed{cl}, id, fp)
	if err == nil && code != 0 {
		return &exitError{code}
	}
	return err
}

// followed is the team server as tui.Follow follows a run on it.
type followed struct{ cl *client.Client }

func (f followed) Decide(ctx context.Context, id, callID string, res *agent.ApprovalResolved) error {
	return (&remote{Client: f.cl}).Decide(ctx, id, callID, res)
}

func (f followed) ProposedEdit(ctx context.Context, id, callID string) (*api.ProposedEdit, error) {
	return f.cl.ProposedEdit(ctx, id, callID)
}

func (f followed) Events(ctx context.Context, id string, p *tui.EventsParams) iter.Seq2[journal.Event, error] {
	return f.cl.Events(ctx, id, &client.EventsParams{From: p.From, NoFollow: p.NoFollow, UntilStopped: p.UntilStopped, OnDisconnect: p.OnDisconnect, OnDelta: p.OnDelta, GiveUp: p.GiveUp})
}

func (f followed) Run(ctx context.Context, id string) (*api.Run, error) { return f.cl.Run(ctx, id) }

func (f followed) Cancel(ctx context.Context, id string) error {
	if _, err := f.cl.Cancel(ctx, id); err != nil && !client.IsCode(err, api.CodeRunCompleted) {
		return err
	}
	return nil
}
