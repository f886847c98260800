// Package httpreq provides Keel's http_request tool: one HTTP request to a
// host the run's network allowlist permits, with the Authorization header
// added from the credential vault for the resources a provider names
// (package credential), after the gate allowed the call.
//
// Arguments: {"method": "GET"|"HEAD"|"POST"|"PUT"|"PATCH"|"DELETE"
// (default GET), "url": string (required), "headers": ["Name: value",
// ...], "body": string, "max_bytes": integer}.
//
// # Credentials
//
// The model never sees a credential. Before the gate decides, the tool
// tells it which provider, resource, method and scopes the call would use
// ([tool.Tool].Credential); after an allow, Authorize asks the vault and
// returns a [tool.AuthRequiredError] when a person must authorize first,
// which the runtime turns into a durable wait. When the call runs, the
// vault gives the credential (journaling its use with the call id) and
// the tool sets the Authorization header; a header of that name from the
// model is refused for such a resource. A credential is never sent
// anywhere its provider's resources do not cover: requests that carry one
// do not follow redirects. Every occurrence of the token in the response
// (a hostile resource echoing it) is replaced before the model sees it.
package httpreq

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/keel-run/keel/credential"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/redact"
	"github.com/keel-run/keel/sandbox"
	"github.com/keel-run/keel/sandbox/egress"
	"github.com/keel-run/keel/tool"
	"github.com/keel-run/keel/tool/builtin/web"
)

// Name is the tool's name.
const Name = "http_request"

// Defaults of [Options].
const (
	DefaultTimeout  = 30 * time.Second
	DefaultMaxBytes = 1 << 20
	maxBodyIn       = 1 << 20 // largest request body
	maxRedirects    = 5
)

// Vault is what the tool needs of a credential vault
// ([*credential.Vault] implements it).
type Vault interface {
	// Credential returns the credential for a request, as
	// [credential.Vault.Credential] documents.
	Credential(ctx context.Context, r *credential.Request) (*credential.Credential, error)
	// ProviderFor returns the provider whose resources cover url (or an
	// error wrapping [credential.ErrNoProvider]) without fetching a
	// token.
	ProviderFor(ctx context.Context, url string) (*credential.Provider, error)
}

// Options configures http_request. The zero value is valid (no vault:
// requests go out without credentials).
type Options struct {
	// Vault gives credentials; nil means none.
	Vault Vault
	// Transport makes the requests; nil means [egress.Transport] (no
	// proxy from the environment; names reached only at public addresses
	// unless the allowlist names the address).
	Transport http.RoundTripper
	// Timeout bounds a whole request; default [DefaultTimeout].
	Timeout time.Duration
	// MaxBytes is how much of a response body is read by default;
	// default [DefaultMaxBytes].
	MaxBytes int64
	// UserAgent is sent with every request; default web.DefaultUserAgent.
	UserAgent string
}

//go:embed http_request.md
var description string

// Register adds http_request to r. opts may be nil.
func Register(r *tool.Registry, opts *Options) {
	t, h := New(opts)
	r.Add(t, h)
}

type requester struct{ opts Options }

type input struct {
	Method   string   `json:"method"`
	URL      string   `json:"url"`
	Headers  []string `json:"headers"`
	Body     string   `json:"body"`
	MaxBytes float64  `json:"max_bytes"`
}

var methods = []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"}

// New returns http_request and its handler without registering them.
func New(opts *Options) (*tool.Tool, tool.Handler) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.UserAgent == "" {
		o.UserAgent = web.DefaultUserAgent
	}
	if o.Transport == nil {
		o.Transport = egress.Transport()
	}
	rq := &requester{opts: o}
	t := &tool.Tool{
		Name:        Name,
		Description: strings.TrimSpace(description),
		InputSchema: json.RawMessage(fmt.Sprintf(`{
  "type": "object",
  "additionalProperties": false,
  "properties": {
    "method": {"type": "string", "enum": ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"], "description": "The HTTP method; default GET."},
    "url": {"type": "string", "minLength": 1, "description": "The http or https URL."},
    "headers": {"type": "array", "items": {"type": "string"}, "maxItems": 50, "description": "Request headers as \"Name: value\" strings, e.g. \"Accept: application/json\" (never credentials: Keel adds them)."},
    "body": {"type": "string", "maxLength": %d, "description": "The request body."},
    "max_bytes": {"type": "integer", "minimum": 1, "maximum": %d, "description": "Read at most this many bytes of the response body; default %d."}
  },
  "required": ["url"]
}`, maxBodyIn, 10*o.MaxBytes, o.MaxBytes)),
		Effect:     tool.External,
		Scope:      func(json.RawMessage) []string { return []string{} },
		Credential: rq.describe,
		Authorize:  rq.authorize,
	}
	return t, rq.handle
}

