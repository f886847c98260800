// Package cli is the keel command: it reads flags, files and the
// environment, wires the library packages together and prints results.
// No library package reads flags or environment; this one does.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/config"
	"github.com/keel-run/keel/internal/knobs"
	"github.com/keel-run/keel/internal/tui"
	"github.com/keel-run/keel/journal"
	_ "github.com/keel-run/keel/journal/sqlite" // registers the sqlite backend
	"github.com/keel-run/keel/redact"
	"github.com/keel-run/keel/telemetry"
)

// Version is the keel version, set at build time with
// -ldflags "-X github.com/keel-run/keel/internal/cli.Version=v0.1.0".
var Version = "dev"

// app holds what every command shares.
type app struct {
	stdout, stderr io.Writer
	getenv         func(string) string
	db             string // --db flag
	createDB       bool   // --create-db flag (dbpath.go)
	cmdPath        string // the command being run, "keel runs list"
	server, token  string // --server and --token flags (client.go)
	home           string
	cfg            *config.Config
	// metrics, set by keel serve, counts what the server's runs do.
	metrics *telemetry.Metrics
	// term is stderr unescaped when it is a terminal, else nil.
	term io.Writer
	// project is the workspace's .keel/config.toml of a keel run (nil:
	// none), whose MCP servers join the user's.
	project *config.Config
	// prompt is the person at the terminal (keel chat, inline
	// approvals): their lines and their Ctrl-C in a conversation;
	// usageSaid whether the estimated-usage note was said to them.
	prompt    tui.Prompt
	usageSaid bool
	// missingRuns are the RUN arguments that name no run (runref.go).
	missingRuns []string
}

// exitError carries a process exit code through cobra.
type exitError struct{ code int }

func (e *exitError) Error() string { return fmt.Sprintf("exit %d", e.code) }

// Main runs the keel command line with args (without the program name)
// and returns the process exit code: 0 success, 1 a failed command or
// run, 2 a usage error, 3 a run that paused, 130 a run (or the command)
// canceled by Ctrl-C, SIGTERM or SIGHUP.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	// Everything on stderr is for people, and some of it comes from the
	// model, tools or the journal (errors quote commands): escape it all.
	a := &app{stdout: stdout, stderr: tui.Esc(stderr), getenv: os.Getenv}
	if tui.IsTerminal(stderr) {
		// keel run's status block draws on it (internal/tui); its text is
		// escaped there.
		a.term = stderr
	}
	stderr = a.stderr
	a.prompt.Err = a.stderr
	root := a.rootCmd()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	ctx, cancel := tui.SignalContext(ctx, &tui.SignalOptions{Stderr: stderr, Take: a.prompt.Take, Restore: a.prompt.Restore})
	defer cancel()
	defer knobs.Profile(a.getenv)()
	err := root.ExecuteContext(ctx)
	var ee *exitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.code
	case stdoutClosed(err, stdout):
		// keel runs list | head -1: the reader has all it wanted.
		return 0
	case errors.Is(context.Cause(ctx), agent.ErrUserCanceled) && errors.Is(err, context.Canceled):
		// The error is the signal's stop itself, before a run could
		// record it (the sandbox or an MCP server starting): canceled,
		// not failed.
		fmt.Fprintln(stderr, "keel: canceled")
		return 130
	default:
		text, code := a.failure(err)
		fmt.Fprintln(stderr, "keel:", text)
		return code
	}
}

// stdoutClosed reports whether err is a write to stdout that failed
// because its reader went away (EPIPE: keel runs list | head). SIGPIPE
// is caught (tui.SignalContext), so such writes fail instead of killing the
// process; the command then ends quietly, as one killed by SIGPIPE would.
func stdoutClosed(err error, stdout io.Writer) bool {
	f, ok := stdout.(*os.File)
	if !ok || !errors.Is(err, syscall.EPIPE) {
		return false
	}
	var pe *fs.PathError
	return errors.As(err, &pe) && pe.Op == "write" && pe.Path == f.Name()
}

