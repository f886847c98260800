package shelltest

import (
	"strings"
	"testing"
)

// TestCases checks the table itself: unique names named after a bug-case
// kind, and a token in every command whose leftovers are checked (without
// one the check could not fail).
func TestCases(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range Cases() {
		if seen[c.Name] {
			t.Errorf("duplicate case %s", c.Name)
		}
		seen[c.Name] = true
		if kind, _, _ := strings.Cut(c.Name, "/"); kind != strings.ToUpper(kind) {
			t.Errorf("case %s does not start with a kind", c.Name)
		}
		if c.NoLeftovers && !strings.Contains(c.Command, "{{T}}") {
			t.Errorf("case %s checks leftovers but its command has no {{T}} token", c.Name)
		}
		if c.Check == nil && c.MaxElapsed == 0 && !c.NoLeftovers {
			t.Errorf("case %s checks nothing", c.Name)
		}
	}
}
