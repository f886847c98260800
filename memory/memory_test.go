package memory_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/testenv"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/postgres"
	"github.com/keel-run/keel/journal/sqlite"
	"github.com/keel-run/keel/memory"
)

// backends runs test on each journal backend memory is kept in: SQLite,
// and PostgreSQL (the test binary's private cluster; skipped where its
// programs are missing, failed under CI). open makes a new, empty
// journal of the backend, closed when the test ends.
func backends(t *testing.T, test func(t *testing.T, open func(t *testing.T) journal.Store)) {
	t.Run("sqlite", func(t *testing.T) {
		test(t, func(t *testing.T) journal.Store {
			t.Helper()
			s, err := sqlite.Open(filepath.Join(t.TempDir(), "keel.db"), nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		})
	})
	t.Run("postgres", func(t *testing.T) {
		test(t, func(t *testing.T) journal.Store {
			t.Helper()
			s, err := postgres.Open(t.Context(), testenv.Postgres(t))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		})
	})
}

func TestWriteSupersedeForgetSearch(t *testing.T) {
	backends(t, func(t *testing.T, open func(t *testing.T) journal.Store) {
		ctx := t.Context()
		st := open(t)
		m := memory.New(st, nil)
		scopes := memory.Scopes{Agent: "bot", Project: "/src/app"}
		a, err := m.Write(ctx, &memory.WriteParams{Scope: memory.AgentScope("bot"), Text: "tests run with tox -e py312", Source: memory.Source{Run: "r1", Call: "c1"}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.Write(ctx, &memory.WriteParams{Scope: memory.AgentScope("other"), Text: "tests of another agent"}); err != nil {
			t.Fatal(err)
		}
		b, err := m.Write(ctx, &memory.WriteParams{Scope: memory.AgentScope("bot"), Text: "tests run with tox -e py313", Supersedes: a.ID})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.Write(ctx, &memory.WriteParams{Scope: memory.AgentScope("bot"), Text: "again", Supersedes: a.ID}); !errors.Is(err, memory.ErrSuperseded) {
			t.Errorf("superseding a superseded entry: %v, want ErrSuperseded", err)
		}
		if _, err := m.Write(ctx, &memory.WriteParams{Scope: memory.TeamScope, Text: "x", Supersedes: b.ID}); !errors.Is(err, memory.ErrInvalid) {
			t.Errorf("superseding across scopes: %v, want ErrInvalid", err)
		}
		found, err := memory.New(st, nil).Search(ctx, scopes.List(), "how do the tests run", 5)
		if err != nil || len(found) != 1 || found[0].ID != b.ID {
			t.Fatalf("Search = %+v, %v; want only the current entry of a visible scope", found, err)
		}
		hist, err := m.History(ctx, b.ID)
		if err != nil || len(hist) != 2 || hist[0].ID != a.ID || hist[0].SupersededBy != b.ID {
			t.Errorf("History = %+v, %v", hist, err)
		}
		if err := m.Forget(ctx, b.ID, "ann", "stale"); err != nil {
			t.Fatal(err)
		}
		if err := m.Forget(ctx, b.ID, "ann", "again"); err != nil {
			t.Errorf("forgetting twice: %v", err)
		}
		if found, _ := m.Search(ctx, scopes.List(), "tests", 5); len(found) != 0 {
			t.Errorf("a forgotten entry is found: %+v", found)
		}
		if r, err := m.Recall(ctx, &memory.RecallParams{Scopes: scopes, Task: "run the tests"}); err != nil || len(r.Entries) != 0 {
			t.Errorf("Recall after forget = %+v, %v", r, err)
		}
		if err := journal.Verify(memory.StreamID, mustRead(t, st)); err != nil {
			t.Error(err)
		}
	})
}

func mustRead(t *testing.T, st journal.Store) []journal.Event {
	evs, err := st.Read(t.Context(), memory.StreamID, 1)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// The memory section stays within its budget, shows relevant entries
// whole and others as index lines, and says how many were left out.
func TestRecallBudget(t *testing.T) {
	backends(t, func(t *testing.T, open func(t *testing.T) journal.Store) {
		ctx := t.Context()
		m := memory.New(open(t), nil)
		scope := memory.ProjectScope("/src/app")
		if _, err := m.Write(ctx, &memory.WriteParams{Scope: scope, Text: "The release script is scripts/release-v3.sh; run it from the top directory."}); err != nil {
			t.Fatal(err)
		}
		for i := range 200 {
			if _, err := m.Write(ctx, &memory.WriteParams{Scope: scope, Text: strings.Repeat("unrelated note number ", 3) + string(rune('a'+i%26))}); err != nil {
				t.Fatal(err)
			}
		}
		r, err := m.Recall(ctx, &memory.RecallParams{Scopes: memory.Scopes{Project: "/src/app"}, Task: "cut the release", Budget: 400})
		if err != nil {
			t.Fatal(err)
		}
		if r.Tokens > 400 || r.Omitted == 0 || len(r.Entries) < 2 {
			t.Fatalf("recall: %d tokens of 400, %d entries, %d omitted", r.Tokens, len(r.Entries), r.Omitted)
		}
		if !r.Entries[0].Full || !strings.Contains(r.Entries[0].Text, "release-v3.sh") || r.Entries[1].Full {
			t.Errorf("first entries: %+v", r.Entries[:2])
		}
		if fam := agent.LookupFamily(""); fam.TextTokens(r.Section()) != r.Tokens {
			t.Errorf("Tokens %d is not the section's estimate", r.Tokens)
		}
	})
}

// An exported stream imports into another journal once, chain checked,
// with provenance and labels kept; a tampered export stores nothing.
func TestExportImport(t *testing.T) {
	backends(t, func(t *testing.T, open func(t *testing.T) journal.Store) {
		ctx := t.Context()
		src := open(t)
		m := memory.New(src, nil)
		e, err := m.Write(ctx, &memory.WriteParams{Scope: memory.TeamScope, Text: "build with make -j8", Labels: agent.MemoryLabels{Integrity: memory.Untrusted}, Source: memory.Source{Run: "r9"}})
		if err != nil {
			t.Fatal(err)
		}
		evs, err := m.Export(ctx, src)
		if err != nil {
			t.Fatal(err)
		}
		dst := memory.New(open(t), nil)
		bad := append([]journal.Event(nil), evs...)
		bad[0].Payload = []byte(strings.Replace(string(bad[0].Payload), "make", "curl", 1))
		if _, err := dst.Import(ctx, bad, "ann"); err == nil {
			t.Error("a tampered export was imported")
		}
		for want := range []int{1, 0} {
			res, err := dst.Import(ctx, evs, "ann")
			if err != nil || res.Imported != 1-want {
				t.Fatalf("Import = %+v, %v", res, err)
			}
		}
		got, err := dst.Get(ctx, e.ID)
		if err != nil || got.Text != e.Text || got.Labels.Integrity != memory.Untrusted || got.Source.Run != "r9" || got.Source.By != "ann" {
			t.Errorf("imported %+v, %v", got, err)
		}
	})
}
