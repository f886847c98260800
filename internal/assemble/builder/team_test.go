package builder

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/assemble"
	"github.com/keel-run/keel/internal/config"
)

func TestParseAgentDef(t *testing.T) {
	for _, tt := range []struct {
		name, text, err string
	}{
		{"ok", "---\ndescription: reads code\nmodel: scripted:demo\nmax_steps: 5\nscopes:\n  github: []\n---\nYou read code.\n", ""},
		{"crlf", "---\r\ndescription: d\r\n---\r\nbody\r\n", ""},
		{"no front matter", "You read code.\n", "does not start with front matter"},
		{"unclosed", "---\ndescription: d\n", "no closing ---"},
		{"unknown field", "---\ndescripton: d\n---\n", "front matter"},
		{"other name", "---\nname: writer\n---\n", `differs from the file's name "reader"`},
		{"negative", "---\nmax_cost: -1\n---\n", "a limit is negative"},
		{"bad model", "---\nmodel: nosuch:thing\n---\n", "nosuch"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d, err := parseAgentDef("reader", tt.text)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d.Name != "reader" || d.System == "" {
				t.Errorf("def %+v", d)
			}
		})
	}
	d, _ := parseAgentDef("reader", "---\ndescription: reads code\nmodel: scripted:demo\nmax_steps: 5\nscopes:\n  github: []\n---\nYou read code.\n")
	want := &agent.AgentDef{Name: "reader", Description: "reads code", Model: "scripted:demo", System: "You read code.",
		Scopes: map[string][]string{"github": {}}, Limits: agent.Limits{MaxSteps: 5}}
	if diff := cmp.Diff(want, d); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// A workspace's definitions are offered only once trusted; the team
// tools come with them, and the system prompt names each.
func TestOfferTeam(t *testing.T) {
	home, ws := t.TempDir(), t.TempDir()
	dir := filepath.Join(ws, ".keel", "agents")
	os.MkdirAll(dir, 0o755)
	def := []byte("---\ndescription: reads code\n---\nYou read code.\n")
	os.WriteFile(filepath.Join(dir, "reader.md"), def, 0o644)
	c := &agent.RunCreated{System: "base"}
	err := OfferTeam(c, ws, home)
	var ue *assemble.UsageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "not trusted") {
		t.Fatalf("untrusted definition: %v, want a usage error", err)
	}
	if err := config.Trust(home, filepath.Join(dir, "reader.md"), def); err != nil {
		t.Fatal(err)
	}
	if err := OfferTeam(c, ws, home); err != nil {
		t.Fatal(err)
	}
	if len(c.Agents) != 1 || c.Agents[0].Name != "reader" || !strings.Contains(c.System, "- reader: reads code") || len(c.Tools) == 0 {
		t.Errorf("offered %+v", c)
	}
	// No definitions: the team tools alone.
	c = &agent.RunCreated{}
	if err := OfferTeam(c, t.TempDir(), home); err != nil || len(c.Agents) != 0 || len(c.Tools) == 0 || c.System != "" {
		t.Errorf("no definitions: %+v %v", c, err)
	}
}
