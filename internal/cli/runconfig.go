package cli

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/keel-run/keel/internal/assemble"
	"github.com/keel-run/keel/internal/config"
	"github.com/keel-run/keel/internal/tui"
	"github.com/keel-run/keel/redact"
	"github.com/keel-run/keel/tool"
)

// Settings of keel run and keel chat come from three layers (see
// config.Layer): the user's config.toml, the project's and the command
// line.

// Where a setting came from.
const (
	fromDefault = "default"
	fromFlag    = "command line"
)

// runSettings is what the layers set: the sources of each flag given a
// value, and the project file read (nil: none).
type runSettings struct {
	source  map[string]string
	project *config.Config
	// untrusted lists what the project file sets that needs trust when
	// it is not trusted as it is (keel run then refuses the file).
	untrusted []string
}

// runDefaults applies the config files' defaults to the flags of a
// keel run (or chat) command whose command line is parsed: the user's
// file, then the project file of the workspace the flags now name.
func (a *app) runDefaults(cmd *cobra.Command, f *runFlags) (*runSettings, error) {
	fl := cmd.Flags()
	rs := &runSettings{source: map[string]string{}}
	given := map[string]bool{}
	fl.Visit(func(f *pflag.Flag) { given[f.Name] = true })
	if err := checkpointsGiven(fl, given); err != nil {
		return nil, err
	}
	for name := range given {
		rs.source[name] = fromFlag
	}
	if a.cfg != nil {
		l, err := config.NewLayer(a.cfg, filepath.Dir(a.cfg.Path), false)
		if err != nil {
			return nil, &usageError{err}
		}
		if l != nil {
			if err := l.Apply(fl, given, rs.source); err != nil {
				return nil, &usageError{err}
			}
		}
	}
	ws, err := filepath.Abs(f.workspace)
	if err != nil {
		return nil, usagef("--workspace: %v", err)
	}
	proj, err := config.LoadProject(ws)
	if err != nil {
		return nil, &usageError{err}
	}
	rs.project = proj
	l, err := config.NewLayer(proj, ws, true)
	if err != nil {
		return nil, &usageError{err}
	}
	if l != nil {
		if rs.untrusted, err = config.Untrusted(a.home, proj, l); err != nil {
			return nil, &usageError{err}
		}
		// keel config show shows an untrusted file, marked as such.
		if len(rs.untrusted) > 0 && cmd.Name() != "show" {
			return nil, untrustedError(proj, rs.untrusted)
		}
	}
	if l != nil {
		if err := l.Apply(fl, given, rs.source); err != nil {
			return nil, &usageError{err}
		}
	}
	return rs, nil
}

// configCmd is keel config.
func (a *app) configCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "config", Short: "Show Keel's settings and where each comes from"}
	show, f := a.runCommand()
	show.Use = "show [keel run flags]"
	show.Short = "Print the settings keel run would use here, and where each came from"
	show.Long = `Show prints every setting of keel run as a run started now would take it:
the built-in default, ~/.keel/config.toml ([run] and the top-level model
and sandbox), the project file .keel/config.toml of the workspace
(--workspace, default the current directory), or the command line. Give
any flags of keel run to see their effect. The MCP servers every run
offers are listed with the file that names them.`
	show.Args = cobra.NoArgs
	var asJSON bool
	show.Flags().BoolVar(&asJSON, "config-json", false, "JSON lines: name, value, source")
	show.RunE = func(c *cobra.Command, _ []string) error {
		rs, err := a.runDefaults(c, f)
		if err != nil {
			return err
		}
		return a.printSettings(c.Flags(), rs, asJSON)
	}
	cmd.AddCommand(show)
	var trustWS string
	trust := &cobra.Command{
		Use:   "trust",
		Short: "Trust the project file .keel/config.toml of a workspace as it is now",
		Long: `A project file (.keel/config.toml, committed to a repository) that chooses
the model, the policy, allowed hosts or MCP servers can loosen what a run may
do or send your API key elsewhere, so keel run refuses it until you trust it:
read it (keel config show lists what it sets), then run keel config trust.
The trust is for the file's exact content; a change asks again.

It also trusts, as they are now, the files of the workspace Keel last
started code from outside the gate (what a setup script runs, a stdio MCP
server's script and modules): a run's setup does not run, and a new run
does not start such a server before a person approves, when a run changed
those files since (docs/security.md).`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			ws, err := filepath.Abs(trustWS)
			if err != nil {
				return usagef("--workspace: %v", err)
			}
			// The files Keel last started code from in the workspace (a
			// setup script, a stdio MCP server): as they are now, so that
			// the next run's setup and servers start with them.
			code, err := trustCode(a.home, ws)
			if err != nil {
				return err
			}
			if code != nil {
				fmt.Fprintf(a.stderr, "keel: trusted what setup scripts and MCP servers run from %s as it is now%s\n", ws, strings.Join(code, ", "))
			}
			p := filepath.Join(ws, filepath.FromSlash(config.ProjectFile))
			// The project file and the agent definitions (.keel/agents,
			// docs/teams.md), each for its content now.
			files, _ := filepath.Glob(filepath.Join(ws, ".keel", "agents", "*.md"))
			if _, err := os.Stat(p); err == nil || len(files) == 0 && code == nil {
				files = append([]string{p}, files...)
			}
			for _, p := range files {
				b, err := os.ReadFile(p)
				if err != nil {
					return usagef("no project file to trust: %v", err)
				}
				if err := config.Trust(a.home, p, b); err != nil {
					return err
				}
				fmt.Fprintf(a.stderr, "keel: trusted %s (sha256 %x)\n", p, sha256.Sum256(b))
			}
			return nil
		},
	}
	trust.Flags().StringVar(&trustWS, "workspace", ".", "the workspace whose .keel/config.toml to trust")
	cmd.AddCommand(trust)
	return cmd
}

