//go:build linux

package linux_test

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/keel-run/keel/sandbox"
	"github.com/keel-run/keel/sandbox/linux"
)

// wilyEcho is a host a secret is for that echoes the Authorization it
// got through every part of HTTP a client undoes on its own: a
// Content-Encoding it was not asked for, a trailer, Range pieces, a 103
// Early Hints header, the status line's reason, a header's name, and
// after a 101 Switching Protocols.
func wilyEcho(t *testing.T, tls bool) *httptest.Server {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth := r.Header.Get("Authorization")
		token := strings.TrimPrefix(auth, "Bearer ")
		body := "echo:" + auth + "\n"
		encode := func(enc string, wrap func(io.Writer) io.WriteCloser, in []byte) []byte {
			var b bytes.Buffer
			zw := wrap(&b)
			zw.Write(in)
			zw.Close()
			if old := w.Header().Get("Content-Encoding"); old != "" {
				enc = old + ", " + enc
			}
			w.Header().Set("Content-Encoding", enc)
			return b.Bytes()
		}
		gz := func(w io.Writer) io.WriteCloser { return gzip.NewWriter(w) }
		zl := func(w io.Writer) io.WriteCloser { return zlib.NewWriter(w) }
		raw := func(w io.Writer) io.WriteCloser { fw, _ := flate.NewWriter(w, 5); return fw }
		raw2 := func(status, head, rest string) {
			c, bw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Errorf("hijack: %v", err)
				return
			}
			defer c.Close()
			fmt.Fprintf(bw, "HTTP/1.1 %s\r\n%s\r\n%s", status, head, rest)
			bw.Flush()
		}
		switch r.URL.Path {
		case "/deflate": // zlib, as RFC 9110 means it
			w.Write(encode("deflate", zl, []byte(body)))
		case "/rawdeflate": // raw DEFLATE, as some servers send it
			w.Write(encode("deflate", raw, []byte(body)))
		case "/gzip":
			w.Write(encode("gzip", gz, []byte(body)))
		case "/stacked":
			w.Write(encode("deflate", zl, encode("gzip", gz, []byte(body))))
		case "/br": // a coding the proxy cannot read (the bytes are plain)
			w.Header().Set("Content-Encoding", "br")
			io.WriteString(w, body)
		case "/trailer":
			w.Header().Set("Trailer", "X-Echo")
			io.WriteString(w, "see the trailer\n")
			w.(http.Flusher).Flush()
			w.Header().Set("X-Echo", auth)
			w.Header().Set(http.TrailerPrefix+"X-Late", auth)
		case "/range":
			http.ServeContent(w, r, "", time.Time{}, strings.NewReader(body))
		case "/early":
			w.Header().Set("Link", "</s.css?t="+token+">; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			w.Header().Del("Link")
			io.WriteString(w, "after the hints\n")
		case "/reason":
			raw2("200 "+token, "Content-Length: 3\r\nConnection: close\r\n", "ok\n")
		case "/name":
			raw2("200 OK", "X-"+token+": 1\r\nContent-Length: 3\r\nConnection: close\r\n", "ok\n")
		// A broken answer that quotes the value where Go's client
		// quotes it back in its error (M15).
		case "/status":
			raw2("2"+token+" OK", "Content-Length: 3\r\nConnection: close\r\n", "ok\n")
		case "/hdr":
			raw2("200 OK", "X"+token+"\r\nContent-Length: 3\r\nConnection: close\r\n", "ok\n")
		case "/cl":
			raw2("200 OK", "Content-Length: "+token+"\r\nConnection: close\r\n", "ok\n")
		case "/coding":
			w.Header().Set("Content-Encoding", token)
			io.WriteString(w, "ok\n")
		case "/upgrade":
			raw2("101 Switching Protocols", "Upgrade: websocket\r\nConnection: Upgrade\r\nX-Echo: "+auth+"\r\n", token+"\n")
		default:
			http.NotFound(w, r)
		}
	})
	var srv *httptest.Server
	if tls {
		srv = httptest.NewUnstartedServer(h)
		srv.EnableHTTP2 = false
		srv.StartTLS()
	} else {
		srv = httptest.NewServer(h)
	}
	t.Cleanup(srv.Close)
	return srv
}