// usageError marks a bad command line.
type usageError struct{ error }

func usagef(format string, args ...any) error { return &usageError{fmt.Errorf(format, args...)} }

func (a *app) rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "keel",
		Short: "Keel runs agents: a model, tools in a sandbox, and a journal of everything",
		Long: `Keel is an agent runtime. A run drives a model through tools (shell, files,
search, fetch) executed in an isolated sandbox on a workspace directory, and
journals every model call, tool call and decision in an append-only,
hash-chained journal (SQLite by default), so a run survives crashes and can
be resumed, inspected and audited.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       versionString(),
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			if err := finiteFlags(cmd); err != nil {
				return err
			}
			a.cmdPath = cmd.CommandPath()
			if f := cmd.Flag("db"); f != nil && f.Changed && a.db == "" {
				// --db "$UNSET" must not fall back to the default journal.
				return usagef("--db is empty: name a journal (a path or postgres://...), or leave the flag out for the default")
			}
			if f := cmd.Flag("db"); f != nil && f.Changed && a.serverURL() != "" && !slices.Contains(localOnly, a.cmdPath) {
				return usagef("with --server (or KEEL_SERVER), --db cannot be used: the server's journal is the one read; drop --server to use %s", redact.DSN(a.db))
			}
			if part := redact.URLCredential(a.serverURL()); part != "" {
				return usagef("the server URL %s (--server or KEEL_SERVER) carries a credential (%s): give it without; Keel authenticates to a team server with an API token (--token or KEEL_TOKEN)", redact.URL(a.serverURL()), part)
			}
			if err := a.init(); err != nil {
				return err
			}
			return a.resolveRunArgs(cmd, args)
		},
	}
	root.PersistentFlags().StringVar(&a.db, "db", "", "journal database (default ~/.keel/keel.db, or db in config.toml)")
	root.PersistentFlags().BoolVar(&a.createDB, "create-db", false, "create the --db journal if it does not exist (commands that add a run, an agent or a token create it anyway, and say so)")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{err} })
	root.AddCommand(a.runCmd(), a.chatCmd(), a.configCmd(), a.runsCmd(), a.demoCmd(), a.modelCmd(), a.sandboxCmd())
	root.AddCommand(a.agentsCmd(), a.policyCmd(), a.approvalsCmd(), a.approveCmd(), a.denyCmd(), a.auditCmd(), a.inputsCmd())
	root.PersistentFlags().StringVar(&a.server, "server", "", "talk to this team server (keel serve) instead of the local journal, e.g. http://127.0.0.1:8420 (default $KEEL_SERVER)")
	root.PersistentFlags().StringVar(&a.token, "token", "", "API token for --server (default $KEEL_TOKEN, else the one keel serve saved in $KEEL_HOME/server-token)")
	root.AddCommand(a.serveCmd(), a.tokensCmd(), a.mcpCmd(), a.authCmd(), a.costCmd())
	root.AddCommand(a.workerCmd(), a.memoryCmd(), a.skillsCmd())
	root.AddCommand(a.schedulesCmd(), a.triggersCmd(), a.schedulerCmd(), a.evalCmd(), a.versionCmd())
	a.clientMode(root)
	plainUsage(root)
	unknownSubcommands(root)
	return root
}

// unknownSubcommands makes every command group (a command with
// subcommands and nothing to run of its own) refuse an unknown
// subcommand with a usage error (exit 2), instead of cobra's help and
// exit 0, so a script's typo (`keel runs lsit`) does not pass; and a
// wrong number of arguments to any command a usage error too.
func unknownSubcommands(c *cobra.Command) {
	for _, sub := range c.Commands() {
		unknownSubcommands(sub)
	}
	if args := c.Args; args != nil {
		// A wrong number of arguments is a bad command line (exit 2),
		// like a bad flag.
		c.Args = func(cmd *cobra.Command, a []string) error {
			if err := args(cmd, a); err != nil {
				return &usageError{err}
			}
			return nil
		}
	}
	if c.HasParent() && c.HasSubCommands() && c.Run == nil && c.RunE == nil {
		c.Args = cobra.ArbitraryArgs
		c.RunE = func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef("unknown command %q for %q (see %s --help)", args[0], cmd.CommandPath(), cmd.CommandPath())
			}
			return cmd.Help()
		}
	}
}

// finiteFlags refuses NaN and infinite values in every floating-point flag
// of cmd (strconv accepts "NaN", "Inf" and "1e999"): no limit, share or
// threshold means anything as NaN, and an infinite one is "no limit"
// spelled in a way the checks after it do not expect.
func finiteFlags(cmd *cobra.Command) error {
	var bad error
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if bad != nil || !strings.HasPrefix(f.Value.Type(), "float") {
			return
		}
		v, err := strconv.ParseFloat(f.Value.String(), 64)
		if err == nil && (math.IsNaN(v) || math.IsInf(v, 0)) {
			bad = usagef("--%s %s: want a finite number", f.Name, f.Value.String())
		}
	})
	return bad
}

// plainUsage replaces backquotes in flag help texts: pflag takes the first
// backquoted word of a usage string as the flag's value name and removes
// it from the text ("see `keel agents`" printed as "--agent keel agents
// ... see"), so quoted commands would be swallowed.
func plainUsage(c *cobra.Command) {
	fix := func(f *pflag.Flag) {
		if strings.Contains(f.Usage, "`") {
			f.Usage = strings.ReplaceAll(strings.ReplaceAll(f.Usage, "```", ""), "`", "'")
		}
	}
	c.Flags().VisitAll(fix)
	c.PersistentFlags().VisitAll(fix)
	for _, sub := range c.Commands() {
		plainUsage(sub)
	}
}

