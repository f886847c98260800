// Package builder is the service's builder ([service.Builder]) of a
// process: what a new run gets from this machine and its configuration
// (a replay's recording, the model's key, memory files and the context
// window, connectors, memory, skills, tools, state directory, git state),
// and how an execution of a run gets its live parts (through
// [assemble.Assembler]). keel run, keel serve, keel worker, the
// scheduler, evaluations and Keel's MCP server each fill one [Builder]
// from their flags and configuration. It joins the service and the
// assembler, which import neither each other nor it.
package builder

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/identity"
	"github.com/keel-run/keel/internal/assemble"
	"github.com/keel-run/keel/internal/checkpoint"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/model/replay"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/service"
	"github.com/keel-run/keel/skill"
	"github.com/keel-run/keel/tool"
)

// Builder is the service's builder (service.Builder) in this process:
// what a new run gets from this machine and its configuration (a
// replay's recording, the model's key, memory files and the context
// window, connectors, tools, state directory, git state), and how a run
// gets its model, tools and sandbox (the assembler), as keel run does
// it. The service has already applied its defaults and checked what the
// caller may ask for. Errors shown to callers with a token name no flag
// of this process and no file of the server beyond what they sent.
//
// Set the exported fields before the first call; a Builder is then safe
// for concurrent use.
type Builder struct {
	// Assembler assembles every execution this process wires for the
	// service; its Home, Config and Notes are also the new runs' memory
	// files, their limit and where warnings about them go.
	Assembler *assemble.Assembler
	// Store is the journal the runs are created in: the memory offered
	// to them, their agents' connectors.
	Store journal.Store
	// Logger receives what a caller of the service is not shown; nil
	// discards it.
	Logger *slog.Logger
	// Params are the params of every execution (nil: none); a replay's
	// execution gets its loaded recording besides.
	Params *assemble.Params
	// Settings, when set, replace a run's execution settings in the
	// executions this builder wires (a resume that changes them).
	Settings *agent.Settings
	// Local marks keel run's builder: its recording is loaded (Params),
	// and the model's key is checked when the run is wired, with the
	// command line's advice.
	Local bool
	// Connectors are this process's own connectors (config.toml).
	Connectors *Connectors
	// Skills returns the skill library of a run in workspace ws, with
	// signatures checked against store's agent keys; nil offers no
	// skills.
	Skills func(store journal.Store, ws string) *skill.Library
	// PromotionTools registers propose_skill and promote_skill, as
	// definitions only, for a run that proposes skills; nil registers
	// none.
	PromotionTools func(r *tool.Registry, c *agent.RunCreated)

	mu         sync.Mutex
	recordings map[string]*replay.Trajectory // loaded replay trajectories, by path, size and time
}

var _ service.Builder = (*Builder)(nil)

func (b *Builder) logger() *slog.Logger {
	if b.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return b.Logger
}

// recording returns the replay trajectory at path, loading it again when
// the file changed (its size or modification time). Any failure is the
// same user-safe error, so that it reveals nothing of the file (its
// existence, or its first bytes); the detail goes to the log.
func (b *Builder) recording(path string) (*replay.Trajectory, error) {
	unavailable := invalidf("replay recording %q is not available on this server (missing, unreadable, or not a trajectory)", path)
	fi, err := os.Stat(path)
	if err != nil || !fi.Mode().IsRegular() {
		b.logger().Warn("replay recording", "path", path, "err", err)
		return nil, unavailable
	}
	key := fmt.Sprintf("%s\x00%d\x00%d", path, fi.Size(), fi.ModTime().UnixNano())
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.recordings == nil {
		b.recordings = map[string]*replay.Trajectory{}
	}
	if r := b.recordings[key]; r != nil {
		return r, nil
	}
	r, err := replay.Load(path)
	if err != nil {
		b.logger().Warn("replay recording", "path", path, "err", err)
		return nil, unavailable
	}
	for k := range b.recordings {
		if strings.HasPrefix(k, path+"\x00") {
			delete(b.recordings, k)
		}
	}
	b.recordings[key] = r
	return r, nil
}

