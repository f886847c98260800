// Package oauthtest runs a real OAuth 2.1 / OpenID Connect authorization
// server in tests: the zitadel/oidc v3 example OP (authorization code with
// PKCE, refresh with rotation, client credentials, token exchange,
// introspection, revocation, device flow), embedded on a loopback
// listener, and signs its test users in without a browser.
//
// It is for tests only; the keel binary never imports it.
package oauthtest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/zitadel/oidc/v3/example/server/exampleop"
	"github.com/zitadel/oidc/v3/example/server/storage"
)

// Clients registered with every OP of the test binary.
const (
	// NativeClient is a public client (PKCE, no secret) whose redirect is
	// any loopback port (RFC 8252 §7.3) of http://127.0.0.1/callback.
	NativeClient = "keel-native"
	// WebClient and WebSecret: a confidential client (client_secret_basic,
	// refresh, token exchange), redirect as NativeClient's.
	WebClient = "keel-web"
	WebSecret = "keel-web-secret"
	// ServiceClient and ServiceSecret authenticate with client
	// credentials (the example's service user).
	ServiceClient = "sid1"
	ServiceSecret = "verysecret"
	// Password is the password of both test users.
	Password = "verysecure"
	// RedirectURL is the registered redirect; any loopback port matches.
	RedirectURL = "http://127.0.0.1/callback"
	// ServerRedirectURL is keel serve's callback (server.CallbackPath),
	// registered for NativeClient (on any loopback port, RFC 8252).
	ServerRedirectURL = "http://127.0.0.1/v1/auth/callback"
)

var register sync.Once

// OP is a running authorization server.
type OP struct {
	// Issuer is its issuer URL ("http://127.0.0.1:PORT/").
	Issuer string
	// Requests counts HTTP requests by path.
	mu       sync.Mutex
	requests map[string]int
	issued   []string
	srv      *http.Server
}

// Issued returns every token (access, refresh, ID) the OP's token
// endpoint has issued so far, for canary searches.
func (op *OP) Issued() []string {
	op.mu.Lock()
	defer op.mu.Unlock()
	return append([]string(nil), op.issued...)
}

// tokenRecorder keeps the body of a token endpoint's answer.
type tokenRecorder struct {
	http.ResponseWriter
	body []byte
}

func (r *tokenRecorder) Write(b []byte) (int, error) {
	r.body = append(r.body, b...)
	return r.ResponseWriter.Write(b)
}

// Start runs an OP on a random loopback port until the test ends.
func Start(t testing.TB) *OP {
	t.Helper()
	register.Do(func() {
		native := storage.NativeClient(NativeClient, RedirectURL, ServerRedirectURL)
		web := storage.WebClient(WebClient, WebSecret, RedirectURL, ServerRedirectURL)
		storage.RegisterClients(native, web)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	op := &OP{Issuer: fmt.Sprintf("http://%s/", ln.Addr()), requests: map[string]int{}}
	router := exampleop.SetupServer(op.Issuer, storage.NewStorage(storage.NewUserStore(op.Issuer)), nil, false)
	op.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		op.mu.Lock()
		op.requests[r.URL.Path]++
		op.mu.Unlock()
		if r.URL.Path != "/oauth/token" && r.URL.Path != "/oauth/device_authorization" {
			router.ServeHTTP(w, r)
			return
		}
		rec := &tokenRecorder{ResponseWriter: w}
		router.ServeHTTP(rec, r)
		var tr map[string]any
		if json.Unmarshal(rec.body, &tr) == nil {
			op.mu.Lock()
			for _, k := range []string{"access_token", "refresh_token", "id_token", "device_code"} {
				if v, ok := tr[k].(string); ok && v != "" {
					op.issued = append(op.issued, v)
				}
			}
			op.mu.Unlock()
		}
	}), ErrorLog: nil}
	go op.srv.Serve(ln)
	t.Cleanup(func() { op.srv.Close() })
	return op
}

