//go:build linux

package linux_test

import (
	"crypto/x509"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/keel-run/keel/sandbox"
	"github.com/keel-run/keel/sandbox/linux"
)

// A placeholder in a request's body gets the value only for a secret
// given for bodies (HostSecret.Body), in a text body of at most
// MaxSubstitutedBody bytes; every other body that holds a placeholder
// of the host's secrets is refused with a reason the program receives,
// and the host gets nothing (or, past the bound, an incomplete body).
// The placeholder is never sent on silently to the secret's host.
func TestHostSecretBodies(t *testing.T) {
	if _, err := os.Stat("/usr/bin/curl"); err != nil {
		t.Skip("needs curl")
	}
	const head = "kcS-head-0123456789abcdef-canary"
	const body = "kcS-body-0123456789abcdef-canary"
	const plainBody = "kcS-plainbody-0123456789abcdef-canary"
	const plainHead = "kcS-plainhead-0123456789abcdef-canary"
	api := newEchoServer(t, true)
	plain := newEchoServer(t, false)
	roots := x509.NewCertPool()
	roots.AddCert(api.srv.Certificate())
	apiHost, plainHost := "127.0.0.1:"+api.port(), "127.0.0.1:"+plain.port()
	var mu sync.Mutex
	var logs strings.Builder
	sb := newSB(t, &sandbox.Spec{Network: sandbox.Network{Allow: []string{apiHost, plainHost}}}, &linux.Options{
		HostSecrets: []linux.HostSecret{
			{Name: "HEAD_TOKEN", Value: head, Host: apiHost},
			{Name: "BODY_TOKEN", Value: body, Host: apiHost, Body: true},
			{Name: "PLAIN_BODY", Value: plainBody, Host: plainHost, Body: true},
			{Name: "PLAIN_HEAD", Value: plainHead, Host: plainHost},
		},
		EgressRoots: roots,
		OnEgress: func(d linux.EgressDecision) {
			mu.Lock()
			fmt.Fprintf(&logs, "%+v\n", d)
			mu.Unlock()
		},
	})
	_, headPH := sh(t, sb, `printf %s "$HEAD_TOKEN"`)
	_, bodyPH := sh(t, sb, `printf %s "$BODY_TOKEN"`)
	curl := `curl -sS -m 30 `
	for _, c := range []struct {
		name, script string
		// arrives: what the host's request must hold ("" = no request
		// may arrive holding a placeholder or a value, see below).
		arrives string
		// out: what the program must receive.
		out string
	}{
		{"json body", curl + `-H 'Content-Type: application/json' -d "{\"key\":\"$BODY_TOKEN\"}" https://` + apiHost + `/j`,
			`POST /j auth=[] x=[] body=[{"key":"` + body + `"}]`, `echo: POST /j auth=[] x=[] body=[{"key":"` + bodyPH + `"}]`},
		{"form body", curl + `-d "client_id=me&client_secret=$BODY_TOKEN" https://` + apiHost + `/token`,
			`body=[client_id=me&client_secret=` + body + `]`, `client_secret=` + bodyPH},
		{"multipart form", curl + `-F "client_secret=$BODY_TOKEN" https://` + apiHost + `/mp`,
			`name="client_secret"` + "\r\n\r\n" + body, `name="client_secret"` + "\r\n\r\n" + bodyPH},
		{"chunked, no content type", `printf 'tok=%s' "$BODY_TOKEN" | ` + curl + `-H 'Content-Type:' -H 'Transfer-Encoding: chunked' --data-binary @- https://` + apiHost + `/chunked`,
			`body=[tok=` + body + `]`, `body=[tok=` + bodyPH + `]`},
		{"header and body in one request", curl + `-H "Authorization: Bearer $HEAD_TOKEN" -d "t=$BODY_TOKEN" https://` + apiHost + `/both`,
			`auth=[Bearer ` + head + `] x=[] body=[t=` + body + `]`, `auth=[Bearer ` + headPH + `]`},
		{"a secret not given for bodies", curl + `-d "token=$HEAD_TOKEN" https://` + apiHost + `/nobody`,
			"", "holds the placeholder of HEAD_TOKEN, and Keel puts that value only in the headers, path and query"},
		{"binary body", curl + `-H 'Content-Type: application/octet-stream' --data-binary "x$BODY_TOKEN" https://` + apiHost + `/bin`,
			"", "(application/octet-stream) holds the placeholder of BODY_TOKEN; Keel puts a value only in a text body"},
		{"compressed body", `printf '{"k":"%s"}' "$BODY_TOKEN" | gzip | ` + curl + `-H 'Content-Type: application/json' -H 'Content-Encoding: gzip' --data-binary @- https://` + apiHost + `/gz`,
			"", "(Content-Encoding gzip) holds the placeholder of BODY_TOKEN; Keel puts a value only in an uncompressed body"},
		{"long body, placeholder within the bound", `{ printf 'a=%s&b=' "$BODY_TOKEN"; head -c 1100000 /dev/zero | tr '\0' b; } > /tmp/big && ` + curl + `--data-binary @/tmp/big https://` + apiHost + `/big1`,
			"", "is over 1048576 bytes and holds the placeholder of BODY_TOKEN"},
		{"long body, placeholder past the bound", `{ head -c 1100000 /dev/zero | tr '\0' b; printf '&a=%s' "$BODY_TOKEN"; } > /tmp/big && ` + curl + `--data-binary @/tmp/big https://` + apiHost + `/big2`,
			"", "is over 1048576 bytes and holds the placeholder of BODY_TOKEN"},
		{"plain HTTP on the loopback, Expect: 100-continue", curl + `-H 'Expect: 100-continue' -d "t=$PLAIN_BODY" http://` + plainHost + `/plain`,
			`POST /plain auth=[] x=[] body=[t=` + plainBody + `]`, "body=[t=keel-placeholder-"},
		{"plain HTTP, a secret not given for bodies", curl + `-d "t=$PLAIN_HEAD" http://` + plainHost + `/plainno`,
			"", "holds the placeholder of PLAIN_HEAD, and Keel puts that value only in the headers, path and query"},
	} {
		t.Run(c.name, func(t *testing.T) {
			res, out := sh(t, sb, c.script)
			got := strings.Join(append(api.take(), plain.take()...), "\n")
			if c.arrives != "" && (res.ExitCode != 0 || !strings.Contains(got, c.arrives)) {
				t.Errorf("exit %d, out %q; the host got %q, want %q", res.ExitCode, out, got, c.arrives)
			}
			if c.arrives == "" && (strings.Contains(got, "keel-placeholder-") || strings.Contains(got, "canary")) {
				t.Errorf("the host got %q, want nothing with a placeholder or a value", got)
			}
			if !strings.Contains(out, c.out) {
				t.Errorf("the program got %q, want %q", out, c.out)
			}
			if strings.Contains(out, "canary") {
				t.Errorf("the program got a value: %q", out)
			}
		})
	}
	t.Run("long body without a placeholder", func(t *testing.T) {
		res, out := sh(t, sb, `head -c 2000000 /dev/zero | tr '\0' b > /tmp/big && `+curl+`-o /dev/null -w '%{http_code}' --data-binary @/tmp/big https://`+apiHost+`/long`)
		got := api.take()
		if res.ExitCode != 0 || out != "200" || len(got) != 1 || len(got[0]) < 2000000 {
			t.Errorf("exit %d, out %q, %d requests", res.ExitCode, out, len(got))
		}
	})
	mu.Lock()
	defer mu.Unlock()
	if n := strings.Count(logs.String(), "Allowed:false"); n != 6 {
		t.Errorf("%d refusals reported, want 6 (one per refused request):\n%s", n, logs.String())
	}
	for _, v := range []string{head, body, plainBody, plainHead} {
		if strings.Contains(logs.String(), v) {
			t.Errorf("the proxy reported a value:\n%s", logs.String())
		}
	}
}
