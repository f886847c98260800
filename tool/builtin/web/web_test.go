package web_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/sandbox"
	"github.com/keel-run/keel/sandbox/egress"
	"github.com/keel-run/keel/sandbox/egress/egresstest"
	"github.com/keel-run/keel/tool"
	"github.com/keel-run/keel/tool/builtin/web"
)

const page = `<!doctype html><html><head><title>Keel  test page</title>
<style>body { color: red }</style><script>alert("x")</script></head>
<body><h1>Hello &amp; welcome</h1>
<p>First   paragraph with a <a href="/docs">docs link</a>.</p>
<ul><li>one</li><li>two</li></ul>
<table><tr><th>k</th><th>v</th></tr><tr><td>a</td><td>1</td></tr></table>
<pre>  keep
    spacing</pre>
<img src="x.png" alt="a diagram"><noscript>enable js</noscript>
</body></html>`

// server serves the test pages; its host name for URLs is localhost.
func server(t *testing.T) (*httptest.Server, string) {
	t.Helper()
	hang := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("/page", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, page)
	})
	mux.HandleFunc("/json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"ok":true,"nul":"a\u0000b"}`)
	})
	mux.HandleFunc("/latin1", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=ISO-8859-1")
		w.Write([]byte("caf\xe9 \x93quoted\x94"))
	})
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		for i := range 200_000 {
			fmt.Fprintf(w, "line %d\n", i)
		}
	})
	mux.HandleFunc("/png", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "image/png")
		w.Write([]byte("\x89PNG\r\n\x1a\n\x00\x00"))
	})
	mux.HandleFunc("/missing", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no such page", http.StatusNotFound)
	})
	mux.HandleFunc("/ansi", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Write([]byte("\x1b[31mred\x1b[0m\nand \x00 nul"))
	})
	mux.HandleFunc("/redirect-in", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/json", http.StatusFound)
	})
	mux.HandleFunc("/redirect-ip", func(w http.ResponseWriter, r *http.Request) {
		_, port, _ := strings.Cut(r.Host, ":")
		http.Redirect(w, r, "http://127.0.0.1:"+port+"/json", http.StatusFound)
	})
	mux.HandleFunc("/redirect-out", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "https://elsewhere.example/", http.StatusFound)
	})
	mux.HandleFunc("/hang", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hang:
		case <-r.Context().Done():
		}
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(func() { close(hang); srv.Close() })
	u, _ := url.Parse(srv.URL)
	return srv, "localhost:" + u.Port()
}

type env struct {
	t   *testing.T
	reg *tool.Registry
	env *tool.Env
}

func newEnv(t *testing.T, allow []string, opts *web.Options) *env {
	t.Helper()
	ws, err := tool.NewWorkspace(t.TempDir(), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.Close() })
	reg := tool.NewRegistry()
	web.Register(reg, opts)
	return &env{t: t, reg: reg, env: &tool.Env{Workspace: ws, Network: sandbox.Network{Allow: allow}}}
}

func (e *env) fetch(args map[string]any) *tool.Result {
	e.t.Helper()
	raw, _ := json.Marshal(args)
	valid, bad := e.reg.Validate(model.ToolCall{ID: "c", Name: web.Name, Arguments: string(raw)})
	if bad != nil {
		return bad
	}
	res, err := e.reg.Run(e.t.Context(), web.Name, &tool.Request{RunID: "r", CallID: "c", Arguments: valid, Env: e.env})
	if err != nil {
		e.t.Fatalf("fetch_url(%s): %v", raw, err)
	}
	if !utf8.ValidString(res.Content) || strings.ContainsRune(res.Content, 0) || strings.ContainsRune(res.Content, 0x1b) {
		e.t.Errorf("result is not sanitised: %q", res.Content)
	}
	return res
}

