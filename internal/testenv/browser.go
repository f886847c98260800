package testenv

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// ChromiumEnv names the browser of the UI tests; without it, Debian's
// chromium package (which .ci/run installs) is looked up on PATH.
const ChromiumEnv = "KEEL_TEST_CHROMIUM"

// Browser starts a fresh headless Chromium and returns the context of its
// first tab, with a deadline of two minutes, and the function that closes
// the browser. Everything the browser writes (its profile, the files it
// leaves in its TMPDIR, its XDG configuration such as "Crash Reports" and
// its cache) goes to directories of tb. Closing waits for the browser to
// exit; tb's cleanup closes it, before those directories are removed,
// when the test has not. The missing program follows the rule of
// [Program].
func Browser(tb testing.TB) (context.Context, context.CancelFunc) {
	tb.Helper()
	bin := Program(tb, ChromiumEnv, "chromium", "chromium-browser", "google-chrome")
	// Chromium's TMPDIR is short (a directory of the process's own
	// temporary directory, not of the test's): its singleton socket's
	// path must fit in a Unix socket address (108 bytes), which a long
	// test name below a test binary's TMPDIR (see Main) exceeds.
	tmp, err := os.MkdirTemp(tempRoot, "kc")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(tmp) })
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(bin),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(tb.TempDir()),
		// Chromium leaves org.chromium.Chromium.* (its singleton
		// socket) in TMPDIR, and writes "Crash Reports" and dconf
		// files below XDG_CONFIG_HOME and XDG_CACHE_HOME.
		chromedp.Env("TMPDIR="+tmp, "XDG_CONFIG_HOME="+tb.TempDir(), "XDG_CACHE_HOME="+tb.TempDir()),
	}
	// Not tb.Context: it is canceled before the cleanups run, and the
	// browser must be waited for by one of them.
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	ctx, cancelTime := context.WithTimeout(ctx, 2*time.Minute)
	// The allocator's cancel kills the browser and waits for it.
	closeAll := func() { cancelTime(); cancelTab(); cancelAlloc() }
	tb.Cleanup(closeAll) // after the TempDirs above: it runs before their removal
	return ctx, closeAll
}

// ClickLive is an action that waits until the element sel (a CSS
// selector) names is visible, then clicks it in the page itself
// (element.click(), the query and the click in one evaluation). The web
// UI replaces what it keeps live (a run page's conversation and header
// as events arrive, a list's fragment every few seconds), and a page
// that follows a form's redirect is replaced as it loads, so a node that
// chromedp.Click found may be replaced before its mouse click reaches it
// ("Could not find node with given id").
func ClickLive(sel string) chromedp.Action[chromedp.Void] {
	js, _ := json.Marshal(sel)
	click := chromedp.Evaluate[bool](`(() => { const e = document.querySelector(` + string(js) + `); if (!e) return false; e.click(); return true })()`)
	return chromedp.Steps(chromedp.WaitVisible(chromedp.CSS(sel)), func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		ok, err := click(ctx, t)
		if err == nil && !ok {
			err = fmt.Errorf("click %s: no such element", sel)
		}
		return chromedp.Void{}, err
	})
}
