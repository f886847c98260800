package cli_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/assemble"
	"github.com/keel-run/keel/internal/cli"
	"github.com/keel-run/keel/internal/testclock"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/sqlite"
	"github.com/keel-run/keel/model/replay"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/schedule"
)

// replayRunner starts a schedule's runs as replays of a recorded
// trajectory in the Linux sandbox, executed in this process, the way
// keel run builds them (until the service's create takes this place).
type replayRunner struct {
	rt   *agent.Runtime
	home string
	ws   string
	rec  *replay.Trajectory
	path string

	wg   sync.WaitGroup
	mu   sync.Mutex
	errs []error
}

func (r *replayRunner) Start(ctx context.Context, p *schedule.StartParams) error {
	c := &agent.RunCreated{Task: r.rec.Task(), System: r.rec.System(), Model: "replay:" + r.path, CompletionMarker: cli.DefaultCompletionMarker,
		Workspace: r.ws, MountPath: "/testbed", Sandbox: "linux", Env: []string{"PYTHONPATH=/testbed/src"}, Principal: p.Agent, Labels: p.Labels,
		Policy: agent.NewPolicyRef(policy.Default()), StateDir: assemble.StateDir(r.home, r.ws), Limits: agent.Limits{MaxSteps: 200}}
	asm := &assemble.Assembler{Home: r.home}
	w, err := asm.Assemble(ctx, c, &assemble.Params{Recording: r.rec})
	if err != nil {
		return err
	}
	c.Tools = w.ToolInfos()
	b, _ := json.Marshal(c)
	if _, err := r.rt.Store().Append(ctx, p.RunID, 0, journal.Draft{Type: journal.RunCreated, Time: time.Now(), Payload: b}); err != nil {
		w.Close()
		if errors.Is(err, journal.ErrConflict) {
			return schedule.ErrRunExists
		}
		return err
	}
	r.wg.Go(func() {
		defer w.Close()
		if _, err := r.rt.Execute(context.WithoutCancel(ctx), p.RunID, &agent.ExecParams{Wiring: w.Wiring}); err != nil {
			r.mu.Lock()
			r.errs = append(r.errs, err)
			r.mu.Unlock()
		}
	})
	return nil
}

func (r *replayRunner) Status(ctx context.Context, id string) (journal.Status, error) {
	evs, err := r.rt.Store().Read(ctx, id, 1)
	if err != nil {
		return "", err
	}
	return journal.StatusOf(evs[len(evs)-1].Type), nil
}

func (r *replayRunner) Cancel(ctx context.Context, id, reason string) error { return nil }

// TestScheduledReplay: a schedule fires; its run replays the recorded
// 74-turn marshmallow trajectory unattended (the default policy, the
// Linux sandbox, a clone at the task's base commit) and ends with the
// recorded patch; the schedule records the fire and the run's end.
// Skipped unless KEEL_MARSHMALLOW_GIT names a clone or mirror of
// marshmallow-code/marshmallow.
func TestScheduledReplay(t *testing.T) {
	repo := os.Getenv("KEEL_MARSHMALLOW_GIT")
	if repo == "" {
		t.Skip("KEEL_MARSHMALLOW_GIT is not set (a clone or mirror of marshmallow-code/marshmallow)")
	}
	var spec struct {
		BaseCommit string `json:"base_commit"`
	}
	b, err := os.ReadFile(filepath.Join("..", "..", "testdata", "trajectories", "spec.json"))
	if err != nil {
		t.Fatal(err)
	}
	json.Unmarshal(b, &spec)
	home, ws := t.TempDir(), filepath.Join(t.TempDir(), "testbed")
	for _, args := range [][]string{{"clone", "-q", repo, ws}, {"-C", ws, "checkout", "-q", spec.BaseCommit}} {
		if out, err := exec.Command("git", args...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
	}
	path, err := filepath.Abs(trajectory)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := replay.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	store, err := sqlite.Open(filepath.Join(home, "keel.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	rt := agent.NewRuntime(store, nil)
	r := &replayRunner{rt: rt, home: home, ws: ws, rec: rec, path: path}
	clk := testclock.New(time.Now().UTC().Truncate(time.Hour))
	s := schedule.New(store, r, &schedule.Options{Clock: clk.Now})
	if _, err := s.Create(t.Context(), &schedule.Schedule{Name: "nightly-fix", Agent: "keel-cli", Spec: schedule.Spec{Cron: "0 3 * * *", TimeZone: "Europe/Berlin"},
		Task: "fix marshmallow issue 1359 ({{.Time.Format \"2006-01-02\"}})"}); err != nil {
		t.Fatal(err)
	}
	clk.Add(25 * time.Hour)
	t0 := time.Now()
	if err := s.Tick(t.Context()); err != nil {
		t.Fatal(err)
	}
	r.wg.Wait()
	if len(r.errs) > 0 {
		t.Fatal(r.errs)
	}
	if err := s.Tick(t.Context()); err != nil { // records the run's end
		t.Fatal(err)
	}
	fires, err := s.Fires(t.Context(), "nightly-fix", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(fires) != 1 || fires[0].RunStatus != journal.StatusCompleted {
		t.Fatalf("fires = %+v", fires)
	}
	diff, err := exec.Command("git", "-C", ws, "diff").Output()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := stripIndex(string(diff)), stripIndex(rec.Submission()); got != want {
		t.Errorf("the workspace's diff is not the recorded patch:\n%s\nwant:\n%s", got, want)
	}
	evs, _ := store.Read(t.Context(), fires[0].RunID, 1)
	t.Logf("scheduled run %s (%s): %d events, completed with the recorded patch in %s", fires[0].RunID, fires[0].Outcome, len(evs), time.Since(t0).Round(time.Second))
}
