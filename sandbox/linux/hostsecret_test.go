//go:build linux

package linux_test

import (
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/keel-run/keel/sandbox"
	"github.com/keel-run/keel/sandbox/linux"
)

// echoServer records what each request brought (Authorization, query, a
// header, the body) and sends it back.
type echoServer struct {
	srv  *httptest.Server
	mu   sync.Mutex
	seen []string
}

func newEchoServer(t *testing.T, tls bool) *echoServer {
	e := &echoServer{}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got := fmt.Sprintf("%s %s auth=[%s] x=[%s] body=[%s]", r.Method, r.URL.RequestURI(), r.Header.Get("Authorization"), r.Header.Get("X-Api-Key"), b)
		e.mu.Lock()
		e.seen = append(e.seen, got)
		e.mu.Unlock()
		w.Header().Set("X-Echo", r.Header.Get("Authorization"))
		fmt.Fprint(w, "echo: "+got)
	})
	if tls {
		e.srv = httptest.NewTLSServer(h)
	} else {
		e.srv = httptest.NewServer(h)
	}
	t.Cleanup(e.srv.Close)
	return e
}

func (e *echoServer) port() string {
	_, p, _ := net.SplitHostPort(e.srv.Listener.Addr().String())
	return p
}

func (e *echoServer) take() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := e.seen
	e.seen = nil
	return out
}