// The host's echo of a secret reaches the sandbox with the placeholder
// in its place by every way HTTP carries it, over HTTPS (which the proxy
// opens) and over plain HTTP to the loopback alike: a Content-Encoding
// is decoded before the values are stripped (or the response refused
// when the proxy cannot read it), trailers are stripped, Range is not
// passed on (a value cut into pieces is not a value any more), 1xx
// headers are dropped, the status line is the standard one, a header
// named after the value is dropped, and a protocol switch is refused.
// The proxy's own error about a broken answer does not quote it.
func TestHostSecretResponses(t *testing.T) {
	if _, err := os.Stat("/usr/bin/curl"); err != nil {
		t.Skip("needs curl")
	}
	const tlsSecret = "kcR-tls-0123456789abcdef-canary"
	const plainSecret = "kcR-plain-fedcba9876543210-canary"
	api, plain := wilyEcho(t, true), wilyEcho(t, false)
	roots := x509.NewCertPool()
	roots.AddCert(api.Certificate())
	apiHost, plainHost := strings.TrimPrefix(api.URL, "https://"), strings.TrimPrefix(plain.URL, "http://")
	sb := newSB(t, &sandbox.Spec{Network: sandbox.Network{Allow: []string{apiHost, plainHost}}}, &linux.Options{
		HostSecrets: []linux.HostSecret{{Name: "TLS_TOKEN", Value: tlsSecret, Host: apiHost}, {Name: "PLAIN_TOKEN", Value: plainSecret, Host: plainHost}},
		EgressRoots: roots,
	})
	for _, side := range []struct {
		name, url, env, secret string
	}{
		{"https", api.URL, "TLS_TOKEN", tlsSecret},
		{"plain", plain.URL, "PLAIN_TOKEN", plainSecret},
	} {
		_, ph := sh(t, sb, `printf %s "$`+side.env+`"`)
		if !strings.HasPrefix(ph, linux.PlaceholderPrefix) {
			t.Fatalf("%s in the sandbox = %q", side.env, ph)
		}
		curl := `curl -sS -m 20 -H "Authorization: Bearer $` + side.env + `" `
		for _, c := range []struct {
			route, cmd string
			want       string // in the sandbox's output
		}{
			{"deflate", curl + `--compressed ` + side.url + `/deflate`, "echo:Bearer " + ph},
			{"raw deflate", curl + `--compressed ` + side.url + `/rawdeflate`, "echo:Bearer " + ph},
			{"gzip", curl + `--compressed ` + side.url + `/gzip`, "echo:Bearer " + ph},
			{"gzip unasked", curl + side.url + `/gzip > r; gzip -dc < r 2>/dev/null || cat r`, "echo:Bearer " + ph},
			{"gzip then deflate", curl + `--compressed ` + side.url + `/stacked`, "echo:Bearer " + ph},
			{"a coding the proxy cannot read", curl + `-i ` + side.url + `/br`, "502 Bad Gateway"},
			{"trailer", curl + `--raw -i ` + side.url + `/trailer`, "X-Echo: Bearer " + ph},
			{"range pieces", `for r in 0-7 8-15 16-23 24-31 32-39 40-47 48-55 56-63; do ` + curl + `-r $r ` + side.url + `/range; done`, "echo:Bearer " + ph},
			{"103 early hints", curl + `-v ` + side.url + `/early 2>&1`, "after the hints"},
			{"reason phrase", curl + `-i ` + side.url + `/reason`, "200 OK"},
			{"header name", curl + `-i ` + side.url + `/name`, "ok"},
			{"status code quoted in an error", curl + `-i ` + side.url + `/status 2>&1`, "502 Bad Gateway"},
			{"header line quoted in an error", curl + `-i ` + side.url + `/hdr 2>&1`, "502 Bad Gateway"},
			{"content length quoted in an error", curl + `-i ` + side.url + `/cl 2>&1`, "502 Bad Gateway"},
			{"content coding quoted in an error", curl + `-i ` + side.url + `/coding 2>&1`, "502 Bad Gateway"},
			{"101 switching protocols", curl + `-i -H "Connection: Upgrade" -H "Upgrade: websocket" ` + side.url + `/upgrade 2>&1`, "502 Bad Gateway"},
		} {
			t.Run(side.name+" "+c.route, func(t *testing.T) {
				_, out := sh(t, sb, c.cmd)
				// In any case: a header's name is.
				if low := strings.ToLower(out); strings.Contains(low, strings.ToLower(side.secret[4:16])) {
					t.Errorf("the sandbox got the value: %q", out)
				}
				if !strings.Contains(out, c.want) {
					t.Errorf("the sandbox got %q, want %q in it", out, c.want)
				}
			})
		}
	}
}