func parse(args json.RawMessage) (*input, *url.URL, error) {
	var in input
	if err := json.Unmarshal(args, &in); err != nil {
		return nil, nil, fmt.Errorf("invalid arguments: %v", err)
	}
	in.Method = strings.ToUpper(strings.TrimSpace(in.Method))
	if in.Method == "" {
		in.Method = http.MethodGet
	}
	if !slices.Contains(methods, in.Method) {
		return nil, nil, fmt.Errorf("method %q is not one of %s", in.Method, strings.Join(methods, ", "))
	}
	u, err := url.Parse(strings.TrimSpace(in.URL))
	if err != nil || u.Host == "" {
		return nil, nil, fmt.Errorf("invalid URL %q", in.URL)
	}
	return &in, u, nil
}

// describe is the tool's Credential hook: the provider the call would use.
func (rq *requester) describe(ctx context.Context, req *tool.Request) *policy.CredentialUse {
	if rq.opts.Vault == nil {
		return nil
	}
	in, u, err := parse(req.Arguments)
	if err != nil {
		return nil
	}
	p, err := rq.opts.Vault.ProviderFor(ctx, u.String())
	if err != nil {
		return nil
	}
	return &policy.CredentialUse{Provider: p.Name, Resource: redact.Resource(u.String()), Method: in.Method, Scopes: p.Scopes}
}

func network(req *tool.Request) sandbox.Network {
	if req.Env != nil {
		return req.Env.Network
	}
	return sandbox.Network{}
}

// authorize is the tool's Authorize hook: a grant a person must give
// first becomes a [tool.AuthRequiredError].
func (rq *requester) authorize(ctx context.Context, req *tool.Request) error {
	if rq.opts.Vault == nil {
		return nil
	}
	_, u, err := parse(req.Arguments)
	if err != nil || web.Allowed(network(req), u) != nil {
		return nil // the handler reports it
	}
	_, err = rq.opts.Vault.Credential(ctx, &credential.Request{Agent: req.Principal, User: req.OnBehalfOf, Resource: u.String(), MaxScopes: req.MaxScopes})
	if ar := tool.AuthRequired(err); ar != nil {
		return ar
	}
	return nil
}