// Requests returns how many requests reached path.
func (op *OP) Requests(path string) int {
	op.mu.Lock()
	defer op.mu.Unlock()
	return op.requests[path]
}

// User is the username of the example's admin user on this OP.
func (op *OP) User() string {
	u, _ := url.Parse(op.Issuer)
	return "test-user@" + u.Hostname()
}

// Login follows authURL through the OP's login page as a browser would,
// signs in as username, and returns the first redirect that leaves the OP
// (the client's callback with code, state and iss) without following it.
func Login(ctx context.Context, authURL, username, password string) (*url.URL, error) {
	jar, _ := cookiejar.New(nil)
	au, err := url.Parse(authURL)
	if err != nil {
		return nil, err
	}
	var final *url.URL
	c := &http.Client{Jar: jar, CheckRedirect: func(req *http.Request, via []*http.Request) error {
		if req.URL.Host != au.Host {
			final = req.URL
			return http.ErrUseLastResponse
		}
		return nil
	}}
	resp, err := get(ctx, c, authURL)
	if err != nil {
		return nil, err
	}
	if final != nil {
		return final, nil
	}
	id := resp.Request.URL.Query().Get("authRequestID")
	if id == "" {
		return nil, fmt.Errorf("oauthtest: %s did not lead to the login page (ended at %s)", authURL, resp.Request.URL)
	}
	form := url.Values{"id": {id}, "username": {username}, "password": {password}}
	loginURL := resp.Request.URL.ResolveReference(&url.URL{Path: "/login/username"})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, loginURL.String(), strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err = c.Do(req)
	if err != nil {
		return nil, err
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if final == nil {
		return nil, fmt.Errorf("oauthtest: login as %s did not reach the callback (status %s): %.300s", username, resp.Status, body)
	}
	return final, nil
}

func get(ctx context.Context, c *http.Client, u string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp, nil
}

// Introspection is the OP's answer about a token (RFC 7662).
type Introspection struct {
	Active   bool   `json:"active"`
	Scope    string `json:"scope"`
	ClientID string `json:"client_id"`
	Subject  string `json:"sub"`
	Username string `json:"username"`
}

// Introspect asks the OP about token as a resource server would. The
// example OP answers only a client in the token's audience (the client it
// was issued to), so the native client (whose secret is empty), the web
// client and the service user are tried in turn.
func (op *OP) Introspect(ctx context.Context, token string) (*Introspection, error) {
	var in *Introspection
	var err error
	for _, c := range [][2]string{{NativeClient, ""}, {WebClient, WebSecret}, {ServiceClient, ServiceSecret}} {
		in, err = op.introspectAs(ctx, token, c[0], c[1])
		if err == nil && in.Active {
			return in, nil
		}
	}
	return in, err
}

func (op *OP) introspectAs(ctx context.Context, token, client, secret string) (*Introspection, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, op.Issuer+"oauth/introspect", strings.NewReader(url.Values{"token": {token}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(client, secret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var in Introspection
	if err := json.NewDecoder(resp.Body).Decode(&in); err != nil {
		return nil, fmt.Errorf("oauthtest: introspection: %w", err)
	}
	return &in, nil
}

// ResourceServer returns a handler that checks the request's bearer token
// by introspection at the OP and answers 401 without a valid one, and
// otherwise calls next with the introspection result.
func (op *OP) ResourceServer(next func(w http.ResponseWriter, r *http.Request, in *Introspection)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer`)
			http.Error(w, "no bearer token", http.StatusUnauthorized)
			return
		}
		in, err := op.Introspect(r.Context(), tok)
		if err != nil || !in.Active {
			w.Header().Set("WWW-Authenticate", `Bearer error="invalid_token"`)
			http.Error(w, "invalid token", http.StatusUnauthorized)
			return
		}
		next(w, r, in)
	})
}
