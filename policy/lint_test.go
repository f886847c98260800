package policy_test

import (
	"strings"
	"testing"

	"github.com/keel-run/keel/policy"
)

// Lint finds what a policy's own test cases can miss: a rule that reads
// an attribute that does not exist, and a policy that denies everything.
func TestLint(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, src string
		want      []string // each in one problem; none when empty
	}{
		{"the default", string(policy.DefaultSource()), nil},
		{"a typo in an attribute", `@id("all") permit (principal, action, resource) when { context.netwrok == false };`,
			[]string{"rule all cannot be evaluated (for ls", "it denies every one of 13 ordinary calls"}},
		{"an unguarded resource attribute", `@id("files") permit (principal, action, resource) when { resource.path like "src/*" };
@id("shell") permit (principal, action == Keel::Action::"bash", resource);`,
			[]string{"rule files cannot be evaluated (for ls"}},
		{"a guarded one is fine", `@id("files") permit (principal, action, resource) when { resource has path && resource.path like "src/*" };
@id("shell") permit (principal, action == Keel::Action::"bash", resource);`, nil},
		{"denies everything", `@id("nothing") forbid (principal, action, resource);
@id("all") permit (principal, action, resource);`, []string{"it denies every one of 13 ordinary calls"}},
		{"permits nothing", `@id("x") permit (principal, action, resource) when { false };`, []string{"it denies every one"}},
		{"refuses to run without a sandbox", `@id("all") permit (principal, action, resource) when { context.sandbox == "linux" };`, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			name := "p.cedar"
			if strings.HasPrefix(tt.src, "#") {
				name = "p.toml"
			}
			e := mustParse(t, name, tt.src)
			got := e.Lint(t.Context())
			if len(got) != len(tt.want) {
				t.Fatalf("Lint = %q, want %d problems like %q", got, len(tt.want), tt.want)
			}
			for i, w := range tt.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("problem %d = %q, want it to contain %q", i+1, got[i], w)
				}
			}
		})
	}
}

// A test case expecting deny does not pass when the deny came from a
// rule that could not be evaluated.
func TestCaseDenyByBrokenRuleFails(t *testing.T) {
	t.Parallel()
	e := mustParse(t, "p.toml", `version = 1
cedar = '''
@id("all") permit (principal, action, resource);
@id("no-etc") forbid (principal, action, resource) when { context.outside_pathz.contains("/etc/passwd") };
'''
[[test]]
name = "reading /etc/passwd is denied"
command = "cat /etc/passwd"
expect = "deny"
`)
	res := e.Test(t.Context())
	if len(res) != 1 || !strings.Contains(res[0].Problem, "the decision is right only because part 1: a policy could not be evaluated") {
		t.Errorf("results: %+v", res)
	}
}
