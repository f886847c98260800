package builder

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/config"
	"github.com/keel-run/keel/model"
)

// agentFile is the front matter of .keel/agents/NAME.md; the body after
// it is the agent's system prompt.
type agentFile struct {
	Name        string   `yaml:"name"`
	Description string   `yaml:"description"`
	Model       string   `yaml:"model"`
	Tools       []string `yaml:"tools"`
	Network     []string `yaml:"network"`
	Paths       []string `yaml:"paths"`
	// Scopes bound the child's credentials: provider name -> scopes.
	Scopes      map[string][]string `yaml:"scopes"`
	MaxSteps    int                 `yaml:"max_steps"`
	MaxTokens   int64               `yaml:"max_tokens"`
	MaxCost     float64             `yaml:"max_cost"`
	ToolCalls   int                 `yaml:"max_tool_calls"`
	MaxChildren int                 `yaml:"max_children"`
	MaxDepth    int                 `yaml:"max_depth"`
}

// maxAgentFile bounds one definition file.
const maxAgentFile = 64 << 10

// agentDefs reads the agent definitions in dir (.keel/agents of a
// workspace): every Markdown file, sorted by name. A missing directory is
// none; a file that does not parse is an error naming it.
func agentDefs(dir string, trusted func(path string, content []byte) bool) ([]agent.AgentDef, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.md"))
	if err != nil {
		return nil, err
	}
	slices.Sort(paths)
	var out []agent.AgentDef
	for _, p := range paths {
		fi, err := os.Lstat(p)
		if err != nil || !fi.Mode().IsRegular() || fi.Size() > maxAgentFile {
			return nil, usagef("agent definition %s: want a regular file of at most %d bytes", p, maxAgentFile)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		if !trusted(p, b) {
			return nil, usagef("agent definition %s is not trusted (a committed file chooses what a child agent may do): read it, then run keel config trust", p)
		}
		d, err := parseAgentDef(strings.TrimSuffix(filepath.Base(p), ".md"), string(b))
		if err != nil {
			return nil, usagef("agent definition %s: %w", p, err)
		}
		out = append(out, *d)
	}
	return out, nil
}

// parseAgentDef parses one definition: YAML front matter between ---
// lines, then the system prompt.
func parseAgentDef(name, s string) (*agent.AgentDef, error) {
	s = strings.ReplaceAll(s, "\r\n", "\n")
	rest, ok := strings.CutPrefix(s, "---\n")
	if !ok {
		return nil, fmt.Errorf("does not start with front matter (---)")
	}
	fm, body, ok := strings.Cut(rest, "\n---")
	if !ok {
		return nil, fmt.Errorf("front matter has no closing ---")
	}
	var f agentFile
	dec := yaml.NewDecoder(strings.NewReader(fm))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("front matter: %w", err)
	}
	if f.Name != "" && f.Name != name {
		return nil, fmt.Errorf("name %q differs from the file's name %q", f.Name, name)
	}
	if f.MaxSteps < 0 || f.MaxTokens < 0 || f.MaxCost < 0 || f.ToolCalls < 0 || f.MaxChildren < 0 || f.MaxDepth < 0 {
		return nil, fmt.Errorf("a limit is negative: want 0 (the default share) or more")
	}
	if f.Model != "" {
		if _, err := model.ParseSpec(f.Model); err != nil {
			return nil, err
		}
	}
	return &agent.AgentDef{Name: name, Description: strings.TrimSpace(f.Description), Model: f.Model, System: strings.TrimSpace(strings.TrimPrefix(body, "\n")),
		Tools: f.Tools, Network: f.Network, Paths: f.Paths, Scopes: scopes(f.Scopes),
		Limits: agent.Limits{MaxSteps: f.MaxSteps, MaxTokens: f.MaxTokens, MaxCost: f.MaxCost, MaxToolCalls: f.ToolCalls, MaxChildren: f.MaxChildren, MaxDepth: f.MaxDepth}}, nil
}

// scopes returns a definition's credential bound, each provider's
// scopes non-nil (an empty list: no credential of that provider).
func scopes(m map[string][]string) map[string][]string {
	if m == nil {
		return nil
	}
	out := make(map[string][]string, len(m))
	for p, s := range m {
		out[p] = append([]string{}, s...)
	}
	return out
}

// OfferTeam adds the team tools (sorted with the others) and the agent
// definitions of workspace ws (.keel/agents/NAME.md, each trusted with
// keel config trust under Keel's home) to a new run, and names the
// definitions in its system prompt (keel run --team).
func OfferTeam(c *agent.RunCreated, ws, home string) error {
	defs, err := agentDefs(filepath.Join(ws, ".keel", "agents"), func(p string, b []byte) bool { return config.Trusted(home, p, b) })
	if err != nil {
		return err
	}
	AddTeamTools(c)
	c.Agents = defs
	if len(defs) > 0 {
		var b strings.Builder
		b.WriteString("\n\nAgent definitions you can start with spawn_agent, or hand the task over to with handoff (\"agent\": NAME):\n")
		for _, d := range defs {
			fmt.Fprintf(&b, "- %s: %s\n", d.Name, d.Description)
		}
		c.System += b.String()
	}
	return nil
}

// AddTeamTools adds the team tools to c's tools (sorted with the others)
// unless it has them: a run whose tools are known only once it is wired
// (keel run with connectors) gets them again after.
func AddTeamTools(c *agent.RunCreated) {
	if slices.ContainsFunc(c.Tools, func(t agent.ToolInfo) bool { return t.Name == agent.SpawnTool }) {
		return
	}
	c.Tools = append(c.Tools, agent.TeamTools()...)
	slices.SortFunc(c.Tools, func(a, b agent.ToolInfo) int { return strings.Compare(a.Name, b.Name) })
}

// OfferTeam implements service.TeamBuilder (api.CreateRun.Team): the
// definitions of the run's workspace trusted under this process's Keel
// home, and the team tools. For a caller with a token, a definition
// that does not parse or is not trusted is the request's fault.
func (b *Builder) OfferTeam(c *agent.RunCreated) error {
	if err := OfferTeam(c, c.Workspace, b.Assembler.Home); err != nil {
		if b.Local {
			return err
		}
		return invalid(err)
	}
	return nil
}
