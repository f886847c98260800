package cli_test

import (
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keel-run/keel/journal"
)

func TestAuditCommands(t *testing.T) {
	db := setup(t)
	ws := t.TempDir()
	traj := crashFixture(t)
	if code, _, errOut := keel(t, "run", "--model", "replay:"+traj, "--workspace", ws, "-q", "--no-wait"); code != 0 {
		t.Fatal(errOut)
	}
	id, _ := lastRun(t, db)
	out := filepath.Join(t.TempDir(), "export.jsonl")
	if code, _, errOut := keel(t, "audit", "export", id, "-o", out); code != 0 {
		t.Fatalf("export: %s", errOut)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	evs, torn, err := journal.ReadJSONL(f)
	f.Close()
	if err != nil || torn != nil || journal.Verify(id, evs) != nil || len(evs) < 30 {
		t.Fatalf("exported %d events: torn %v, %v", len(evs), torn, err)
	}
	for _, args := range [][]string{{"audit", "verify", id}, {"audit", "verify", "--all"}} {
		if code, out, errOut := keel(t, args...); code != 0 || !strings.Contains(out, "ok · head "+evs[len(evs)-1].Hash[:16]) {
			t.Errorf("keel %v = %d\n%s%s", args, code, out, errOut)
		}
	}
	// Change one stored byte behind Keel's back.
	raw, err := sql.Open("sqlite", db)
	if err != nil {
		t.Fatal(err)
	}
	var payload []byte
	if err := raw.QueryRow(`SELECT payload FROM events WHERE run_id = ? AND seq = 40`, id).Scan(&payload); err != nil {
		t.Fatal(err)
	}
	payload[len(payload)/2] ^= 0x01
	if _, err := raw.Exec(`UPDATE events SET payload = ? WHERE run_id = ? AND seq = 40`, payload, id); err != nil {
		t.Fatal(err)
	}
	raw.Close()
	code, outText, _ := keel(t, "audit", "verify", id)
	if code != 1 || !strings.Contains(outText, "BAD at event 40") {
		t.Errorf("audit verify after tampering = %d\n%s", code, outText)
	}
	if code, _, errOut := keel(t, "audit", "export", id); code != 1 || !strings.Contains(errOut, "corrupt at event 40") || !strings.Contains(errOut, "--unverified") {
		t.Errorf("export of a corrupt run = %d %q", code, errOut)
	}
	// For forensics, the events as stored, the bad one included.
	code, all, errOut := keel(t, "audit", "export", "--unverified", id)
	if code != 0 || strings.Count(all, "\n") < 40 {
		t.Errorf("export --unverified of a corrupt run = %d (%d lines) %q", code, strings.Count(all, "\n"), errOut)
	}
	if code, _, errOut := keel(t, "audit", "verify"); code != 2 || !strings.Contains(errOut, "--all") {
		t.Errorf("audit verify without arguments = %d %q", code, errOut)
	}
}

func TestDebugKnobErrors(t *testing.T) {
	for _, v := range []string{"nonsense=1", "crash_after_event=0", "crash_after_event=x"} {
		t.Run(v, func(t *testing.T) {
			setup(t)
			t.Setenv("KEEL_DEBUG", v)
			if code, _, errOut := keel(t, "runs", "list"); code != 1 || !strings.Contains(errOut, "KEEL_DEBUG") {
				t.Errorf("KEEL_DEBUG=%s: %d %q", v, code, errOut)
			}
		})
	}
}
