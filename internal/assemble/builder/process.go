package builder

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/credential"
	"github.com/keel-run/keel/internal/assemble"
	"github.com/keel-run/keel/internal/config"
	"github.com/keel-run/keel/internal/skillhost"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/skill"
	"github.com/keel-run/keel/telemetry"
	"github.com/keel-run/keel/tool"
)

// Process is this process's configuration of runs, as the command line
// read it from its flags, config.toml and the environment: one value
// with explicit fields, from which every command that creates or
// executes runs (keel run, serve, worker, scheduler, eval, runs replay,
// mcp serve) takes its assembler ([Process.Assembler]), connectors,
// builder ([Process.Builder]) and runtime ([Process.Runtime]).
type Process struct {
	// Home is Keel's home (KEEL_HOME); Journal the journal's path or
	// DSN.
	Home, Journal string
	// Config is the user's config.toml (nil: none); Project the
	// workspace's .keel/config.toml of a keel run (nil: none), whose
	// MCP servers join the user's.
	Config, Project *config.Config
	// Getenv reads the environment; Notes receives the notes for the
	// person who started the command (stderr).
	Getenv func(string) string
	Notes  io.Writer
	// Version is Keel's version, named in exported spans.
	Version string
	// Metrics, if set, counts what the runs do (keel serve).
	Metrics *telemetry.Metrics
	// EgressRoots, if set, verify the hosts of runs' secrets for hosts
	// instead of the system's roots (tests).
	EgressRoots *x509.CertPool
	// OpenJournal opens the journal again (the MCP servers' pins, the
	// memory tools of a run); OpenVault opens a journal's credential
	// vault.
	OpenJournal func(context.Context) (journal.Store, error)
	OpenVault   func(journal.Store) (*credential.Vault, error)
}

// Assembler is the assembler of this process's runs.
func (p *Process) Assembler() *assemble.Assembler {
	return &assemble.Assembler{Home: p.Home, Journal: p.Journal, Config: p.Config, Getenv: p.Getenv, Notes: p.Notes,
		Metrics: p.Metrics, Tracing: p.Tracing(), OpenJournal: p.OpenJournal, OpenVault: p.OpenVault, MoreTools: p.moreTools,
		EgressRoots: p.EgressRoots}
}

// Connectors are the connectors of this process's configuration (the
// user's config.toml and the project's).
func (p *Process) Connectors() *Connectors {
	return &Connectors{Config: p.Config, Project: p.Project, ConfigFile: filepath.Join(p.Home, "config.toml")}
}

// SkillHost is Keel's skills on this machine, with store's agent keys
// (nil: none).
func (p *Process) SkillHost(store journal.Store) *skillhost.Host {
	return &skillhost.Host{Home: p.Home, Store: store, OpenVault: p.OpenVault}
}

// Builder is the service's builder of runs created in store (the
// server's, a scheduler's, an evaluation's); logger receives what a
// caller is not shown (nil: discarded).
func (p *Process) Builder(store journal.Store, logger *slog.Logger) *Builder {
	return &Builder{Assembler: p.Assembler(), Store: store, Logger: logger, Params: &assemble.Params{}, Connectors: p.Connectors(),
		Skills:         func(st journal.Store, ws string) *skill.Library { return p.SkillHost(st).Library(ws) },
		PromotionTools: p.SkillHost(nil).AddPromotionTools}
}

// moreTools adds a run's memory and skill tools (assemble.Assembler's
// MoreTools): memory_search and memory_write when it was offered
// memory, use_skill when it was offered skills, propose_skill and
// promote_skill when it proposes skills.
func (p *Process) moreTools(ctx context.Context, c *agent.RunCreated, r *tool.Registry, ps *assemble.Params) (func() error, error) {
	propose := ps != nil && ps.ProposeSkills || slices.ContainsFunc(c.Tools, func(t agent.ToolInfo) bool { return t.Name == skillhost.ProposeTool })
	skillhost.AddUseSkill(r, c)
	if c.Recall == nil {
		return nil, nil
	}
	st, err := p.OpenJournal(ctx)
	if err != nil {
		return nil, err
	}
	AddMemoryTools(r, c, st)
	if propose {
		p.SkillHost(st).AddPromotionTools(r, c)
	}
	return st.Close, nil
}

// TelemetryConfig is the trace export's configuration (config.toml and
// the OTEL_* environment).
func (p *Process) TelemetryConfig() (*telemetry.Config, error) {
	cfg := p.Config
	if cfg == nil {
		cfg = &config.Config{}
	}
	tc, err := cfg.TelemetryConfig(p.Getenv)
	if err != nil {
		return nil, err
	}
	tc.Version = p.Version
	return tc, nil
}

// Tracing reports whether trace export is configured: then model
// requests, shell commands and HTTP calls carry the run's W3C trace
// context.
func (p *Process) Tracing() bool {
	tc, err := p.TelemetryConfig()
	return err == nil && tc.Enabled()
}

// TelemetryFlush bounds how long a command waits, when it ends, for its
// last spans to reach the collector.
const TelemetryFlush = 3 * time.Second

// Runtime returns a runtime on store (with opts, nil: none) whose
// appends are exported as spans when tracing is configured, and counted
// by p's Metrics; live is that export (nil: none). Call flush before
// closing the store: it waits for the export (at most TelemetryFlush)
// and says on Notes what was not exported.
func (p *Process) Runtime(ctx context.Context, store journal.Store, opts *agent.RuntimeOptions) (rt *agent.Runtime, live *telemetry.Live, flush func(), err error) {
	tc, err := p.TelemetryConfig()
	if err != nil {
		return nil, nil, nil, err
	}
	var exp *telemetry.Exporter
	if tc.Enabled() {
		exp, err = telemetry.NewExporter(ctx, tc)
		if err != nil {
			return nil, nil, nil, err
		}
	}
	if exp == nil && p.Metrics == nil {
		return agent.NewRuntime(store, opts), nil, func() {}, nil
	}
	// With the journal's side table, the export is durable: spans the
	// collector did not acknowledge before a crash are sent by the next
	// process that continues (or, in keel serve, finds) the run.
	recs, _ := store.(journal.Records)
	live = telemetry.NewLive(&telemetry.LiveOptions{Exporter: exp, Metrics: p.Metrics, Read: store.Read, Records: recs})
	o := agent.RuntimeOptions{}
	if opts != nil {
		o = *opts
	}
	o.OnAppend = live.Appended
	flush = func() {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), TelemetryFlush)
		defer cancel()
		err := live.Close(fctx)
		if exp == nil || p.Notes == nil {
			return
		}
		st := exp.Stats()
		if st.Dropped > 0 || st.Failed > 0 || live.Dropped() > 0 || errors.Is(err, context.DeadlineExceeded) {
			note := ""
			if errors.Is(err, context.DeadlineExceeded) {
				note = fmt.Sprintf("; gave up waiting for the collector after %s (keel runs trace RUN exports a run again)", TelemetryFlush)
			}
			fmt.Fprintf(p.Notes, "keel: telemetry: %d spans exported, %d failed, %d dropped (queue full), %d events dropped to %s%s\n",
				st.Exported, st.Failed, st.Dropped, live.Dropped(), tc.Endpoint, note)
		}
	}
	return agent.NewRuntime(store, &o), live, flush, nil
}
