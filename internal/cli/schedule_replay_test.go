package cli_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/sqlite"
	"github.com/keel-run/keel/model/replay"
	"github.com/keel-run/keel/schedule"
)

// TestScheduledReplay: a schedule made with keel schedules create
// --server fires on keel serve's own scheduler at its nominal time; its
// run, created through the service, replays the recorded 74-turn
// marshmallow trajectory unattended (Keel's default policy, the Linux
// sandbox, a clone at the task's base commit) and ends with the recorded
// patch; keel schedules show prints the fire and the run's end. Skipped
// unless KEEL_MARSHMALLOW_GIT names a clone or mirror of
// marshmallow-code/marshmallow.
func TestScheduledReplay(t *testing.T) {
	ws := marshmallowAtBase(t)
	db := setup(t)
	path, err := filepath.Abs(trajectory)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := replay.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	// Keel's default policy can ask: the schedule names a sink (a webhook
	// receiver here), as an unattended setup must.
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer hook.Close()
	t.Setenv("OPS_HOOK_SECRET", "whsec_"+strings.Repeat("QUJD", 8))
	config := "[notify.sinks.ops]\nkind = \"webhook\"\nurl = \"" + hook.URL + "\"\nsecret_env = \"OPS_HOOK_SECRET\"\n"
	if err := os.WriteFile(filepath.Join(filepath.Dir(db), "config.toml"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServe(t)
	// One nominal time: the next whole minute (at least 5 s from now).
	fire := time.Now().Add(5 * time.Second).Truncate(time.Minute).Add(time.Minute)
	code, out, errOut := keel(t, "schedules", "create", "nightly-fix", "--server", s.url, "--every", "1m", "--end", fire.Add(time.Second).Format(time.RFC3339),
		"--task", "{{"+strconv.Quote(rec.Task())+"}}", "--model", "replay:"+path, "--workspace", ws, "--mount-path", "/testbed",
		"--env", "PYTHONPATH=/testbed/src", "--max-steps", "200", "--notify", "ops")
	if code != 0 {
		t.Fatalf("keel schedules create = %d\n%s%s", code, out, errOut)
	}
	id := strings.TrimSuffix(strings.Fields(out)[3], ")")[1:]
	store, err := sqlite.Open(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	// The fire's record, then the run's end in the schedule's stream.
	var f schedule.Fire
	t0 := time.Now()
	for ev, err := range journal.Follow(ctx, store, schedule.StreamPrefix+id, 1, 200*time.Millisecond) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type == schedule.Fired {
			json.Unmarshal(ev.Payload, &f)
		}
		if ev.Type == schedule.RunEnded {
			break
		}
	}
	if f.Outcome != schedule.OutcomeFired || !f.Nominal.Equal(fire.UTC()) {
		t.Fatalf("the fire: %+v (want fired at %s)", f, fire.UTC())
	}
	events, err := store.Read(ctx, f.RunID, 1)
	if err != nil {
		t.Fatal(err)
	}
	if last := events[len(events)-1]; last.Type != journal.RunCompleted {
		t.Fatalf("the scheduled run ended with %s", last.Type)
	}
	diff, err := exec.Command("git", "-C", ws, "diff").Output()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := stripIndex(string(diff)), stripIndex(rec.Submission()); got != want {
		t.Errorf("the workspace's diff is not the recorded patch:\n%s\nwant:\n%s", got, want)
	}
	code, out, errOut = keel(t, "schedules", "show", "nightly-fix", "--server", s.url)
	if code != 0 || !strings.Contains(out, "fired") || !strings.Contains(out, f.RunID) || !strings.Contains(out, "completed") {
		t.Errorf("keel schedules show = %d\n%s%s", code, out, errOut)
	}
	t.Logf("scheduled run %s: %d events, completed with the recorded patch %s after its nominal time (the test took %s)", f.RunID, len(events),
		events[len(events)-1].Time.Sub(f.Nominal).Round(time.Second), time.Since(t0).Round(time.Second))
}