// trustCode records the files Keel last started code from in the
// workspace ws as they are now, and returns what changed since ("" for
// none), nil when Keel never started code from it.
func trustCode(home, ws string) ([]string, error) {
	w, err := tool.NewWorkspace(ws, "", nil)
	if err != nil {
		return nil, nil // not a directory: no code started from it
	}
	defer w.Close()
	st := assemble.CodeFiles(home, w.Root())
	if _, err := os.Stat(st.File); err != nil {
		return nil, nil
	}
	changed, err := st.Trust(w)
	if err != nil {
		return nil, err
	}
	if len(changed) == 0 {
		return []string{" (unchanged)"}, nil
	}
	return append([]string{": " + changed[0]}, changed[1:]...), nil
}

// untrustedError is keel run's refusal of the project file proj, which
// sets the trusting keys sets and is not trusted.
func untrustedError(proj *config.Config, sets []string) error {
	return usagef("the project file %s sets %s, which can loosen what a run may do or send your API key elsewhere, and you have not trusted it as it is: read it (keel config show --workspace %s), then trust it: keel config trust --workspace %s",
		proj.Path, strings.Join(sets, ", "), proj.Workspace(), proj.Workspace())
}

// notRunSetting are flags of keel config show that are not settings of
// a run: its own, the global ones, and the key that never comes from a
// file.
var notRunSetting = map[string]bool{"config-json": true, "help": true, "api-key": true, "api-key-env": true, "db": true, "create-db": true, "server": true, "token": true}

// printSettings prints each run flag's value and source, then the MCP
// servers; passwords and likely secrets in values are hidden (package
// redact).
func (a *app) printSettings(fl *pflag.FlagSet, rs *runSettings, asJSON bool) error {
	var rows []tui.Setting
	untrusted := func(src string) bool {
		return len(rs.untrusted) > 0 && rs.project != nil && src == rs.project.Path
	}
	fl.VisitAll(func(f *pflag.Flag) {
		if f.Hidden || notRunSetting[f.Name] {
			return
		}
		src := rs.source[f.Name]
		if src == "" {
			src = fromDefault
		}
		v := f.Value.String()
		if sv, ok := f.Value.(pflag.SliceValue); ok {
			items := sv.GetSlice()
			if f.Name == "sql" {
				items = slices.Clone(items)
				for i, it := range items {
					if name, dsn, ok := strings.Cut(it, "="); ok {
						items[i] = name + "=" + redact.DSN(dsn)
					}
				}
			}
			v = strings.Join(items, ", ")
		}
		rows = append(rows, tui.Setting{Name: f.Name, Value: redact.Text(v), Source: src, Untrusted: untrusted(src)})
	})
	for _, s := range config.MCPSources(a.cfg, rs.project) {
		rows = append(rows, tui.Setting{Name: "mcp." + s.Name, Value: redact.Text(redact.URL(s.What)), Source: s.File, Untrusted: untrusted(s.File)})
	}
	if len(rs.untrusted) > 0 {
		fmt.Fprintf(a.stderr, "keel: the project file %s is NOT TRUSTED: it sets %s, so keel run refuses to start in this workspace until you trust the file as it is: keel config trust --workspace %s\n",
			rs.project.Path, strings.Join(rs.untrusted, ", "), rs.project.Workspace())
	}
	return tui.Settings(a.stdout, rows, asJSON)
}
