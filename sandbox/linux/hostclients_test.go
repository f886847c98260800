//go:build linux

package linux_test

import (
	"context"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"

	"github.com/keel-run/keel/sandbox"
	"github.com/keel-run/keel/sandbox/linux"
)

// The programs people use in a sandbox reach a secret's host through
// the proxy's interception, trusting the sandbox's CA through the
// variables Keel sets (SSL_CERT_FILE, GIT_SSL_CAINFO, PIP_CERT,
// REQUESTS_CA_BUNDLE, NODE_EXTRA_CA_CERTS, ...), each with the
// credential where it puts it: git's extra header, pip's index URL
// (Basic), npm's registry token, Python's urllib and requests, Node's
// TLS through a CONNECT agent. An HTTP/2 client gets HTTP/1.1. A
// program missing here is skipped and named.
func TestHostSecretClients(t *testing.T) {
	const secret = "kcS-clients-0123456789abcdef-canary"
	api := newEchoServer(t, true)
	roots := x509.NewCertPool()
	roots.AddCert(api.srv.Certificate())
	// A name, as registries have (npm checks an IP literal reached
	// through a proxy against "localhost"): the test server's
	// certificate is for example.com, which the proxy dials on the
	// loopback.
	host := "example.com:" + api.port()
	sb := newSB(t, &sandbox.Spec{Network: sandbox.Network{Allow: []string{host}}}, &linux.Options{
		HostSecrets: []linux.HostSecret{{Name: "API_TOKEN", Value: secret, Host: host}},
		EgressRoots: roots,
		EgressDial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if addr != host {
				return nil, fmt.Errorf("test dialer: %s is not %s", addr, host)
			}
			var d net.Dialer
			return d.DialContext(ctx, network, api.srv.Listener.Addr().String())
		},
	})
	url := "https://" + host
	nodeConnect := `const http=require("http"),tls=require("tls"),u=new URL(process.env.HTTPS_PROXY);` +
		`http.request({host:u.hostname,port:u.port,method:"CONNECT",path:"` + host + `"}).on("connect",(res,sock)=>{` +
		`const s=tls.connect({socket:sock,servername:"example.com"},()=>{s.write("GET /node HTTP/1.1\r\nHost: ` + host + `\r\nAuthorization: Bearer "+process.env.API_TOKEN+"\r\nConnection: close\r\n\r\n")});` +
		`s.on("data",d=>process.stdout.write(d));s.on("error",e=>{console.log("tls error: "+e.message);process.exit(1)})}).end()`
	t.Run("a client that offers h2 alone", func(t *testing.T) {
		if _, err := exec.LookPath("openssl"); err != nil {
			t.Skip("openssl is not installed")
		}
		// The handshake fails with TLS's own alert, before any request.
		_, out := sh(t, sb, `p=${HTTPS_PROXY#http://}; openssl s_client -proxy "${p%/}" -connect `+host+` -servername example.com -alpn h2 </dev/null 2>&1 | grep -o "no application protocol" | head -n1`)
		if out != "no application protocol\n" {
			t.Errorf("out %q, want the TLS alert", out)
		}
	})
	for _, c := range []struct {
		name, program, script string
		arrives               string // what the host must get
	}{
		{"curl", "curl", `curl -sS -m 30 -H "Authorization: Bearer $API_TOKEN" ` + url + `/curl`,
			"GET /curl auth=[Bearer " + secret + "]"},
		{"curl --http2 gets HTTP/1.1", "curl", `curl -sS -m 30 --http2 -w ' http=%{http_version}' -H "Authorization: Bearer $API_TOKEN" ` + url + `/h2`,
			"GET /h2 auth=[Bearer " + secret + "]"},
		{"git over https", "git", `git -c http.extraHeader="Authorization: Bearer $API_TOKEN" ls-remote ` + url + `/r.git 2>&1; true`,
			"GET /r.git/info/refs?service=git-upload-pack auth=[Bearer " + secret + "]"},
		{"python urllib", "python3", `python3 -c 'import os,urllib.request as u; print(u.urlopen(u.Request("` + url + `/urllib", headers={"Authorization": "Bearer "+os.environ["API_TOKEN"]})).read())'`,
			"GET /urllib auth=[Bearer " + secret + "]"},
		{"python requests (pip's)", "python3", `python3 -c 'import os; from pip._vendor import requests; print(requests.get("` + url + `/requests", headers={"Authorization": "Bearer "+os.environ["API_TOKEN"]}).text)'`,
			"GET /requests auth=[Bearer " + secret + "]"},
		{"pip index with a token", "pip", `pip download --no-deps --no-cache-dir --disable-pip-version-check -q -d /tmp/p --index-url "https://__token__:$API_TOKEN@` + host + `/simple/" keel-nothing 2>&1; true`,
			"GET /simple/keel-nothing/ auth=[Basic " + base64.StdEncoding.EncodeToString([]byte("__token__:"+secret)) + "]"},
		{"an HTTP/2-only client", "curl", `curl -sS -m 30 --http2-prior-knowledge -H "Authorization: Bearer $API_TOKEN" ` + url + `/h2only 2>&1; echo " exit $?"`,
			"GET /h2only auth=[Bearer " + secret + "]"},
		{"npm registry token", "npm", `printf '//` + host + `/:_authToken=${API_TOKEN}\n' > /tmp/npmrc && NPM_CONFIG_USERCONFIG=/tmp/npmrc npm view keel-nothing --registry ` + url + `/ --fetch-retries 0 2>&1; true`,
			"/keel-nothing auth=[Bearer " + secret + "]"},
		{"node tls through a CONNECT agent", "node", `node -e '` + nodeConnect + `'`,
			"GET /node auth=[Bearer " + secret + "]"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := exec.LookPath(c.program); err != nil {
				t.Skipf("%s is not installed", c.program)
			}
			res, out := sh(t, sb, c.script)
			got := strings.Join(api.take(), "\n")
			if !strings.Contains(got, c.arrives) {
				t.Errorf("the host got %q, want %q\nexit %d, out %q", got, c.arrives, res.ExitCode, out)
			}
			if strings.Contains(out, secret) || strings.Contains(out, "certificate") {
				t.Errorf("out %q", out)
			}
			if c.name == "curl --http2 gets HTTP/1.1" && !strings.HasSuffix(out, " http=1.1") {
				t.Errorf("out %q, want HTTP/1.1", out)
			}
		})
	}
}
