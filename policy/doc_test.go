package policy_test

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/keel-run/keel/policy"
)

// Every complete policy file in docs/policy.md (a toml code block with
// "version = 1" and test cases) compiles and passes its own tests.
func TestDocExamples(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "docs", "policy.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```toml\n(.*?)```").FindAllSubmatch(b, -1)
	n := 0
	for i, m := range blocks {
		src := m[1]
		if !regexp.MustCompile(`(?m)^version = 1$`).Match(src) || !regexp.MustCompile(`(?m)^expect = `).Match(src) {
			continue
		}
		n++
		e, err := policy.Parse("docs example", src)
		if err != nil {
			t.Errorf("example %d: %v", i+1, err)
			continue
		}
		for _, r := range e.Test(t.Context()) {
			if r.Problem != "" {
				t.Errorf("example %d (%s): %s: %s", i+1, e.Description(), r.Case.Name, r.Problem)
			}
		}
		for _, p := range e.Lint(t.Context()) {
			t.Errorf("example %d (%s): %s", i+1, e.Description(), p)
		}
	}
	if n < 3 {
		t.Errorf("found %d complete examples, want at least 3", n)
	}
}
