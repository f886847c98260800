package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/identity"
	"github.com/keel-run/keel/internal/assemble"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/model/replay"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/service"
	"github.com/keel-run/keel/skill"
)

// builder is the service's builder (service.Builder) in this process:
// what a new run gets from this machine and its configuration (a
// replay's recording, the model's key, memory files and the context
// window, connectors, tools, state directory, git state), and how a run
// gets its model, tools and sandbox (the assembler), as keel run does
// it. The service has already applied its defaults and checked what the
// caller may ask for. Errors shown to callers with a token name no flag
// of this process and no file of the server beyond what they sent.
type builder struct {
	a      *app
	store  journal.Store
	logger *slog.Logger
	// live are the options of every execution this process wires for
	// the service (the server never waits inside an execution).
	live *liveOptions
	// local marks keel run's builder: its recording is loaded (live),
	// and the model's key is checked when the run is wired, with the
	// command line's advice.
	local bool
	// active reports the runs this process executes (keel_runs_active).
	active *atomic.Pointer[func() int]

	mu         sync.Mutex
	recordings map[string]*replay.Trajectory // loaded replay trajectories, by path, size and time
}

var _ service.Builder = (*builder)(nil)

// localBuilder is keel run's builder: its execution's options live.
func (a *app) localBuilder(store journal.Store, live *liveOptions) *builder {
	return &builder{a: a, store: store, logger: slog.New(slog.DiscardHandler), live: live, local: true}
}

func newBuilder(a *app, store journal.Store, logger *slog.Logger) *builder {
	return &builder{a: a, store: store, logger: logger, live: &liveOptions{gate: gateFlags{noWait: true}}, recordings: map[string]*replay.Trajectory{}}
}

