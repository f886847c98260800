package server_test

import (
	"html"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/keel-run/keel/model/modeltest"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/service"
)

// The web UI's Rewind asks first, listing the files it would change,
// marking those changed both by the run and by hand since, and listing
// apart those only a person changed, which it leaves alone; after the
// rewind it says what it did with a button that undoes it (fresh-user
// trial 10, N24: the default Rewind of a finished run deleted a file made
// after the run, with no confirmation and no undo; report 12, B5: it
// still deleted it once confirmed).
func TestUIRewindConfirmsAndUndoes(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed: .ci/run installs it")
	}
	e := newEnv(t, &envOptions{checkpoints: true})
	ctx := t.Context()
	ws := t.TempDir()
	e.models.set("test:a", modeltest.NewScripted([]modeltest.Turn{
		modeltest.Calls("write", modeltest.Call("w1", "write_file", map[string]any{"path": "a.txt", "content": "the run's\n"})),
		modeltest.Text("done"),
	}, nil))
	run, err := e.admin.CreateRun(ctx, &api.CreateRun{Task: "t", Model: "test:a", Workspace: ws})
	if err != nil {
		t.Fatal(err)
	}
	if end := e.waitStop(run.ID, 1); !strings.HasPrefix(string(end.Type), "run.completed") {
		t.Fatalf("the run stopped with %s: %s", end.Type, end.Payload)
	}
	// A person's file, made after the run, and the run's file edited by
	// hand.
	notes := filepath.Join(ws, "notes.txt")
	if err := os.WriteFile(notes, []byte("mine\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "a.txt"), []byte("the run's, then mine\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, body := e.uiGet("/ui/runs/"+run.ID, e.secret)
	ms := regexp.MustCompile(`button class="rewind" data-to="(\d+)"`).FindAllStringSubmatch(body, -1)
	if code != http.StatusOK || len(ms) < 2 {
		t.Fatalf("run page = %d, want two checkpoints to rewind to:\n%s", code, body)
	}
	last := ms[len(ms)-1][1] // the run's last checkpoint: the form's default
	// The first click changes nothing and asks.
	code, body = e.uiDo(http.MethodPost, "/ui/runs/"+run.ID+"/rewind", e.secret, url.Values{"to": {"1"}}, "same-origin")
	text := html.UnescapeString(body)
	plan := regexp.MustCompile(`(?s)id="rewind-plan".*?</section>`).FindString(text)
	if code != http.StatusOK || !regexp.MustCompile(`D a.txt</code> <strong[^>]*>changed by the run and also outside it`).MatchString(plan) ||
		!regexp.MustCompile(`(?s)Left as they are.*<code>notes.txt`).MatchString(plan) || !strings.Contains(plan, `name="force" value="1"`) {
		t.Fatalf("rewind without confirm = %d, want the confirmation marking a.txt and leaving notes.txt:\n%s", code, plan)
	}
	if _, err := os.Stat(notes); err != nil {
		t.Fatalf("the confirmation changed the files: %v", err)
	}
	// The rewind to the run's last checkpoint (the form's default) would
	// only undo the person's work: it changes nothing, and says so.
	_, body = e.uiDo(http.MethodPost, "/ui/runs/"+run.ID+"/rewind", e.secret, url.Values{"to": {last}}, "same-origin")
	plan = regexp.MustCompile(`(?s)id="rewind-plan".*?</section>`).FindString(html.UnescapeString(body))
	if !strings.Contains(plan, "No file would change") || !strings.Contains(plan, "<code>notes.txt") || !strings.Contains(plan, "<code>a.txt") || strings.Contains(plan, "rewind-confirm") {
		t.Errorf("rewind to %s: the confirmation:\n%s", last, plan)
	}
	// Confirmed without force (a file changed by both since the plan,
	// say): refused, nothing changed.
	code, body = e.uiDo(http.MethodPost, "/ui/runs/"+run.ID+"/rewind", e.secret, url.Values{"to": {"1"}, "confirm": {"1"}}, "same-origin")
	if code != http.StatusConflict || !strings.Contains(html.UnescapeString(body), "a.txt") {
		t.Errorf("confirmed rewind without force = %d, want 409 naming a.txt", code)
	}
	// Confirmed as the plan's form does: done, and the page says what
	// changed and what it left, with the undo.
	code, _, resp := e.uiResp(http.MethodPost, "/ui/runs/"+run.ID+"/rewind", e.secret, url.Values{"to": {"1"}, "confirm": {"1"}, "force": {"1"}}, "same-origin")
	if code != http.StatusSeeOther {
		t.Fatalf("confirmed rewind = %d", code)
	}
	if b, err := os.ReadFile(notes); err != nil || string(b) != "mine\n" {
		t.Errorf("after the rewind notes.txt = %q, %v; want it left as the person wrote it", b, err)
	}
	if _, err := os.Stat(filepath.Join(ws, "a.txt")); !os.IsNotExist(err) {
		t.Errorf("after the rewind a.txt is still there: %v", err)
	}
	loc := resp.Header.Get("Location")
	code, body = e.uiGet(loc, e.secret)
	undo := regexp.MustCompile(`name="to" value="(\d+)"><input type="hidden" name="confirm" value="1"><button id="rewind-undo"`).FindStringSubmatch(body)
	if code != http.StatusOK || undo == nil || !strings.Contains(body, "D a.txt") || !regexp.MustCompile(`id="rewind-kept"><li><code>notes.txt`).MatchString(body) {
		t.Fatalf("the page after the rewind (%s) = %d, want what changed, what was left and an undo:\n%s", loc, code, body)
	}
	// What became of the run, as keel runs rewind says it (report 15,
	// P10).
	if !strings.Contains(body, `<p id="rewind-note">`+service.RewindNote("completed")) {
		t.Errorf("the page after the rewind does not say the run stays completed:\n%s", body)
	}
	if code, _ := e.uiDo(http.MethodPost, "/ui/runs/"+run.ID+"/rewind", e.secret, url.Values{"to": {undo[1]}, "confirm": {"1"}}, "same-origin"); code != http.StatusSeeOther {
		t.Fatalf("undo = %d", code)
	}
	for name, want := range map[string]string{"notes.txt": "mine\n", "a.txt": "the run's, then mine\n"} {
		if b, err := os.ReadFile(filepath.Join(ws, name)); err != nil || string(b) != want {
			t.Errorf("after the undo %s = %q, %v; want %q", name, b, err, want)
		}
	}
}
