package credential_test

import (
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/keel-run/keel/credential"
	"github.com/keel-run/keel/internal/oauthtest"
	"github.com/keel-run/keel/internal/testenv"
)

// The consent in a real browser: headless Chromium opens the
// authorization URL, the OP's own login page takes the test user's name
// and password, the OP redirects the browser to Keel's loopback
// callback, which completes the authorization (state, iss, PKCE) and
// says so in the page; the grant is then usable.
func TestBrowserConsent(t *testing.T) {
	e := newEnv(t)
	e.addProvider(t, e.vault)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	srv := &http.Server{Handler: e.vault.CallbackHandler(func(g *credential.Grant, err error) { done <- err })}
	go srv.Serve(ln)
	defer srv.Close()
	pend, err := e.vault.BeginConnect(t.Context(), &credential.ConnectParams{Provider: "op", Agent: "helper", User: "ann",
		RedirectURL: "http://" + ln.Addr().String() + "/callback"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := testenv.Browser(t)
	defer cancel()
	sel := func(s string) chromedp.CSS { return chromedp.CSS(s) }
	err = chromedp.Do(ctx,
		chromedp.Navigate(pend.URL),
		chromedp.WaitVisible(sel(`#username`)),
		chromedp.SendKeys(sel(`#username`), e.op.User()),
		chromedp.SendKeys(sel(`#password`), oauthtest.Password),
		chromedp.Click(sel(`button[type=submit]`)),
	)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("callback: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("the browser never reached the callback")
	}
	// The callback answered; read its page once the browser shows it
	// (reads during the last navigation are retried).
	var page string
	for !strings.Contains(page, "Keel:") && ctx.Err() == nil {
		page, _ = chromedp.Run(ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
	}
	if !strings.Contains(page, "is connected for helper acting for ann") {
		t.Errorf("callback page: %q", page)
	}
	c, err := e.vault.Credential(t.Context(), &credential.Request{Agent: "helper", User: "ann", Resource: "http://api.test/v1/x"})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(page, c.Token()) {
		t.Errorf("the callback page shows the token")
	}
}
