package cli_test

import (
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/keel-run/keel/internal/testenv"
	"github.com/keel-run/keel/journal"
)

// The README's first steps, as a newcomer takes them: `keel serve`
// prints a sign-in link; in the browser, start the demo run, approve its
// edit in the inbox, and watch the run finish in its conversation. The real
// command, its wiring, the linux sandbox and the demo policy.
func TestServeNewcomerInBrowser(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed: .ci/run installs it")
	}
	setup(t)
	s := startServe(t)
	link := regexp.MustCompile(`sign in to the web UI:\s+(\S+)`).FindStringSubmatch(s.stderr.String())
	if link == nil {
		t.Fatalf("keel serve printed no sign-in link:\n%s", s.stderr)
	}
	ctx, cancel := testenv.Browser(t)
	defer cancel()

	css := func(s string) chromedp.CSS { return chromedp.CSS(s) }
	// The link holds a one-time code, not the token: the page says whom
	// it signs in as, and a press of the button does it.
	if !strings.Contains(link[1], "/ui/login?code=") || strings.Contains(link[1], "keel_") {
		t.Errorf("sign-in link %s: want a one-time code, never the token", link[1])
	}
	if err := chromedp.Do(ctx,
		chromedp.Navigate(link[1]),
		testenv.ClickLive(`#sign-in`),
		testenv.ClickLive(`#start-demo`),
		chromedp.WaitVisible(css(`#conversation details.call.asked`)),
	); err != nil {
		t.Fatalf("sign in and start the demo: %v\n%s", err, s.stderr)
	}
	runURL, err := chromedp.Run(ctx, chromedp.Location())
	if err != nil {
		t.Fatal(err)
	}
	runID := runURL[strings.LastIndex(runURL, "/")+1:]
	card := `section.approval[data-run="` + runID + `"]`
	if err := chromedp.Do(ctx,
		testenv.ClickLive(`#nav-approvals`),
		chromedp.WaitVisible(css(card)),
		testenv.ClickLive(card+` button.approve`),
		chromedp.WaitVisible(css(`#conversation .end.completed`)),
	); err != nil {
		t.Fatalf("approve and watch: %v\n%s", err, s.stderr)
	}
	// The journal agrees: completed, the approval by the token's person,
	// and the real server checkpointed the edit.
	code, out, _ := keel(t, "runs", "show", runID)
	if code != 0 || !strings.Contains(out, string(journal.RunCompleted)) || !strings.Contains(out, "approval.resolved") || !strings.Contains(out, "workspace.checkpoint  checkpoint") || !strings.Contains(out, "M textstats.py") {
		t.Errorf("runs show %s = %d:\n%s", runID, code, out)
	}
}
