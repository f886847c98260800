package server_test

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/model/modeltest"
	"github.com/keel-run/keel/server/api"
)

// chromium returns Debian's chromium (installed by .ci/run), or skips.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("no chromium: .ci/run installs Debian's chromium package (apt-get install -y chromium)")
	return ""
}

// browser starts a fresh headless chromium and returns a context for its
// first tab.
func browser(t *testing.T) (context.Context, context.CancelFunc) {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium(t)),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		// Chromium leaves org.chromium.Chromium.* files in its TMPDIR.
		chromedp.Env("TMPDIR=" + t.TempDir()),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(t.Context(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	ctx, cancelTime := context.WithTimeout(ctx, 2*time.Minute)
	return ctx, func() { cancelTime(); cancelTab(); cancelAlloc() }
}

// A person signs in, starts the demo run from the runs page, watches its
// timeline pause for the edit, approves the raw action in the inbox (in
// a second tab), and sees the first tab's timeline, live over SSE, show
// the run complete. The approval in the journal names the person.
func TestBrowserApproveDemoRun(t *testing.T) {
	e := newEnv(t, nil)
	ctx, cancel := browser(t)
	defer cancel()

	sel := func(s string) chromedp.CSS { return chromedp.CSS(s) }
	code, err := e.h.LoginCode(t.Context(), e.secret)
	if err != nil {
		t.Fatal(err)
	}
	err = chromedp.Do(ctx,
		chromedp.Navigate(e.srv.URL+"/ui/login?code="+code),
		chromedp.Click(sel(`#sign-in`)),
		chromedp.WaitVisible(sel(`#start-demo`)),
		chromedp.Click(sel(`#start-demo`)),
		// The run's page: its timeline follows the run until it asks.
		chromedp.WaitVisible(sel(`#timeline tr.ev.approval`)),
	)
	if err != nil {
		t.Fatalf("start the demo run: %v", err)
	}
	runURL, err := chromedp.Run(ctx, chromedp.Location())
	if err != nil {
		t.Fatal(err)
	}
	runID := runURL[strings.LastIndex(runURL, "/")+1:]
	if _, err := e.admin.Run(t.Context(), runID); err != nil {
		t.Fatalf("the page %s is not a run's: %v", runURL, err)
	}

	// A second tab: the inbox shows the raw action; approve it there.
	inbox, cancelInbox := chromedp.NewContext(ctx)
	defer cancelInbox()
	card := `section.approval[data-run="` + runID + `"]`
	err = chromedp.Do(inbox, chromedp.Navigate(e.srv.URL+"/ui/approvals"), chromedp.WaitVisible(sel(card)))
	if err != nil {
		t.Fatalf("open the inbox: %v", err)
	}
	action, err := chromedp.Run(inbox, chromedp.Text(sel(card+` pre.action`)))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"edit_file", `"old_string": "    return len(text.split(\" \"))"`, `"new_string": "    return len(text.split())"`} {
		if !strings.Contains(action, want) {
			t.Errorf("the inbox's raw action lacks %q:\n%s", want, action)
		}
	}
	err = chromedp.Do(inbox,
		chromedp.SendKeys(sel(card+` input[name=reason]`), "the fix is right"),
		chromedp.Click(sel(card+` button.approve`)),
		chromedp.WaitVisible(sel(`#timeline`)),
	)
	if err != nil {
		t.Fatalf("approve: %v", err)
	}

	// The first tab was never reloaded: its timeline shows the rest of
	// the run as it happens, and its summary stops saying "executing"
	// once the execution ends (no event follows run.completed).
	if err := chromedp.Do(ctx,
		chromedp.WaitVisible(sel(`#timeline tr.ev.end.completed`)),
		chromedp.WaitVisible(sel(`#run-status[data-status="completed"]`)),
		chromedp.WaitNotPresent(sel(`#run-status .status.executing`)),
	); err != nil {
		t.Fatalf("watch the run complete: %v", err)
	}
	endRow, err := chromedp.Run(ctx, chromedp.Text(sel(`#timeline tr.ev.end.completed`)))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(endRow, "answer") {
		t.Errorf("end row %q", endRow)
	}
	var by string
	for _, ev := range e.events(runID) {
		if ev.Type == journal.ApprovalResolved {
			v, _ := agent.Decode(&ev)
			r := v.(*agent.ApprovalResolved)
			by = r.By + ": " + r.Reason
		}
	}
	if by != "ada: the fix is right" {
		t.Errorf("approval.resolved by %q, want the signed-in person and the reason typed", by)
	}
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
	ctx, cancel := browser(t)
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
		chromedp.Click(sel(cardB+` button.approve`)),
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
