package tui

import (
	"context"
	"fmt"
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
		p.Parts = append(p.Parts, policy.Part{Text: t, Command: strings.Fields(t)[0], Words: strings.Fields(t), Effect: policy.Ask})
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
		{Text: "PYTHONSTARTUP=x python a.py", Command: "python", Words: []string{"python", "a.py"}, Assigns: []string{"PYTHONSTARTUP"}, Effect: policy.Ask},
		// Trial 10, N23: offered for a redirection the gate then refused.
		{Text: "echo x > x.txt", Command: "echo", Words: []string{"echo", "x"}, Redirects: []string{"> x.txt"}, Effect: policy.Ask},
		// Only known at run time: the gate remembers nothing of it.
		{Text: "python3 $SCRIPT", Command: "python3", Effect: policy.Ask},
		// Quoted: the words the gate matches are not the text's fields.
		{Text: "'python3' a.py", Command: "python3", Words: []string{"python3", "a.py"}, Redirects: []string{"> o"}, Effect: policy.Ask},
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

// Trial 10, N23: the question offers only the answers the gate accepts,
// and a refusal is said without the chain of internal operations.
func TestDecideInlineOffersWhatTheGateRemembers(t *testing.T) {
	t.Parallel()
	redirect := agent.PendingApproval{RunID: "r1"}
	redirect.CallID, redirect.Tool = "c1", "bash"
	redirect.Parts = []policy.Part{{Text: "echo x > x.txt", Command: "echo", Words: []string{"echo", "x"}, Redirects: []string{"> x.txt"}, Effect: policy.Ask}}
	dynamic := redirect
	dynamic.Parts = []policy.Part{{Text: "python3 $SCRIPT", Command: "python3", Effect: policy.Ask}}
	for _, tt := range []struct {
		name       string
		p          agent.PendingApproval
		in         string
		want, lack []string
	}{
		{"redirect", redirect, "p\nr\n", []string{"[r] always for this run", "answer y, n, r or a"}, []string{"[p]", "every command starting"}},
		{"dynamic", dynamic, "r\np\na\ny\n", []string{"approve? [y]es, [n]o: ", "answer y or n"}, []string{"[r]", "[a]", "[p]"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var out strings.Builder
			pr := &Prompt{Err: &out, In: strings.NewReader(tt.in)}
			var got *agent.ApprovalResolved
			decide := func(_ context.Context, runID, callID string, res *agent.ApprovalResolved) error {
				// The gate's own check, as Runtime.Resolve makes it.
				if res.Remember != "" {
					if _, err := policy.GrantsFor(runID+"/"+callID, res.Remember, tt.p.Tool, &policy.Decision{Parts: tt.p.Parts}, res.Prefix); err != nil {
						return fmt.Errorf("agent: resolve approval of run %s call %s: %w", runID, callID, err)
					}
				}
				got = res
				return nil
			}
			if !pr.DecideInline(context.Background(), &Asking{Created: &agent.RunCreated{}, By: "ann", Decide: decide}, []agent.PendingApproval{tt.p}) || got == nil {
				t.Fatalf("DecideInline: not decided\n%s", out.String())
			}
			for _, w := range tt.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("the question lacks %q:\n%s", w, out.String())
				}
			}
			for _, w := range append(tt.lack, "resolve approval", "policy:") {
				if strings.Contains(out.String(), w) {
					t.Errorf("the question says %q:\n%s", w, out.String())
				}
			}
		})
	}
}

// A refusal the question did not foresee is said in the gate's words.
func TestNotRecorded(t *testing.T) {
	t.Parallel()
	err := fmt.Errorf("agent: resolve approval of run r call c: %w", fmt.Errorf("%w: part 1 (x) is too long to remember", policy.ErrNotRememberable))
	if got, want := notRecorded(err), "this call cannot be remembered: part 1 (x) is too long to remember"; got != want {
		t.Errorf("notRecorded = %q, want %q", got, want)
	}
}
