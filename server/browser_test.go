package server_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/testenv"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/model/modeltest"
	"github.com/keel-run/keel/server/api"
)

// shot saves a screenshot of the tab as NAME.png in $KEEL_UI_SHOTS, when
// that is set (for reviewing the pages by eye).
func shot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir := os.Getenv("KEEL_UI_SHOTS")
	if dir == "" {
		return
	}
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1366, 900)); err != nil {
		t.Logf("screenshot %s: %v", name, err)
		return
	}
	b, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Logf("screenshot %s: %v", name, err)
		return
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), b, 0o644); err != nil {
		t.Log(err)
	}
}

func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.TextContent(chromedp.CSS(sel)))
	if err != nil {
		t.Fatalf("text of %s: %v", sel, err)
	}
	return s
}

// The run page in the browser, from start to fork: a person signs in,
// starts the demo run, watches the conversation live (the failing tests'
// output appears as the command finishes), sees the edit waiting for
// approval as a diff (also in the inbox, in a second tab), approves it
// "always for this run" with a reason, watches the run complete with the
// file in the files panel, sends a follow-up, rewinds the files to the
// first checkpoint (the file on disk is restored), and forks the run
// from the checkpoint after the edit. Each action is journaled in the
// person's name.
func TestBrowserRunPage(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed: .ci/run installs it")
	}
	e := newEnv(t, &envOptions{checkpoints: true})
	ctx, cancel := testenv.Browser(t)
	defer cancel()
	code, err := e.h.LoginCode(t.Context(), e.secret)
	if err != nil {
		t.Fatal(err)
	}
	q := func(s string) chromedp.CSS { return chromedp.CSS(s) }
	err = chromedp.Do(ctx,
		chromedp.Navigate(e.srv.URL+"/ui/login?code="+code),
		chromedp.Click(q(`#sign-in`)),
		chromedp.WaitVisible(q(`#start-demo`)),
		chromedp.Click(q(`#start-demo`)),
		// The conversation follows the run: the tests' output, then the
		// edit waiting for approval.
		chromedp.WaitVisible(q(`#call-demo_3.done, #call-demo_3 details.done`)),
		chromedp.WaitVisible(q(`#call-demo_4 details.asked`)),
	)
	if err != nil {
		t.Fatalf("start the demo run: %v", err)
	}
	runURL, err := chromedp.Run(ctx, chromedp.Location())
	if err != nil {
		t.Fatal(err)
	}
	runID := runURL[strings.LastIndex(runURL, "/")+1:]
	run, err := e.admin.Run(t.Context(), runID)
	if err != nil {
		t.Fatalf("the page %s is not a run's: %v", runURL, err)
	}
	if out := text(t, ctx, `#call-demo_3 pre.output`); !strings.Contains(out, "FAILED") {
		t.Errorf("the failing tests' output is not shown:\n%s", out)
	}
	shot(t, ctx, "1-waiting-for-approval")

	// The edit is a diff, on the run page and in the inbox.
	card := `section.approval[data-run="` + runID + `"]`
	for _, want := range []string{`-    return len(text.split(" "))`, `+    return len(text.split())`, "@@"} {
		if d := text(t, ctx, card+` pre.diff`); !strings.Contains(d, want) {
			t.Errorf("the approval's diff lacks %q:\n%s", want, d)
		}
	}
	inbox, cancelInbox := chromedp.NewContext(ctx)
	defer cancelInbox()
	if err := chromedp.Do(inbox, chromedp.Navigate(e.srv.URL+"/ui/approvals"), chromedp.WaitVisible(q(card+` pre.diff .add`))); err != nil {
		t.Fatalf("the inbox shows no diff: %v", err)
	}
	cancelInbox()

	// Approve, always for this run, with a reason.
	err = chromedp.Do(ctx,
		chromedp.SendKeys(q(card+` input[name=reason]`), "the fix is right"),
		testenv.ClickLive(card+` button.always-run`),
		chromedp.WaitVisible(q(`#conversation .end.completed`)),
		chromedp.WaitVisible(q(`#files details.filediff[data-path="textstats.py"]`)),
		chromedp.WaitVisible(q(`#run-status[data-status="completed"]`)),
		chromedp.WaitNotPresent(q(`#run-status .status.executing`)),
	)
	if err != nil {
		t.Fatalf("approve and watch the run complete: %v", err)
	}
	var resolved *agent.ApprovalResolved
	for _, ev := range e.events(runID) {
		if ev.Type == journal.ApprovalResolved {
			v, _ := agent.Decode(&ev)
			resolved = v.(*agent.ApprovalResolved)
		}
	}
	if resolved == nil || resolved.By != "ada" || resolved.Reason != "the fix is right" || resolved.Remember != "run" {
		t.Errorf("approval.resolved %+v, want ada's, with the reason, remembered for the run", resolved)
	}
	if d := text(t, ctx, `#files`); !strings.Contains(d, "+    return len(text.split())") {
		t.Errorf("the files panel lacks the edit:\n%s", d)
	}
	// Only the buttons that apply: a completed run takes a follow-up,
	// not a cancel.
	if n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#cancel, #resume").length`)); err != nil || n != 0 {
		t.Errorf("a completed run offers %d cancel/resume buttons (%v)", n, err)
	}
	shot(t, ctx, "2-completed")

	// A follow-up message.
	err = chromedp.Do(ctx,
		chromedp.SendKeys(q(`#message`), "please also count tabs"),
		chromedp.Click(q(`#send`)),
		chromedp.WaitVisible(chromedp.Search(`//div[contains(@class,"msg") and contains(., "please also count tabs")]`)),
		chromedp.WaitVisible(chromedp.Search(`//div[contains(@class,"assistant") and contains(., "Follow-up received")]`)),
		chromedp.WaitVisible(q(`#run-status[data-status="completed"]`)),
	)
	if err != nil {
		t.Fatalf("send a follow-up: %v", err)
	}
	shot(t, ctx, "3-follow-up")

	// Rewind the files to the first checkpoint: the edit is undone on
	// disk, and the conversation says so.
	ws := run.Workspace
	if b, _ := os.ReadFile(filepath.Join(ws, "textstats.py")); !strings.Contains(string(b), "text.split())") {
		t.Fatalf("the edit is not in the workspace:\n%s", b)
	}
	attr, err := chromedp.Run(ctx, chromedp.AttributeValue(q(`#conversation .files-note.checkpoint button.rewind`), "data-to"))
	if err != nil {
		t.Fatal(err)
	}
	first := attr.Value
	edited, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(() => { for (const n of document.querySelectorAll("#conversation .files-note.checkpoint")) if (n.textContent.includes("textstats.py")) return n.dataset.seq; return ""; })()`))
	if err != nil {
		t.Fatal(err)
	}
	if edited == "" {
		t.Fatal("no checkpoint names textstats.py")
	}
	// A person's file made after the run: the rewind leaves it, and the
	// confirmation says so first (trial 10, N24: the button deleted it
	// at once, with no undo; report 12, B5: once confirmed, it still
	// deleted it).
	later := filepath.Join(ws, "notes.txt")
	if err := os.WriteFile(later, []byte("a person's notes\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	err = chromedp.Do(ctx,
		testenv.ClickLive(`#conversation .files-note.checkpoint button.rewind[data-to="`+first+`"]`),
		chromedp.WaitVisible(q(`#rewind-plan`)),
	)
	if err != nil {
		t.Fatalf("rewind: %v", err)
	}
	if d := text(t, ctx, `#rewind-plan`); !strings.Contains(d, "M textstats.py") || !regexp.MustCompile(`Left as they are.*\nnotes.txt`).MatchString(d) {
		t.Errorf("the rewind's confirmation: %q", d)
	}
	if _, err := os.Stat(later); err != nil {
		t.Fatalf("the confirmation changed the files: %v", err)
	}
	err = chromedp.Do(ctx,
		chromedp.Click(q(`#rewind-confirm`)),
		chromedp.WaitVisible(q(`#rewind-undo`)),
		chromedp.WaitVisible(q(`#conversation .files-note.restored`)),
	)
	if err != nil {
		t.Fatalf("confirm the rewind: %v", err)
	}
	b, _ := os.ReadFile(filepath.Join(ws, "textstats.py"))
	if !strings.Contains(string(b), `text.split(" ")`) {
		t.Errorf("after the rewind the workspace still has the edit:\n%s", b)
	}
	d := text(t, ctx, `#rewound`)
	undo := regexp.MustCompile(`--to (\d+)`).FindStringSubmatch(d)
	if !strings.Contains(d, "M textstats.py") || !strings.Contains(d, "notes.txt") || undo == nil {
		t.Fatalf("the rewind's account: %q", d)
	}
	if b, err := os.ReadFile(later); err != nil || string(b) != "a person's notes\n" {
		t.Errorf("the rewind did not leave the person's file: %q, %v", b, err)
	}
	// Its undo puts the run's edit back; rewind again for the rest.
	err = chromedp.Do(ctx,
		chromedp.Click(q(`#rewind-undo`)),
		chromedp.WaitVisible(chromedp.Search(`//section[@id="rewound"]/p[contains(., "checkpoint of event `+undo[1]+` ")]`)),
	)
	if err != nil {
		t.Fatalf("undo the rewind: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "textstats.py")); !strings.Contains(string(b), "text.split())") {
		t.Errorf("the undo did not put the run's edit back:\n%s", b)
	}
	if err := os.Remove(later); err != nil {
		t.Fatal(err)
	}
	err = chromedp.Do(ctx,
		testenv.ClickLive(`#conversation .files-note.checkpoint button.rewind[data-to="`+first+`"]`),
		chromedp.WaitVisible(q(`#rewind-confirm`)),
		chromedp.Click(q(`#rewind-confirm`)),
		chromedp.WaitVisible(q(`#rewind-undo`)),
	)
	if err != nil {
		t.Fatalf("rewind again: %v", err)
	}
	b, _ = os.ReadFile(filepath.Join(ws, "textstats.py"))
	if !strings.Contains(string(b), `text.split(" ")`) {
		t.Errorf("after the rewind the workspace still has the edit:\n%s", b)
	}
	if d := text(t, ctx, `#conversation .files-note.restored`); !strings.Contains(d, "M textstats.py") || !strings.Contains(d, "ada") {
		t.Errorf("the rewind's entry: %q", d)
	}
	if got, _ := e.admin.Run(t.Context(), runID); got.Status != "completed" {
		t.Errorf("after the rewind the run is %s", got.Status)
	}
	shot(t, ctx, "4-rewound")

	// Fork from the checkpoint after the edit: a new run whose files have
	// the edit, which goes on to complete.
	err = chromedp.Do(ctx,
		testenv.ClickLive(`#conversation .files-note.checkpoint button.fork-here[data-seq="`+edited+`"]`),
		chromedp.WaitVisible(chromedp.Search(`//dt[.="Forked from"]`)),
		chromedp.WaitVisible(q(`#conversation .files-note.restored`)),
		chromedp.WaitVisible(q(`#run-status[data-status="completed"]`)),
	)
	if err != nil {
		t.Fatalf("fork: %v", err)
	}
	forkURL, err := chromedp.Run(ctx, chromedp.Location())
	if err != nil {
		t.Fatal(err)
	}
	fork, err := e.admin.Run(t.Context(), forkURL[strings.LastIndex(forkURL, "/")+1:])
	if err != nil || fork.ForkOf != runID+"@"+edited {
		t.Fatalf("the fork %+v (%v), want a fork of %s@%s", fork, err, runID, edited)
	}
	if b, _ := os.ReadFile(filepath.Join(fork.Workspace, "textstats.py")); !strings.Contains(string(b), "text.split())") || fork.Workspace == ws {
		t.Errorf("the fork's workspace %s lacks the edit:\n%s", fork.Workspace, b)
	}
	shot(t, ctx, "5-fork")
	if err := chromedp.Do(ctx, chromedp.Navigate(e.srv.URL+"/ui/runs"), chromedp.WaitVisible(q(`#runs-chart`))); err != nil {
		t.Fatalf("the dashboard: %v", err)
	}
	shot(t, ctx, "6-dashboard")
}