func (rq *requester) handle(ctx context.Context, req *tool.Request) (*tool.Result, error) {
	in, u, err := parse(req.Arguments)
	if err != nil {
		return tool.Errorf("http_request: %v", err), nil
	}
	nw := network(req)
	if err := web.Allowed(nw, u); err != nil {
		return tool.Errorf("request refused: %s", strings.TrimPrefix(err.Error(), web.ErrNotAllowed.Error()+": ")), nil
	}
	limit := rq.opts.MaxBytes
	if in.MaxBytes > 0 {
		limit = min(int64(in.MaxBytes), 10*rq.opts.MaxBytes)
	}
	ctx, cancel := context.WithTimeout(ctx, rq.opts.Timeout)
	defer cancel()
	var body io.Reader
	if in.Body != "" {
		body = strings.NewReader(in.Body)
	}
	hreq, err := http.NewRequestWithContext(ctx, in.Method, u.String(), body)
	if err != nil {
		return tool.Errorf("http_request: %v", err), nil
	}
	hreq.Header.Set("User-Agent", rq.opts.UserAgent)
	if tp := tool.TraceParent(ctx); tp != "" {
		// The service joins the run's trace (the model may override it).
		hreq.Header.Set("Traceparent", tp)
	}
	var covered *credential.Provider
	if rq.opts.Vault != nil {
		covered, _ = rq.opts.Vault.ProviderFor(ctx, u.String())
	}
	for _, line := range in.Headers {
		k, v, ok := strings.Cut(line, ":")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || k == "" || strings.ContainsAny(k, " \t\r\n") || strings.ContainsAny(v, "\r\n") {
			return tool.Errorf("http_request: header %q is not \"Name: value\"", line), nil
		}
		ck := http.CanonicalHeaderKey(k)
		if covered != nil && (ck == "Authorization" || ck == "Proxy-Authorization" || ck == "Cookie") {
			return tool.Errorf("http_request: do not set %s for %s: Keel adds the credential of provider %s itself", ck, redact.Resource(u.String()), covered.Name), nil
		}
		if ck == "Host" || ck == "Content-Length" || ck == "Transfer-Encoding" || ck == "Connection" {
			return tool.Errorf("http_request: header %s is set by Keel", ck), nil
		}
		hreq.Header.Add(k, v)
	}
	var cred *credential.Credential
	if rq.opts.Vault != nil {
		cred, err = rq.opts.Vault.Credential(ctx, &credential.Request{Agent: req.Principal, User: req.OnBehalfOf, Resource: u.String(),
			RunID: req.RunID, CallID: req.CallID, Method: in.Method, MaxScopes: req.MaxScopes})
		ar := tool.AuthRequired(err)
		switch {
		case err == nil:
		case errors.Is(err, credential.ErrNoProvider):
			cred = nil
		case ar != nil:
			return tool.Errorf("this request needs an authorization a person must give first (%s); ask them to run: %s", ar.Error(), ar.Hint), nil
		case errors.Is(err, credential.ErrNotAllowed):
			return tool.Errorf("no credential for this request: %v", err), nil
		default:
			return tool.Errorf("the credential for this request is unavailable right now: %v", err), nil
		}
	}
	if cred != nil {
		cred.Apply(hreq)
	}
	client := &http.Client{Transport: rq.opts.Transport, CheckRedirect: func(r *http.Request, via []*http.Request) error {
		if cred != nil {
			return http.ErrUseLastResponse // never carry a credential elsewhere
		}
		if len(via) >= maxRedirects {
			return fmt.Errorf("stopped after %d redirects", maxRedirects)
		}
		if err := web.Allowed(nw, r.URL); err != nil {
			return fmt.Errorf("redirect to %s refused: %s", r.URL.Redacted(), strings.TrimPrefix(err.Error(), web.ErrNotAllowed.Error()+": "))
		}
		return nil
	}}
	resp, err := client.Do(hreq)
	if err != nil {
		msg := err.Error()
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			msg = fmt.Sprintf("timed out after %s", rq.opts.Timeout)
		}
		return tool.Errorf("%s %s failed: %s", in.Method, redact.Resource(u.String()), scrub(msg, cred)), nil
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return tool.Errorf("%s %s failed while reading the body: %s", in.Method, redact.Resource(u.String()), scrub(err.Error(), cred)), nil
	}
	cut := int64(len(data)) > limit
	if cut {
		data = data[:limit]
	}
	var b strings.Builder
	fmt.Fprintf(&b, "HTTP %s · %s %s", resp.Status, in.Method, resp.Request.URL.Redacted())
	if cred != nil {
		fmt.Fprintf(&b, " · credential of %s (scopes %s)", cred.Provider, strings.Join(cred.Scopes, " "))
	}
	b.WriteByte('\n')
	for _, h := range []string{"Content-Type", "Location", "Retry-After", "WWW-Authenticate", "Link", "ETag"} {
		if v := resp.Header.Get(h); v != "" {
			fmt.Fprintf(&b, "%s: %.300s\n", h, v)
		}
	}
	media, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if len(data) > 0 {
		b.WriteByte('\n')
		if isBinary(media, data) {
			fmt.Fprintf(&b, "[binary body (%s, %d bytes) not shown]", media, len(data))
		} else {
			b.Write(data)
		}
	}
	if cut {
		fmt.Fprintf(&b, "\n[the body was cut at max_bytes=%d]", limit)
	}
	text := scrub(b.String(), cred)
	var ws *tool.Workspace
	if req.Env != nil {
		ws = req.Env.Workspace
	}
	maxChars := tool.DefaultMaxResultChars
	if req.Env != nil && req.Env.MaxResultChars > 0 {
		maxChars = req.Env.MaxResultChars
	}
	out := tool.NewOutput(ws, req.RunID, req.CallID, maxChars)
	out.Write([]byte(text))
	out.Close()
	return &tool.Result{Content: out.View(), Artifact: out.Artifact(), OutputBytes: out.Bytes(), IsError: resp.StatusCode >= 400}, nil
}

// scrub replaces every occurrence of the credential's token in s.
func scrub(s string, cred *credential.Credential) string {
	if cred == nil || cred.Token() == "" {
		return s
	}
	return redact.Value(s, cred.Token())
}

func isBinary(media string, data []byte) bool {
	if strings.HasPrefix(media, "text/") || strings.Contains(media, "json") || strings.Contains(media, "xml") || media == "application/x-www-form-urlencoded" {
		return false
	}
	sample := data[:min(len(data), 8192)]
	return slices.Contains(sample, 0)
}
