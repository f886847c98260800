package tui

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/policy"
)

func pendingBash(texts ...string) agent.PendingApproval {
	p := agent.PendingApproval{RunID: "r1"}
	p.CallID, p.Tool = "c1", "bash"
	for _, t := range texts {
		p.Parts = append(p.Parts, policy.Part{Text: t, Command: strings.Fields(t)[0]})
	}
	return p
}

// PrefixFor suggests the program (with its subcommand for package
// managers) when every part that asked runs it with more words.
func TestPrefixFor(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		parts []string
		want  string
	}{
		{[]string{"python reproduce_issue.py"}, "python"},
		{[]string{"python -m pytest tests -x"}, "python"},
		{[]string{"pip install pytz"}, "pip install"},
		{[]string{"npm run build"}, "npm run"},
		{[]string{"python a.py", "python b.py"}, "python"},
		{[]string{"python a.py", "node b.js"}, ""},
		{[]string{"make"}, ""},
		{[]string{"PYTHONSTARTUP=x python a.py"}, ""},
	} {
		if got := PrefixFor(pendingBash(tt.parts...)); got != tt.want {
			t.Errorf("PrefixFor(%q) = %q, want %q", tt.parts, got, tt.want)
		}
	}
	// Fresh-user trial 7, P8: [p] offered the wrapper ('timeout',
	// 'env'), and the env grant could not be stored.
	for _, part := range []policy.Part{
		{Text: "timeout 60 python3 a.py", Command: "python3", Via: []string{"timeout"}},
		{Text: "env PYTHONPATH=. python3 a.py", Command: "python3", Via: []string{"env"}, Assigns: []string{"PYTHONPATH"}},
		{Text: "python3 a.py > out.log", Command: "python3", Redirects: []string{"> out.log"}},
	} {
		p := agent.PendingApproval{RunID: "r1"}
		p.CallID, p.Tool, p.Parts = "c1", "bash", []policy.Part{part}
		if got := PrefixFor(p); got != "" {
			t.Errorf("PrefixFor(%q) = %q, want no offer", part.Text, got)
		}
	}
	p := pendingBash("python a.py")
	p.Tool = "write_file"
	if got := PrefixFor(p); got != "" {
		t.Errorf("PrefixFor(write_file) = %q", got)
	}
}

// At the terminal, [p] remembers the suggested prefix for the run.
func TestDecideInlinePrefix(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	pr := &Prompt{Err: &out, In: strings.NewReader("p\n")}
	var got *agent.ApprovalResolved
	ok := pr.DecideInline(context.Background(), &Asking{Created: &agent.RunCreated{}, By: "ann", Decide: func(_ context.Context, _, _ string, res *agent.ApprovalResolved) error { got = res; return nil }}, []agent.PendingApproval{pendingBash("python reproduce_issue.py")})
	if !ok || got == nil {
		t.Fatalf("DecideInline = %v, decision %v\n%s", ok, got, out.String())
	}
	if got.Decision != policy.Allow || got.Remember != policy.ScopeRun || !slices.Equal(got.Prefix, []string{"python"}) {
		t.Errorf("decision %+v, want allow, remembered for the run with prefix python", got)
	}
	if !strings.Contains(out.String(), "[p] every command starting 'python' for this run") || !strings.Contains(out.String(), "commands starting 'python'") {
		t.Errorf("the prompt does not offer or confirm the prefix:\n%s", out.String())
	}
}