// recording returns the replay trajectory at path, loading it again when
// the file changed (its size or modification time). Any failure is the
// same user-safe error, so that it reveals nothing of the file (its
// existence, or its first bytes); the detail goes to the log.
func (b *builder) recording(path string) (*replay.Trajectory, error) {
	unavailable := invalidf("replay recording %q is not available on this server (missing, unreadable, or not a trajectory)", path)
	fi, err := os.Stat(path)
	if err != nil || !fi.Mode().IsRegular() {
		b.logger.Warn("replay recording", "path", path, "err", err)
		return nil, unavailable
	}
	key := fmt.Sprintf("%s\x00%d\x00%d", path, fi.Size(), fi.ModTime().UnixNano())
	b.mu.Lock()
	defer b.mu.Unlock()
	if r := b.recordings[key]; r != nil {
		return r, nil
	}
	r, err := replay.Load(path)
	if err != nil {
		b.logger.Warn("replay recording", "path", path, "err", err)
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

// liveFor returns the live options of one execution of a run of model
// spec (a replay shares its loaded trajectory).
func (b *builder) liveFor(spec string) (*liveOptions, error) {
	live := *b.live
	if s, err := model.ParseSpec(spec); err == nil && s.Provider == "replay" {
		rec, err := b.recording(s.Name)
		if err != nil {
			return nil, err
		}
		live.Recording = rec
	}
	return &live, nil
}

// Wire implements service.Builder.
func (b *builder) Wire(ctx context.Context, c *agent.RunCreated) (*agent.Wiring, io.Closer, error) {
	live, err := b.liveFor(c.Model)
	if err != nil {
		return nil, nil, err
	}
	w, err := b.a.newWiring(ctx, c, live)
	if err != nil {
		return nil, nil, err
	}
	return &w.Wiring, w, nil
}

// Model implements service.Builder: a replay's recording, and the API
// key the provider needs.
func (b *builder) Model(_ context.Context, name string) (*service.ModelInfo, error) {
	spec, err := model.ParseSpec(name)
	if err != nil {
		return nil, invalid(err)
	}
	mi := &service.ModelInfo{Spec: spec.String(), Family: spec.Name, Replay: spec.Provider == "replay"}
	if b.local {
		if rec := b.live.Recording; rec != nil {
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
func (b *builder) checkKeys(spec model.Spec) error {
	key, err := b.a.assembler().ModelKey(spec, "", "")
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
func (b *builder) Complete(ctx context.Context, c *agent.RunCreated, req *service.CreateRun, family string) error {
	a := b.a
	cf := contextFlags{threshold: agent.DefaultCompactThreshold, notesFile: agent.DefaultNotesFile, actionMode: "tools"}
	var given *service.Connectors
	if l := req.Local; l != nil {
		if p := l.Context; p != nil {
			cf = contextFlags{window: p.Window, threshold: p.Threshold, handoffAfter: p.HandoffAfter, notesFile: p.NotesFile, actionMode: p.ActionMode, noMemory: p.NoMemory}
		}
		given = l.Connectors
	} else {
		cf.noMemory = req.NoMemory
	}
	if err := cf.apply(a, c, family); err != nil {
		if req.Local != nil {
			return err
		}
		return invalidf("the run's context settings: %s", apiText(err))
	}
	if given != nil {
		c.MCP, c.SQL, c.OpenAPI = given.MCP, given.SQL, given.OpenAPI
	} else if err := b.connectors(ctx, c, &req.CreateRun); err != nil {
		return err
	}
	c.StateDir = assemble.StateDir(a.home, c.Workspace)
	c.Tools = assemble.Tools(*c.Settings)
	if len(c.MCP)+len(c.SQL)+len(c.OpenAPI) > 0 {
		// Known once the servers are reached: the service's validation
		// fills them in, pinned as keel run pins them.
		c.Tools = nil
	}
	if req.Local == nil {
		if err := b.offer(ctx, c, cf.noMemory, req.NoSkills, req.ProposeSkills); err != nil {
			return err
		}
	}
	t1 := time.Now()
	c.Git = gitStart(ctx, c.Workspace) // for keel runs diff on the server's machine
	if d := time.Since(t1); d > 500*time.Millisecond {
		b.logger.Warn("slow git state of a new run's workspace", "duration", d.Round(time.Millisecond).String())
	}
	return nil
}

// offer fixes in c, a run created through the service by an API
// caller, a schedule or a trigger, what keel run offers its runs: the
// memory of its own scopes (service.MemoryScopes) unless noMemory, and
// the verified skills of the server's home and the project's lockfile
// that the run's policy lets its agent load, unless noSkills, and with
// propose the tools of agent-written skills (a run offered memory, as
// keel run --propose-skills). The demo agent, which every token may
// run, is offered none of it.
func (b *builder) offer(ctx context.Context, c *agent.RunCreated, noMemory, noSkills, propose bool) error {
	if c.Principal == identity.DemoAgent {
		return nil
	}
	if !noMemory {
		if err := offerMemory(ctx, b.store, c, 0); err != nil {
			return err
		}
	}
	if !noSkills {
		eng, err := agent.RunPolicy(c)
		if err != nil {
			return err
		}
		if eng == nil {
			eng = policy.Default()
		}
		for _, err := range service.OfferSkills(ctx, c, eng, b.a.skillLibrary(b.store, c.Workspace)) {
			b.logger.Warn("a skill is not offered to a new run", "workspace", c.Workspace, "agent", c.Principal, "err", err.Error())
		}
	}
	if c.Tools != nil && (c.Recall != nil || c.Skills != nil) {
		r := assemble.ToolRegistry(*c.Settings)
		addMemoryTools(r, c, nil)
		if c.Skills != nil {
			skill.AddTool(r, c.Skills, nil) // its definition: the run's process copies the skills
		}
		if propose {
			b.a.addSkillPromotionTools(r, c, nil)
		}
		c.Tools = agent.ToolInfos(r)
	}
	return nil
}

// apiText returns an error's text for an API client: without advice about
// this process's flags, which the client cannot pass.
func apiText(err error) string {
	s := err.Error()
	if i := strings.Index(s, "; pass --"); i >= 0 {
		s = s[:i]
	}
	return strings.TrimSpace(strings.SplitN(s, "\n", 2)[0])
}

// invalid marks err as the request's fault.
func invalid(err error) error { return service.Invalid(err) }

func invalidf(format string, args ...any) error { return invalid(fmt.Errorf(format, args...)) }

func firstNonEmpty(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}
