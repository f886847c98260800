package journaltest

import (
	"context"
	"slices"

	"github.com/keel-run/keel/journal"
)

// checkTextIndex checks [journal.TextIndex] when the store implements
// it: words match across punctuation and letter case, kinds are apart,
// a document indexed again replaces its text, the best match comes
// first, an unindexed document is gone, query syntax of the backend
// never reaches it, and the newest indexed event is remembered per kind.
func checkTextIndex(ctx context.Context, s journal.Store) error {
	ix, ok := s.(journal.TextIndex)
	if !ok {
		return nil
	}
	var v violations
	docs := []struct {
		kind, key, text string
		seq             int64
	}{
		{"mem", "a", "Run the tests with PYTHONPATH=/testbed/src python -m pytest", 1},
		{"mem", "b", "The API base URL is https://api.example.com/v2 (staging)", 2},
		{"mem", "c", "pytest pytest pytest: flaky test_fields on CI", 3},
		{"other", "a", "pytest elsewhere", 4},
	}
	for _, d := range docs {
		if err := ix.IndexText(ctx, d.kind, d.key, d.text, d.seq); err != nil {
			return err
		}
	}
	search := func(kind, q string) []string {
		keys, err := ix.SearchText(ctx, kind, q, 10)
		if err != nil {
			v.add("SearchText(%q, %q): %v", kind, q, err)
		}
		return keys
	}
	if got := search("mem", "testbed"); !slices.Equal(got, []string{"a"}) {
		v.add("a word inside a path: SearchText(testbed) = %v, want [a]", got)
	}
	if got := search("mem", "EXAMPLE staging"); !slices.Equal(got, []string{"b"}) {
		v.add("words of a URL, any case: SearchText = %v, want [b]", got)
	}
	if got := search("mem", "pytest"); len(got) != 2 || got[0] != "c" {
		v.add("SearchText(pytest) = %v, want [c a] (c says it thrice)", got)
	}
	if got := search("other", "pytest"); !slices.Equal(got, []string{"a"}) {
		v.add("kinds are apart: SearchText(other, pytest) = %v, want [a]", got)
	}
	for _, q := range []string{`"`, `pytest OR`, `NEAR(a b)`, `* : ^`, `a & | !`, `'`, ""} {
		search("mem", q) // must not fail
	}
	if err := ix.IndexText(ctx, "mem", "a", "replaced by other words", 5); err != nil {
		v.add("IndexText again: %v", err)
	}
	if got := search("mem", "testbed"); len(got) != 0 {
		v.add("after a new text, the old one still matches: %v", got)
	}
	if got := search("mem", "replaced"); !slices.Equal(got, []string{"a"}) {
		v.add("the new text does not match: %v", got)
	}
	if err := ix.UnindexText(ctx, "mem", "a"); err != nil {
		v.add("UnindexText: %v", err)
	}
	if err := ix.UnindexText(ctx, "mem", "missing"); err != nil {
		v.add("UnindexText of a missing document: %v", err)
	}
	if got := search("mem", "replaced"); len(got) != 0 {
		v.add("an unindexed document still matches: %v", got)
	}
	if n, err := ix.IndexedUpTo(ctx, "mem"); err != nil || n != 5 {
		v.add("IndexedUpTo(mem) = %d, %v; want 5", n, err)
	}
	if n, err := ix.IndexedUpTo(ctx, "none"); err != nil || n != 0 {
		v.add("IndexedUpTo(none) = %d, %v; want 0", n, err)
	}
	if got, err := ix.SearchText(ctx, "mem", "pytest", 1); err != nil || len(got) != 1 {
		v.add("SearchText with limit 1 = %v, %v", got, err)
	}
	return v.err()
}
