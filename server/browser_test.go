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
	err := chromedp.Do(ctx,
		chromedp.Navigate(e.srv.URL+"/ui/login?token="+e.secret),
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
	// the run as it happens.
	if err := chromedp.Do(ctx,
		chromedp.WaitVisible(sel(`#timeline tr.ev.end.completed`)),
		chromedp.WaitVisible(sel(`#run-status[data-status="completed"]`)),
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