// In the browser: each approval card shows its call id, workspace and who
// started the run, and its Approve button decides the call it shows, even
// for ids a browser would normalise as a path ("B/../A"); the other
// approval of the run stays in the inbox. Following another person's
// sign-in link while signed in changes nothing until its button is
// pressed.
func TestBrowserApprovalCardDecidesItsCall(t *testing.T) {
	e := newEnv(t, nil)
	ws := t.TempDir()
	run := e.askingRun(ws,
		modeltest.Call("A", "write_file", map[string]string{"path": "README", "content": "a"}),
		modeltest.Call("B/../A", "write_file", map[string]string{"path": "notes.txt", "content": "b"}))
	ctx, cancel := testenv.Browser(t)
	defer cancel()
	sel := func(s string) chromedp.CSS { return chromedp.CSS(s) }
	code, err := e.h.LoginCode(t.Context(), e.secret)
	if err != nil {
		t.Fatal(err)
	}
	cardB := `section.approval[data-call="B/../A"]`
	if err := chromedp.Do(ctx,
		chromedp.Navigate(e.srv.URL+"/ui/login?code="+code),
		chromedp.Click(sel(`#sign-in`)),
		chromedp.WaitVisible(sel(`#start-demo`)),
		chromedp.Navigate(e.srv.URL+"/ui/approvals"),
		chromedp.WaitVisible(sel(cardB)),
	); err != nil {
		t.Fatalf("open the inbox: %v", err)
	}
	facts, err := chromedp.Run(ctx, chromedp.Text(sel(cardB+` dl`)))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"B/../A", ws, "the server's machine"} {
		if !strings.Contains(facts, want) {
			t.Errorf("the card lacks %q:\n%s", want, facts)
		}
	}
	if err := chromedp.Do(ctx,
		testenv.ClickLive(cardB+` button.approve`),
		chromedp.WaitVisible(sel(`#timeline`)),
	); err != nil {
		t.Fatalf("approve: %v", err)
	}
	var decided []string
	for _, ev := range e.events(run) {
		if ev.Type == journal.ApprovalResolved {
			v, _ := agent.Decode(&ev)
			decided = append(decided, v.(*agent.ApprovalResolved).CallID)
		}
	}
	if len(decided) != 1 || decided[0] != "B/../A" {
		t.Fatalf("the B/../A card decided %v", decided)
	}
	if err := chromedp.Do(ctx,
		chromedp.Navigate(e.srv.URL+"/ui/approvals"),
		chromedp.WaitVisible(sel(`section.approval[data-call="A"]`)),
	); err != nil {
		t.Errorf("the other approval left the inbox: %v", err)
	}

	// Another person's sign-in link does not replace the session by
	// itself.
	writer := e.newToken("wendy", nil, api.ScopeRunsWrite)
	wcode, err := e.h.LoginCode(t.Context(), writer)
	if err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx,
		chromedp.Navigate(e.srv.URL+"/ui/login?code="+wcode),
		chromedp.WaitVisible(sel(`#current-session`)),
		chromedp.Navigate(e.srv.URL+"/ui/runs"),
	); err != nil {
		t.Fatal(err)
	}
	page, err := chromedp.Run(ctx, chromedp.Text(sel(`header .who`)))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(page, "ada") || strings.Contains(page, "wendy") {
		t.Errorf("after opening wendy's link the page is signed in as %q, want ada", page)
	}
}
