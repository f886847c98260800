package cli_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/testenv"
	"github.com/keel-run/keel/journal"
)

// keel run --db postgres://... runs the recorded trajectory to completion
// on a PostgreSQL journal, and the runs commands read it there.
func TestReplayRunPostgres(t *testing.T) {
	setup(t)
	dsn := testenv.Postgres(t)
	ws := t.TempDir()
	code, _, errOut := keel(t, "run", "--db", dsn, "--model", "replay:"+trajectory, "--workspace", ws, "--mount-path", "/testbed", "--env", "PYTHONPATH=/testbed/src", "-q")
	if code != 0 {
		t.Fatalf("keel run --db postgres = %d\n%s", code, errOut)
	}
	s, err := journal.Open(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	runs, err := s.Runs(t.Context(), &journal.ListParams{Limit: 1})
	if err != nil || len(runs) != 1 {
		t.Fatalf("runs %v, %v", runs, err)
	}
	id := runs[0].RunID
	evs, err := journal.ReadVerified(t.Context(), s, id)
	if err != nil {
		t.Fatal(err)
	}
	st, err := agent.Fold(id, evs)
	if err != nil {
		t.Fatal(err)
	}
	if st.Status != journal.StatusCompleted || st.Steps != 74 {
		t.Errorf("run %s: %s after %d steps", id, st.Status, st.Steps)
	}
	checkOneResultPerCall(t, st)
	code, out, _ := keel(t, "runs", "show", "--db", dsn, id)
	if code != 0 || !strings.Contains(out, "hash chain verified") {
		t.Errorf("runs show --db postgres = %d:\n%s", code, out)
	}
	code, out, _ = keel(t, "audit", "verify", "--all", "--db", dsn)
	if code != 0 {
		t.Errorf("audit verify --all = %d:\n%s", code, out)
	}
}

// A run paused for approval on a laptop's SQLite journal moves to a
// PostgreSQL journal (keel runs export | keel runs import), is approved
// and completes there, and moves back: the chain verifies everywhere and
// the approved command ran once.
func TestMoveRunBetweenJournals(t *testing.T) {
	ws, db, traj, pol := approvalSetup(t)
	code, _, errOut := keel(t, "run", "--db", db, "--model", "replay:"+traj, "--workspace", ws, "--policy", pol, "--no-wait", "-q")
	if code != 3 {
		t.Fatalf("run = %d, want 3 (paused)\n%s", code, errOut)
	}
	id := onlyRun(t, db)
	file := filepath.Join(t.TempDir(), "run.jsonl")
	if code, _, errOut := keel(t, "runs", "export", "--db", db, id, "-o", file); code != 0 {
		t.Fatalf("runs export = %d\n%s", code, errOut)
	}
	pg := testenv.Postgres(t)
	code, out, errOut := keel(t, "runs", "import", "--db", pg, file)
	if code != 0 || !strings.Contains(out, "imported run "+id) || !strings.Contains(out, "chain verified, paused") {
		t.Fatalf("runs import = %d\n%s%s", code, out, errOut)
	}
	if code, out, _ := keel(t, "runs", "import", "--db", pg, file); code != 0 || !strings.Contains(out, "already in this journal") {
		t.Errorf("second import = %d %q", code, out)
	}
	code, out, _ = keel(t, "approvals", "list", "--db", pg)
	if code != 0 || !strings.Contains(out, id) {
		t.Fatalf("approvals list on postgres = %d\n%s", code, out)
	}
	store, err := journal.Open(t.Context(), pg)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	list, err := agent.NewRuntime(store, nil).Approvals(t.Context(), nil)
	if err != nil || len(list) != 1 {
		t.Fatalf("approvals %+v %v", list, err)
	}
	if code, _, errOut := keel(t, "approve", "--db", pg, id, list[0].CallID, "-q"); code != 0 {
		t.Fatalf("approve on postgres = %d\n%s", code, errOut)
	}
	evs, err := journal.ReadVerified(t.Context(), store, id)
	if err != nil {
		t.Fatal(err)
	}
	st, err := agent.Fold(id, evs)
	if err != nil || st.Status != journal.StatusCompleted {
		t.Fatalf("after approval on postgres: %v %v", st.Status, err)
	}
	if n := startsOf(evs, list[0].CallID); n != 1 {
		t.Errorf("the approved call started %d times", n)
	}
	// And back to a fresh SQLite file, the completed run whole.
	back := filepath.Join(t.TempDir(), "back.jsonl")
	if code, _, errOut := keel(t, "runs", "export", "--db", pg, id, "-o", back); code != 0 {
		t.Fatalf("export from postgres = %d\n%s", code, errOut)
	}
	db2 := filepath.Join(t.TempDir(), "laptop.db")
	if code, out, errOut := keel(t, "runs", "import", "--db", db2, back); code != 0 || !strings.Contains(out, "completed") {
		t.Fatalf("import into sqlite = %d\n%s%s", code, out, errOut)
	}
	if code, _, errOut := keel(t, "runs", "import", "--db", db, back); code != 0 {
		t.Fatalf("import of the longer run over its own prefix = %d\n%s", code, errOut)
	}
	if code, out, _ := keel(t, "audit", "verify", "--all", "--db", db2); code != 0 {
		t.Errorf("audit verify on the imported journal = %d\n%s", code, out)
	}
	// A file with a tampered event stores nothing.
	raw, _ := os.ReadFile(back)
	bad := filepath.Join(t.TempDir(), "bad.jsonl")
	os.WriteFile(bad, []byte(strings.Replace(string(raw), "old.log", "new.log", 1)), 0o600)
	db3 := filepath.Join(t.TempDir(), "other.db")
	if code, _, errOut := keel(t, "runs", "import", "--db", db3, bad); code == 0 || !strings.Contains(errOut, "nothing was stored") {
		t.Errorf("import of a tampered file = %d %q", code, errOut)
	}
}