func TestFetchAllowed(t *testing.T) {
	t.Parallel()
	_, host := server(t)
	e := newEnv(t, []string{host}, nil)
	base := "http://" + host
	for _, tt := range []struct {
		name, path string
		want       string
	}{
		{"html as text", "/page", "HTTP 200 OK · text/html · " + base + "/page\n" +
			"# Keel test page\n\n# Hello & welcome\n\nFirst paragraph with a docs link (" + base + "/docs).\n\n- one\n- two\n\nk | v\na | 1\n\n  keep\n    spacing\n\n[image: a diagram]\n"},
		{"json", "/json", "HTTP 200 OK · application/json · " + base + "/json\n" + `{"ok":true,"nul":"a\u0000b"}`},
		{"latin1", "/latin1", "HTTP 200 OK · text/plain · " + base + "/latin1\ncafé “quoted”"},
		{"control bytes", "/ansi", "HTTP 200 OK · text/plain · " + base + "/ansi\nred\nand \\0 nul"},
		{"redirect inside the allowlist", "/redirect-in", "HTTP 200 OK · application/json · " + base + "/json\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := e.fetch(map[string]any{"url": base + tt.path})
			if r.IsError || !strings.HasPrefix(r.Content, tt.want) {
				t.Errorf("fetch %s =\n%q\nwant prefix\n%q", tt.path, r.Content, tt.want)
			}
		})
	}
}

func TestFetchRefused(t *testing.T) {
	t.Parallel()
	srv, host := server(t)
	port := strings.TrimPrefix(host, "localhost:")
	e := newEnv(t, []string{host}, nil)
	for _, tt := range []struct{ url, want string }{
		{srv.URL + "/json", "127.0.0.1 is a raw IP address"},
		{"http://[::1]:" + port + "/json", "::1 is a raw IP address"},
		{"http://notallowed.example/", "notallowed.example:80 is not in this run's network allowlist"},
		{"http://localhost:1/json", "localhost:1 is not in this run's network allowlist"},
		{"file:///etc/passwd", `scheme "file"`},
		{"http://" + host + "/redirect-out", "redirect to https://elsewhere.example/ refused: elsewhere.example:443 is not in this run's network allowlist"},
		{"http://" + host + "/redirect-ip", "refused: 127.0.0.1 is a raw IP address"},
	} {
		r := e.fetch(map[string]any{"url": tt.url})
		if !r.IsError || !strings.Contains(r.Content, tt.want) {
			t.Errorf("fetch %s = %q, want an error containing %q", tt.url, r.Content, tt.want)
		}
	}
	off := newEnv(t, nil, nil)
	if r := off.fetch(map[string]any{"url": "http://" + host + "/json"}); !r.IsError || !strings.Contains(r.Content, "network access is off") {
		t.Errorf("fetch with no network = %q", r.Content)
	}
}

func TestFetchBounds(t *testing.T) {
	t.Parallel()
	_, host := server(t)
	e := newEnv(t, []string{host}, nil)
	base := "http://" + host
	r := e.fetch(map[string]any{"url": base + "/big", "max_bytes": 5000})
	if r.IsError || !strings.Contains(r.Content, "[the body was cut at max_bytes=5000]") {
		t.Errorf("max_bytes: %q", r.Content)
	}
	r = e.fetch(map[string]any{"url": base + "/big", "max_bytes": 5 << 20})
	if r.Artifact == "" || !strings.Contains(r.Content, "full output: "+r.Artifact) || utf8.RuneCountInString(r.Content) > tool.DefaultMaxResultChars {
		t.Errorf("big page: artifact %q, %d chars", r.Artifact, utf8.RuneCountInString(r.Content))
	} else if b, err := os.ReadFile(filepath.Join(e.env.Workspace.Root(), r.Artifact)); err != nil || int64(len(b)) != r.OutputBytes || !strings.HasSuffix(string(b), "line 199999\n") {
		t.Errorf("artifact: %d bytes, %v", len(b), err)
	}
	r = e.fetch(map[string]any{"url": base + "/png"})
	if !r.IsError || !strings.Contains(r.Content, "binary content (image/png") {
		t.Errorf("png: %q", r.Content)
	}
	r = e.fetch(map[string]any{"url": base + "/missing"})
	if !r.IsError || !strings.HasPrefix(r.Content, "HTTP 404 Not Found") || !strings.Contains(r.Content, "no such page") {
		t.Errorf("404: %q", r.Content)
	}
	short := newEnv(t, []string{host}, &web.Options{Timeout: 500 * time.Millisecond})
	r = short.fetch(map[string]any{"url": base + "/hang"})
	if !r.IsError || !strings.Contains(r.Content, "timed out after 500ms") {
		t.Errorf("hang: %q", r.Content)
	}
	if r := e.fetch(map[string]any{"url": base + "/big", "max_bytes": 1 << 40}); !r.IsError || !strings.Contains(r.Content, "schema") {
		t.Errorf("max_bytes above the limit: %q", r.Content)
	}
}