// params returns the params of one execution of a run of model spec (a
// replay shares its loaded trajectory).
func (b *Builder) params(spec string) (*assemble.Params, error) {
	var p assemble.Params
	if b.Params != nil {
		p = *b.Params
	}
	if s, err := model.ParseSpec(spec); err == nil && s.Provider == "replay" {
		rec, err := b.recording(s.Name)
		if err != nil {
			return nil, err
		}
		p.Recording = rec
	}
	return &p, nil
}

// Wire implements service.Builder.
func (b *Builder) Wire(ctx context.Context, c *agent.RunCreated) (*agent.Wiring, io.Closer, error) {
	p, err := b.params(c.Model)
	if err != nil {
		return nil, nil, err
	}
	if b.Settings != nil {
		cc := *c
		cc.Settings = b.Settings
		c = &cc
	}
	r, err := b.Assembler.Assemble(ctx, c, p)
	if err != nil {
		return nil, nil, err
	}
	return &r.Wiring, r, nil
}

// Model implements service.Builder: a replay's recording, and the API
// key the provider needs.
func (b *Builder) Model(_ context.Context, name string) (*service.ModelInfo, error) {
	spec, err := model.ParseSpec(name)
	if err != nil {
		return nil, invalid(err)
	}
	mi := &service.ModelInfo{Spec: spec.String(), Family: spec.Name, Replay: spec.Provider == "replay"}
	if b.Local {
		if b.Params != nil && b.Params.Recording != nil {
			rec := b.Params.Recording
			mi.Task, mi.System, mi.Family = rec.Task(), rec.System(), rec.Model()
		}
		return mi, nil
	}
	if spec.Provider == "replay" {
		rec, err := b.recording(spec.Name)
		if err != nil {
			return nil, err
		}
		mi.Task, mi.System, mi.Family = rec.Task(), rec.System(), rec.Model()
	}
	if err := b.checkKeys(spec); err != nil {
		return nil, err
	}
	return mi, nil
}

// checkKeys checks that the server has the API key a provider needs.
func (b *Builder) checkKeys(spec model.Spec) error {
	key, err := b.Assembler.ModelKey(spec, "", "")
	if err != nil {
		return invalidf("this server has no API key for %s (its operator sets the variable api_key_env of [endpoints.%q] names where keel serve runs)", spec, spec.BaseURL)
	}
	if key == "" && (spec.Provider == "openai" || spec.Provider == "anthropic") {
		if env := assemble.ProviderKey(spec); env != "" {
			return invalidf("this server has no API key for %s models (its operator sets %s where keel serve runs)", spec.Provider, env)
		}
		return invalidf("this server has no API key for %s (its operator sets api_key_env in [endpoints.%q] of config.toml)", spec, spec.BaseURL)
	}
	return nil
}

