package skill

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/tool"
)

// UseTool is the tool that loads a skill's instructions.
const UseTool = "use_skill"

// The tools of agent-written skills (internal/skillhost runs them).
const (
	ProposeTool = agent.ProposeSkillTool
	PromoteTool = agent.PromoteSkillTool
)

// Ready is what [Materialize] made of each offered skill: its verified
// copy for the run, or why it cannot be used.
type Ready struct {
	Skill *Skill
	// Dir is the copy's directory (what the run's commands see).
	Dir string
	Err error
}

// Materialize verifies each offered skill against its digest and
// copies its files into dest/NAME for the run (dest is in the run's
// state directory, read-only in the sandbox), leaving out scripts/
// when the policy did not let them run. A skill that changed since it
// was offered is not copied: its Ready holds the refusal, which use_skill
// reports, and it is never used.
func Materialize(k *agent.Skills, dest string) map[string]*Ready {
	out := map[string]*Ready{}
	if k == nil {
		return out
	}
	for _, e := range k.Entries {
		r := &Ready{Dir: filepath.Join(dest, e.Name)}
		out[e.Name] = r
		s, err := Read(e.Dir)
		if err == nil && s.Digest != e.Digest {
			err = refused("skill %s changed since the run was created: its files have digest %s, not %s", e.Name, s.Digest, e.Digest)
		}
		if err != nil {
			r.Err = err
			continue
		}
		files := map[string][]byte{}
		for _, f := range s.Files {
			if !e.Scripts && strings.HasPrefix(f.Path, "scripts/") {
				continue
			}
			b, err := s.ReadFile(f.Path)
			if err != nil {
				r.Err = err
				break
			}
			files[f.Path] = b
		}
		if r.Err != nil {
			continue
		}
		if err := os.RemoveAll(r.Dir); err != nil {
			r.Err = err
			continue
		}
		if err := write(r.Dir, files); err != nil {
			r.Err = err
			continue
		}
		r.Skill = s
	}
	return out
}

type useInput struct {
	Name string `json:"name"`
}

// AddTool registers use_skill for the skills of k, served from ready.
func AddTool(reg *tool.Registry, k *agent.Skills, ready map[string]*Ready) {
	var names []string
	for _, e := range k.Entries {
		names = append(names, fmt.Sprintf("%q", e.Name))
	}
	tool.Add(reg, &tool.Tool{
		Name:        UseTool,
		Description: "Load a skill listed under Skills: returns its instructions and where its files (references, assets and, when allowed, scripts) are, read-only. Call it before doing the kind of work the skill describes.",
		InputSchema: []byte(`{"type":"object","additionalProperties":false,"properties":{"name":{"enum":[` + strings.Join(names, ",") + `]}},"required":["name"]}`),
		Effect:      tool.ReadOnly,
		Scope:       func(json.RawMessage) []string { return []string{} },
	}, func(ctx context.Context, req *tool.Request, in useInput) (*tool.Result, error) {
		var e *agent.OfferedSkill
		for i := range k.Entries {
			if k.Entries[i].Name == in.Name {
				e = &k.Entries[i]
			}
		}
		r := ready[in.Name]
		if e == nil || r == nil {
			return tool.Errorf("no skill %q is offered to this run", in.Name), nil
		}
		if r.Err != nil {
			return tool.Errorf("skill %s cannot be used: %v", in.Name, r.Err), nil
		}
		var b strings.Builder
		fmt.Fprintf(&b, "skill %s (%s, %s", e.Name, e.Source, e.Digest)
		if e.Signed {
			b.WriteString(", signature verified")
		}
		fmt.Fprintf(&b, ")\nits files are in %s:\n", r.Dir)
		for _, f := range r.Skill.Files {
			if f.Path == "SKILL.md" {
				continue
			}
			if !e.Scripts && strings.HasPrefix(f.Path, "scripts/") {
				fmt.Fprintf(&b, "  %s (not given to this run: the policy does not let this skill's scripts run)\n", f.Path)
				continue
			}
			fmt.Fprintf(&b, "  %s\n", filepath.Join(r.Dir, f.Path))
		}
		b.WriteString("\n")
		b.WriteString(r.Skill.Body)
		return tool.Text(b.String()), nil
	})
}