func TestAllowed(t *testing.T) {
	t.Parallel()
	n := sandbox.Network{Allow: []string{"example.com", "api.example.com:8443", "Docs.Example.org."}}
	for _, tt := range []struct {
		url string
		ok  bool
	}{
		{"https://example.com/x", true},
		{"http://example.com/x", true},
		{"https://EXAMPLE.com./x", true},
		{"https://example.com:8443/", false},
		{"https://sub.example.com/", false},
		{"https://api.example.com:8443/v1", true},
		{"https://api.example.com/v1", false},
		{"https://docs.example.org/", true},
		{"https://93.184.216.34/", false},
		{"https://[2001:db8::1]/", false},
		{"ftp://example.com/", false},
		{"https:///nohost", false},
	} {
		u, err := url.Parse(tt.url)
		if err != nil {
			t.Fatal(err)
		}
		err = web.Allowed(n, u)
		if (err == nil) != tt.ok || (err != nil && !errors.Is(err, web.ErrNotAllowed)) {
			t.Errorf("Allowed(%s) = %v, want ok=%v", tt.url, err, tt.ok)
		}
	}
	// An address the allowlist names is allowed, in its usual notation
	// only.
	own := sandbox.Network{Allow: []string{"127.0.0.1"}}
	if err := web.Allowed(own, &url.URL{Scheme: "http", Host: "127.0.0.1"}); err != nil {
		t.Errorf("an address the allowlist names: %v", err)
	}
	for _, h := range []string{"127.1", "2130706433", "0x7f.0.0.1", "127.0.0.2"} {
		if err := web.Allowed(own, &url.URL{Scheme: "http", Host: h}); err == nil {
			t.Errorf("%s was allowed by an allowlist naming 127.0.0.1", h)
		}
	}
}

// An allowed name that resolves to a loopback or private address is not
// reached (the egress proxy refuses it for the sandbox alike); a service
// the person names by its address, or as localhost, is.
func TestFetchNonPublicName(t *testing.T) {
	t.Parallel()
	_, host := server(t)
	port := strings.TrimPrefix(host, "localhost:")
	res := egresstest.Resolver(t, map[string]string{"evil.test": "127.0.0.1", "lan.test": "10.0.0.1"})
	tr := (&egress.Dialer{Resolver: res}).Transport()
	e := newEnv(t, []string{"evil.test:" + port, "lan.test:" + port, "127.0.0.1:" + port, host}, &web.Options{Transport: tr})
	for _, u := range []string{"http://evil.test:" + port + "/json", "http://lan.test:" + port + "/json"} {
		if r := e.fetch(map[string]any{"url": u}); !r.IsError || !strings.Contains(r.Content, "non-public address") {
			t.Errorf("fetch %s = %q, want a refusal", u, r.Content)
		}
	}
	for _, u := range []string{"http://127.0.0.1:" + port + "/json", "http://" + host + "/json"} {
		if r := e.fetch(map[string]any{"url": u}); r.IsError || !strings.Contains(r.Content, `"ok":true`) {
			t.Errorf("fetch %s = %q", u, r.Content)
		}
	}
}

func TestFetchToolShape(t *testing.T) {
	t.Parallel()
	tl, _ := web.New(nil)
	if tl.Effect != tool.External || tl.Scope == nil || tl.Scope(json.RawMessage(`{"url":"x"}`)) == nil || len(tl.Scope(json.RawMessage(`{"url":"x"}`))) != 0 {
		t.Errorf("effect %v; want External with an empty, non-nil scope", tl.Effect)
	}
}