// A secret for a host is never in the sandbox: commands see a
// placeholder, which the egress proxy replaces by the value only in
// requests to that host (over HTTPS, which the proxy opens itself, and
// plain HTTP to the loopback), and a response that echoes the value
// brings back the placeholder. The same placeholder sent to another
// allowed host arrives as it is. The value is nowhere in the sandbox's
// environment, its processes, its workspace or the proxy's reports.
func TestHostSecrets(t *testing.T) {
	if _, err := os.Stat("/usr/bin/curl"); err != nil {
		t.Skip("needs curl")
	}
	const secret = "kcS-host-0123456789abcdef-canary"
	const plainSecret = "kcS-plain-fedcba9876543210-canary"
	api := newEchoServer(t, true)   // the secret's host, HTTPS
	other := newEchoServer(t, true) // another allowed host, HTTPS
	plain := newEchoServer(t, false)
	roots := x509.NewCertPool()
	roots.AddCert(api.srv.Certificate())
	roots.AddCert(other.srv.Certificate())
	apiHost, otherHost, plainHost := "127.0.0.1:"+api.port(), "127.0.0.1:"+other.port(), "127.0.0.1:"+plain.port()
	var mu sync.Mutex
	var ds []linux.EgressDecision
	var logs strings.Builder
	ws := t.TempDir()
	sb := newSB(t, &sandbox.Spec{Workspace: ws, Network: sandbox.Network{Allow: []string{apiHost, otherHost, plainHost}}}, &linux.Options{
		HostSecrets: []linux.HostSecret{{Name: "API_TOKEN", Value: secret, Host: apiHost}, {Name: "PLAIN_TOKEN", Value: plainSecret, Host: plainHost}},
		EgressRoots: roots,
		OnEgress: func(d linux.EgressDecision) {
			mu.Lock()
			ds = append(ds, d)
			fmt.Fprintf(&logs, "%+v\n", d)
			mu.Unlock()
		},
	})
	_, ph := sh(t, sb, `printf %s "$API_TOKEN"`)
	if !strings.HasPrefix(ph, linux.PlaceholderPrefix) || len(ph) != len(linux.PlaceholderPrefix)+32 {
		t.Fatalf("API_TOKEN in the sandbox = %q, want a placeholder", ph)
	}
	_, plainPH := sh(t, sb, `printf %s "$PLAIN_TOKEN"`)

	t.Run("https to the secret's host gets the value", func(t *testing.T) {
		res, out := sh(t, sb, `curl -sS -m 30 -D - -H "Authorization: Bearer $API_TOKEN" -H "X-Api-Key: $API_TOKEN" "https://`+apiHost+`/v1/x?key=$API_TOKEN"`)
		if res.ExitCode != 0 {
			t.Fatalf("curl: %+v %q", res, out)
		}
		want := "GET /v1/x?key=" + secret + " auth=[Bearer " + secret + "] x=[" + secret + "] body=[]"
		if got := api.take(); len(got) != 1 || got[0] != want {
			t.Errorf("the host got %q, want %q", got, want)
		}
		// The echo comes back with the placeholder, in the body and in
		// the header.
		if strings.Contains(out, secret) || !strings.Contains(out, "echo: GET /v1/x?key="+ph) || !strings.Contains(out, "X-Echo: Bearer "+ph) {
			t.Errorf("the sandbox got %q", out)
		}
	})
	t.Run("basic credentials", func(t *testing.T) {
		res, out := sh(t, sb, `curl -sS -m 30 -u "me:$API_TOKEN" https://`+apiHost+`/basic`)
		if res.ExitCode != 0 {
			t.Fatalf("curl: %+v %q", res, out)
		}
		got := api.take()
		if len(got) != 1 || !strings.Contains(got[0], "auth=[Basic bWU6a2NTLWhvc3Qt") {
			t.Errorf("the host got %q, want Basic me:%s", got, secret)
		}
		if strings.Contains(out, "bWU6a2NTLWhvc3Qt") || strings.Contains(out, secret) {
			t.Errorf("the sandbox got the encoded value back: %q", out)
		}
	})
	t.Run("another allowed host gets only the placeholder", func(t *testing.T) {
		res, out := sh(t, sb, `curl -sS -m 30 -k -H "Authorization: Bearer $API_TOKEN" "https://`+otherHost+`/steal?key=$API_TOKEN"`)
		if res.ExitCode != 0 {
			t.Fatalf("curl: %+v %q", res, out)
		}
		want := "GET /steal?key=" + ph + " auth=[Bearer " + ph + "] x=[] body=[]"
		if got := other.take(); len(got) != 1 || got[0] != want {
			t.Errorf("the other host got %q, want %q", got, want)
		}
	})
	t.Run("the other host's tunnel stays opaque", func(t *testing.T) {
		// Its certificate is the server's own, not the sandbox CA's.
		res, out := sh(t, sb, `curl -sS -m 30 https://`+otherHost+`/verify; echo " exit $?"`)
		if !strings.Contains(out, "exit 60") {
			t.Errorf("curl without -k to a tunnelled host: %+v %q, want a verification failure (the proxy does not open it)", res, out)
		}
		other.take()
	})
	t.Run("a Host header naming another host is refused", func(t *testing.T) {
		_, out := sh(t, sb, `curl -sS -m 30 -H "Host: evil.example" -H "Authorization: Bearer $API_TOKEN" https://`+apiHost+`/fronted`)
		if got := api.take(); len(got) != 0 {
			t.Errorf("the host got %q", got)
		}
		if !strings.Contains(out, "Host is not the host of its tunnel") {
			t.Errorf("out = %q", out)
		}
	})
	t.Run("plain HTTP to a loopback host gets the value", func(t *testing.T) {
		res, out := sh(t, sb, `curl -sS -m 30 -H "Authorization: Bearer $PLAIN_TOKEN" http://`+plainHost+`/p`)
		if res.ExitCode != 0 {
			t.Fatalf("curl: %+v %q", res, out)
		}
		want := "GET /p auth=[Bearer " + plainSecret + "] x=[] body=[]"
		if got := plain.take(); len(got) != 1 || got[0] != want {
			t.Errorf("the host got %q, want %q", got, want)
		}
		if strings.Contains(out, plainSecret) || !strings.Contains(out, "Bearer "+plainPH) {
			t.Errorf("the sandbox got %q", out)
		}
	})
	t.Run("a placeholder for one host is worthless at another", func(t *testing.T) {
		sh(t, sb, `curl -sS -m 30 -H "Authorization: Bearer $PLAIN_TOKEN" https://`+apiHost+`/cross`)
		if got := api.take(); len(got) != 1 || !strings.Contains(got[0], "Bearer "+plainPH) {
			t.Errorf("the host got %q, want the placeholder", got)
		}
	})
	t.Run("the value is nowhere in the sandbox", func(t *testing.T) {
		_, out := sh(t, sb, `env; cat /proc/self/environ /proc/1/environ 2>/dev/null; for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do cat "$f" 2>/dev/null; done; a=kcS-host; b=-0123456789; grep -rs "$a$b" . /tmp /root /run /etc 2>/dev/null | head -n3`)
		if strings.Contains(out, secret) || strings.Contains(out, plainSecret) || strings.Contains(out, secret[:16]) {
			t.Errorf("the sandbox shows a value: %q", out)
		}
		if !strings.Contains(out, "API_TOKEN="+ph) {
			t.Errorf("env has no placeholder: %q", out)
		}
		_, out = sh(t, sb, `test -r "$SSL_CERT_FILE" && test "$CURL_CA_BUNDLE" = "$SSL_CERT_FILE" && grep -c "BEGIN CERTIFICATE" "$SSL_CERT_FILE" && ! touch "$SSL_CERT_FILE" 2>/dev/null && echo read-only`)
		if !strings.HasSuffix(out, "read-only\n") {
			t.Errorf("CA bundle: %q", out)
		}
	})
	mu.Lock()
	if strings.Contains(logs.String(), secret) || strings.Contains(logs.String(), plainSecret) {
		t.Errorf("the proxy reported a value: %s", logs.String())
	}
	var substituted int
	for _, d := range ds {
		if d.Substituted != "" {
			substituted++
			if d.Method == "" || d.Path == "" || d.BytesIn == 0 || !d.Allowed {
				t.Errorf("decision %+v", d)
			}
		}
	}
	mu.Unlock()
	if substituted != 3 {
		t.Errorf("%d requests reported with a substitution, want 3:\n%s", substituted, logs.String())
	}
	walk(t, ws, secret)
	bundle := sbEnv(t, sb, "SSL_CERT_FILE")
	sb.Close()
	if _, err := os.Stat(filepath.Dir(bundle)); !os.IsNotExist(err) {
		t.Errorf("the CA bundle's directory %s is left after Close: %v", filepath.Dir(bundle), err)
	}
}

func sbEnv(t *testing.T, sb *linux.Sandbox, name string) string {
	_, out := sh(t, sb, `printf %s "$`+name+`"`)
	return out
}

// walk fails if a file under dir holds s.
func walk(t *testing.T, dir, s string) {
	t.Helper()
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			if b, err := os.ReadFile(p); err == nil && strings.Contains(string(b), s) {
				t.Errorf("%s holds the value", p)
			}
		}
		return nil
	})
}

func TestHostSecretsBadHost(t *testing.T) {
	_, err := linux.New(&sandbox.Spec{Workspace: t.TempDir()}, &linux.Options{HostSecrets: []linux.HostSecret{{Name: "T", Value: "v", Host: "https://x/"}}})
	if err == nil || !strings.Contains(err.Error(), "want a host") {
		t.Errorf("err = %v", err)
	}
}
