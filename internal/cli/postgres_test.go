package cli_test

import (
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