func (a *app) init() error {
	home, err := config.Home(a.getenv)
	if err != nil {
		return err
	}
	a.home = home
	cfg, err := config.Load(home)
	if err != nil {
		// A config file that does not parse or names an unknown key is
		// a configuration error, as a bad flag is: exit 2, nothing ran.
		return &usageError{err}
	}
	a.cfg = cfg
	return nil
}

// keelCmd is how hints printed for the user start a command on the same
// journal: "keel", or "keel --db PATH" when --db named it, so a pasted
// hint does not open (or create) the default journal instead. A
// password in PATH is left out: the pasted hint takes it from PGPASSWORD
// or ~/.pgpass.
func (a *app) keelCmd() string {
	if a.db != "" {
		return "keel --db " + tui.ShellWord(redact.DSN(a.db))
	}
	return "keel"
}

func (a *app) dbPath() string {
	switch {
	case a.db != "":
		return a.db
	case a.cfg != nil && a.cfg.DB != "":
		return a.cfg.DB
	}
	return filepath.Join(a.home, "keel.db")
}

// openStore opens the journal named by --db; a missing one is created
// (with its directory) only as checkJournalPath allows.
func (a *app) openStore(ctx context.Context) (journal.Store, error) {
	p := a.dbPath()
	// A plain path (not a DSN such as sqlite:///x?sync=normal or
	// postgres://...) must exist or be one Keel may create.
	if !strings.Contains(p, ":") {
		create, err := a.checkJournalPath(p)
		if err != nil {
			return nil, err
		}
		if dir := filepath.Dir(p); create && dir != "" {
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return nil, fmt.Errorf("journal directory: %w", err)
			}
		}
	}
	a.warnTornWAL(p)
	s, err := journal.Open(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("open journal %s: %w", redact.DSN(p), err)
	}
	k, err := knobs.Parse(a.getenv("KEEL_DEBUG"))
	if err != nil {
		s.Close()
		return nil, err
	}
	return k.Store(s), nil
}

// withStore opens the journal (see openStore), calls fn with it and
// closes it; it returns fn's error, or the error of opening.
func (a *app) withStore(ctx context.Context, fn func(journal.Store) error) error {
	store, err := a.openStore(ctx)
	if err != nil {
		return err
	}
	defer store.Close()
	return fn(store)
}
