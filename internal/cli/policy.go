package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/identity"
	"github.com/keel-run/keel/internal/tui"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/service"
)

// gateFlags are the flags of `keel run` that configure the gate.
type gateFlags struct {
	policy          string
	agent           string
	onBehalfOf      string
	approvalTimeout string
	approvalDefault string
	wait, noWait    bool
	// ifLastSeq, when set, continues a run only if its newest event is
	// still this one (keel approve; see agent.ExecParams.IfLastSeq).
	ifLastSeq int64
}

func (g *gateFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&g.policy, "policy", "", "policy file deciding every tool call (TOML or .cedar; default: Keel's laptop-safe policy, see 'keel policy default'), or a built-in one: default, demo (asks before each edit)")
	fl.StringVar(&g.agent, "agent", identity.LocalAgent, "agent (principal) the run executes as (see 'keel agents')")
	fl.StringVar(&g.onBehalfOf, "on-behalf-of", "", "user an assistant agent acts for")
	fl.StringVar(&g.approvalTimeout, "approval-timeout", "", "how long an approval may wait before --approval-default applies, e.g. 30m (default: the policy file's, else forever)")
	fl.StringVar(&g.approvalDefault, "approval-default", "", "decision at the approval timeout: deny (default) or allow")
	registerWaitFlags(fl, g)
}

// registerWaitFlags registers --wait and --no-wait.
func registerWaitFlags(fl *pflag.FlagSet, g *gateFlags) {
	fl.BoolVar(&g.wait, "wait", false, "on an approval, keep running and wait for a decision by 'keel approve' or 'keel deny' from any process (default when stdin is a terminal)")
	fl.BoolVar(&g.noWait, "no-wait", false, "on an approval, pause the run and exit 3 (default when stdin is not a terminal)")
}

// waiting reports whether an execution waits for approvals: --wait,
// --no-wait, else whether a person is at the terminal, so that an
// unattended run never hangs on a question nobody sees.
func (g *gateFlags) waiting() bool { return g.waitingOn(os.Stdin) }

// waitingOn is waiting with stdin as the standard input: only a real
// terminal (TCGETS answers) means a person may be there; /dev/null, a
// pipe or a file (cron, systemd, nohup, CI) do not.
func (g *gateFlags) waitingOn(stdin *os.File) bool {
	switch {
	case g.noWait:
		return false
	case g.wait:
		return true
	}
	return tui.IsTerminal(stdin)
}

// loadPolicy compiles the policy named by flag: "" or "default" is the
// built-in default; anything else is a file, whose own test cases must
// pass.
func loadPolicy(flag string) (*policy.Engine, error) {
	if e := builtinPolicy(flag); e != nil {
		return e, nil
	}
	abs, err := filepath.Abs(flag)
	if err != nil {
		return nil, usagef("--policy: %v", err)
	}
	b, err := readPolicyFile(flag)
	if err != nil {
		return nil, usagef("--policy: %v", err)
	}
	e, err := policy.Parse(abs, b)
	if err != nil {
		return nil, &usageError{err}
	}
	if err := e.CheckCases(context.Background()); err != nil {
		return nil, usagef("--policy %s (run `keel policy test %s`): %v", flag, flag, err)
	}
	return e, nil
}

// builtinPolicy is the policy a --policy value names that is no file,
// as the API and the web UI name them: "" and "default" Keel's default,
// "demo" keel demo's (it asks before each edit); nil for a file.
func builtinPolicy(flag string) *policy.Engine {
	switch flag {
	case "", "default":
		return policy.Default()
	case "demo":
		return service.DemoPolicy()
	}
	return nil
}

// engine returns the run's policy (--policy) and its approval settings
// with --approval-timeout and --approval-default applied.
func (g *gateFlags) engine() (*policy.Engine, *agent.ApprovalSettings, error) {
	e, err := loadPolicy(g.policy)
	if err != nil {
		return nil, nil, err
	}
	set := &agent.ApprovalSettings{Timeout: agent.Duration(e.Approval().Timeout), Default: e.Approval().Default}
	if g.approvalTimeout != "" {
		d, err := parseDuration(g.approvalTimeout)
		if err != nil {
			return nil, nil, usagef("--approval-timeout %q: %v", g.approvalTimeout, err)
		}
		set.Timeout = agent.Duration(d)
	}
	switch policy.Effect(g.approvalDefault) {
	case "":
	case policy.Allow, policy.Deny:
		set.Default = policy.Effect(g.approvalDefault)
	default:
		return nil, nil, usagef("--approval-default %q: want deny or allow", g.approvalDefault)
	}
	return e, set, nil
}

func (a *app) policyCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "policy", Short: "Check calls against a policy, run a policy's tests, print the default policy"}
	cmd.AddCommand(a.policyCheckCmd(), a.policyTestCmd(), a.policyDefaultCmd())
	return cmd
}

func (a *app) policyDefaultCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "default",
		Short: "Print Keel's default policy (TOML with Cedar rules and test cases) to start your own",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := a.stdout.Write(policy.DefaultSource())
			return err
		},
	}
}