// Complete implements service.Builder: the context settings and memory
// files, the connectors, the tools, the state directory and git state.
func (b *Builder) Complete(ctx context.Context, c *agent.RunCreated, req *service.CreateRun, family string) error {
	if err := checkSecretValues(c, b.Assembler.Getenv); err != nil {
		return err
	}
	cf := ContextSettings{Threshold: agent.DefaultCompactThreshold, NotesFile: agent.DefaultNotesFile, ActionMode: "tools"}
	var given *service.Connectors
	budget, noOffer := 0, false
	if l := req.Local; l != nil {
		if p := l.Context; p != nil {
			cf = ContextSettings{Window: p.Window, Threshold: p.Threshold, HandoffAfter: p.HandoffAfter, NotesFile: p.NotesFile, ActionMode: p.ActionMode, NoMemory: p.NoMemory}
			budget = p.MemoryBudget
		}
		given, noOffer = l.Connectors, l.NoOffer
	} else {
		cf.NoMemory = req.NoMemory
		if req.ContextWindow != nil {
			cf.Window = *req.ContextWindow
		}
	}
	cf.Creator = req.Creator()
	if err := cf.Apply(b.Assembler, c, family); err != nil {
		if req.Local != nil {
			return err
		}
		if ue := (*assemble.UsageError)(nil); errors.As(err, &ue) {
			// A refused setting, named as the command line names it
			// (the same words in both forms).
			return invalidf("%s", service.APIText(err))
		}
		return invalidf("the run's context settings: %s", service.APIText(err))
	}
	if given != nil {
		c.MCP, c.SQL, c.OpenAPI = given.MCP, given.SQL, given.OpenAPI
	} else if err := b.connectors(ctx, c, &req.CreateRun); err != nil {
		return err
	}
	c.StateDir = assemble.StateDir(b.Assembler.Home, c.Workspace)
	c.Tools = assemble.Tools(*c.Settings, assemble.NetworkTools(c))
	if len(c.MCP)+len(c.SQL)+len(c.OpenAPI) > 0 {
		// Known once the servers are reached: the service's validation
		// fills them in, pinned as keel run pins them.
		c.Tools = nil
	}
	if !noOffer {
		if err := b.offer(ctx, c, cf.NoMemory, req.NoSkills, req.ProposeSkills, budget); err != nil {
			return err
		}
	}
	t1 := time.Now()
	c.Git = GitStart(ctx, c.Workspace) // for keel runs diff on the server's machine
	if d := time.Since(t1); d > 500*time.Millisecond {
		b.logger().Warn("slow git state of a new run's workspace", "duration", d.Round(time.Millisecond).String())
	}
	return nil
}

// offer fixes in c what a new run is offered, whichever front end
// created it: the memory of its own scopes (service.MemoryScopes)
// within budget tokens (0: memory.DefaultBudget) unless noMemory, and
// the verified skills of Keel's home and the project's lockfile that the
// run's policy lets its agent load, unless noSkills, and with propose
// the tools of agent-written skills (a run offered memory, keel run
// --propose-skills). The demo agent, which every token may run, is
// offered none of it. A skill left out is a note for keel run's person,
// a warning in a server's log.
func (b *Builder) offer(ctx context.Context, c *agent.RunCreated, noMemory, noSkills, propose bool, budget int) error {
	if c.Principal == identity.DemoAgent {
		return nil
	}
	if !noMemory {
		if err := OfferMemory(ctx, b.Store, c, budget); err != nil {
			return err
		}
	}
	if !noSkills && b.Skills != nil {
		eng, err := agent.RunPolicy(c)
		if err != nil {
			return err
		}
		if eng == nil {
			eng = policy.Default()
		}
		for _, err := range service.OfferSkills(ctx, c, eng, b.Skills(b.Store, c.Workspace)) {
			if b.Local && b.Assembler.Notes != nil {
				fmt.Fprintf(b.Assembler.Notes, "keel: %v\n", err)
				continue
			}
			b.logger().Warn("a skill is not offered to a new run", "workspace", c.Workspace, "agent", c.Principal, "err", err.Error())
		}
	}
	if c.Tools != nil && (c.Recall != nil || c.Skills != nil) {
		r := assemble.ToolRegistry(*c.Settings, assemble.NetworkTools(c))
		AddMemoryTools(r, c, nil)
		if c.Skills != nil {
			skill.AddTool(r, c.Skills, nil) // its definition: the run's process copies the skills
		}
		if propose && b.PromotionTools != nil {
			b.PromotionTools(r, c)
		}
		c.Tools = agent.ToolInfos(r)
	}
	return nil
}

// GitStart records the commit a run starts on, when its workspace is
// the top of a git repository with a commit (checkpoint.StartOf).
func GitStart(ctx context.Context, dir string) *agent.GitStart {
	return checkpoint.StartOf(ctx, dir)
}

// invalid marks err as the request's fault.
func invalid(err error) error { return service.Invalid(err) }

func invalidf(format string, args ...any) error { return invalid(fmt.Errorf(format, args...)) }