func (a *app) policyCheckCmd() *cobra.Command {
	var file, principal, obo, tool, args, mount, sandbox, workspace, untrusted string
	var network, paths, holds []string
	var asJSON, unattended bool
	cmd := &cobra.Command{
		Use:   "check --tool TOOL --args JSON",
		Short: "Decide one tool call offline and show every part's decision",
		Long: `Check decides one call by a policy (default: Keel's; with --server, the team
server's) without running anything, and prints the decision of the call and
of each part: the simple commands of a bash command line, a file tool's paths.

  keel policy check --tool bash --args '{"command":"ls && rm -rf /"}'
  keel policy check --policy team.toml --principal ci-bot --tool bash --command 'git push origin main' --allow-host github.com
  keel policy check --holds-secret API_TOKEN --allow-host api.example.com --command 'curl -s https://api.example.com/x'

Exit status: 0 allow, 1 deny, 4 ask.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.Flags().Changed("command") {
				if args != "" {
					return usagef("give --command or --args, not both")
				}
				b, _ := json.Marshal(map[string]string{"command": cmd.Flag("command").Value.String()})
				args = string(b)
			}
			if args == "" {
				return usagef("give the call's arguments with --args JSON (or --command for bash)")
			}
			if err := json.Unmarshal([]byte(args), new(map[string]any)); err != nil {
				return usagef("--args: not a JSON object: %v", err)
			}
			req := &api.PolicyCheck{Tool: tool, Arguments: json.RawMessage(args), Paths: paths, Agent: principal, OnBehalfOf: obo, Network: network,
				Sandbox: sandbox, MountPath: mount, Workspace: workspace, SecretEnv: holds, Untrusted: untrusted, Unattended: unattended}
			d, err := a.decideCall(cmd, file, req)
			if err != nil {
				return err
			}
			code, err := tui.Decision(a.stdout, d, asJSON)
			return cmp.Or(err, error(&exitError{code}))
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&file, "policy", "", "policy file (default: Keel's default policy)")
	fl.StringVar(&principal, "principal", identity.LocalAgent, "agent making the call")
	fl.StringVar(&obo, "on-behalf-of", "", "user the agent acts for")
	fl.StringVar(&tool, "tool", "bash", "tool name")
	fl.StringVar(&args, "args", "", "the call's arguments, a JSON object")
	fl.String("command", "", "shorthand for --tool bash --args '{\"command\": ...}'")
	fl.StringArrayVar(&paths, "path", nil, "resolved workspace path a file tool touches (repeatable; default: the args' path)")
	fl.StringArrayVar(&network, "allow-host", nil, "the run's network allowlist (repeatable)")
	fl.StringVar(&sandbox, "sandbox", "", "the run's sandbox backend (default linux; with --server, the server's)")
	fl.StringVar(&mount, "mount-path", "/workspace", "the run's mount path")
	fl.StringVar(&workspace, "workspace", "", "the run's workspace on the host: file tools' paths are resolved in it (links followed; without it, by their text), and with --sandbox none commands' paths too")
	fl.StringArrayVar(&holds, "holds-secret", nil, "a secret variable the run's sandbox holds, as with keel run --secret-env (repeatable)")
	fl.StringVar(&untrusted, "untrusted", "", "what brought untrusted input into the run before this call (for example \"fetch_url result of call 1\")")
	fl.BoolVar(&unattended, "unattended", false, "the run is unattended (started by a schedule or trigger)")
	fl.BoolVar(&asJSON, "json", false, "print the decision as JSON")
	return cmd
}

// decideCall decides req by the policy --policy names (Keel's default
// if none), or with --server by the server's policy.
func (a *app) decideCall(cmd *cobra.Command, file string, req *api.PolicyCheck) (*api.PolicyDecision, error) {
	if a.serverURL() == "" {
		e, err := loadPolicyNoTests(file)
		if err != nil {
			return nil, err
		}
		var dir *identity.Directory
		if cmp.Or(req.Agent, identity.LocalAgent) != identity.LocalAgent || req.OnBehalfOf != "" {
			// Another agent, or someone to act for: the journal's
			// directory says whether a run could.
			store, err := a.openStore(cmd.Context())
			if err != nil {
				return nil, err
			}
			defer store.Close()
			dir = identity.NewDirectory(store, nil)
		}
		if err := service.CheckCall(cmd.Context(), dir, req); err != nil {
			return nil, err
		}
		return service.DecideCall(cmd.Context(), e, req)
	}
	if file != "" {
		return nil, usagef("--policy names a policy on this machine; with --server, keel policy check asks the server's policy: drop --server (or KEEL_SERVER) to check the file")
	}
	cl, err := a.apiClient()
	if err != nil {
		return nil, err
	}
	return cl.CheckPolicy(cmd.Context(), req)
}

// loadPolicyNoTests compiles a policy without running its test cases (for
// checking a policy that is being written).
func loadPolicyNoTests(flag string) (*policy.Engine, error) {
	if e := builtinPolicy(flag); e != nil {
		return e, nil
	}
	b, err := readPolicyFile(flag)
	if err != nil {
		return nil, usagef("--policy: %v", err)
	}
	e, err := policy.Parse(flag, b)
	if err != nil {
		return nil, &usageError{err}
	}
	return e, nil
}

func (a *app) policyTestCmd() *cobra.Command {
	var verbose bool
	cmd := &cobra.Command{
		Use:   "test FILE...",
		Short: "Run the test cases a policy file carries ([[test]] entries)",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, files []string) error {
			var t tui.PolicyTests
			for _, f := range files {
				e, err := loadPolicyNoTests(f)
				if err != nil {
					// The file is an argument here, not --policy.
					var ue *usageError
					if errors.As(err, &ue) {
						return usagef("%s", strings.TrimPrefix(ue.Error(), "--policy: "))
					}
					return err
				}
				// A policy's own cases can all pass (or be none) while a
				// rule is broken or nothing can run: say so, and fail.
				t.File(a.stdout, f, e.Lint(cmd.Context()), e.Test(cmd.Context()), verbose)
			}
			if !t.Summary(a.stdout) {
				return &exitError{1}
			}
			return nil
		},
	}
	cmd.Flags().BoolVarP(&verbose, "verbose", "v", false, "list passing cases too")
	return cmd
}
