// Package openapi turns the operations of an OpenAPI 3 document into
// governed Keel tools, one per operation (github.com/getkin/kin-openapi
// parses and validates the document).
//
// Operation OP of API NAME is the tool NAME__OP (OP is the operationId,
// or the method and path): its arguments are the operation's path, query
// and header parameters and, as "body", its JSON request body, with the
// schemas of the document (component references inlined as $defs). A
// call is an HTTP request from Keel to the API's server, whose URL must
// pass the run's network allowlist; a bearer token, when configured, is
// added by Keel and never seen by the model. The response's status and
// body are the result, bounded like every tool result.
//
// Effects: GET, HEAD and OPTIONS are read-only; other methods are
// external and, unless the API is configured to let the policy decide
// writes, held for a person's approval (writes ask). The policy sees the
// method, path, operation id and tags as context.facts. Each operation's
// definition is pinned (SHA-256 of method, path and input schema); an
// operation whose definition changed since the run was created is held.
package openapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/keel-run/keel/internal/lazy"
	"github.com/keel-run/keel/redact"
	"github.com/keel-run/keel/sandbox"
	"github.com/keel-run/keel/sandbox/egress"
	"github.com/keel-run/keel/tool"
	"github.com/keel-run/keel/tool/builtin/web"
)

// Limits of a document.
const (
	MaxDocumentBytes = 10 << 20
	MaxOperations    = 200
	maxSchemaBytes   = 256 << 10
	maxResponseBytes = 1 << 20
)

// Options configures one API.
type Options struct {
	// Name prefixes the tools (NAME__OP) and is the policy's resource.
	Name string
	// Document is the OpenAPI document: a URL (fetched through Network,
	// with Token) or a file.
	Document string
	// BaseURL overrides the document's first server (required when that
	// is relative and the document is a file).
	BaseURL string
	// Tags and Operations, when set, keep only the operations with one of
	// the tags or one of the operation ids.
	Tags, Operations []string
	// Vault, when set, gives each request its token: the grant of the
	// call's agent and user at the provider the API names (Provider) or
	// whose resources cover the request's URL. A missing grant makes the
	// call wait (auth.required); the token is never sent elsewhere.
	Vault    Vault
	Provider string
	// Agent and User fetch the document when its URL needs a
	// credential (the calls use their own).
	Agent, User string
	// Token, when it returns a non-empty string, is sent as a bearer
	// token with every request (and the document's fetch) whose URL no
	// vault provider covers.
	Token func() string
	// WritesByPolicy lets the policy alone decide calls of operations
	// other than GET, HEAD and OPTIONS; false (the default) holds each
	// for a person's approval.
	WritesByPolicy bool
	// Network is the run's egress policy, which every URL must pass.
	Network sandbox.Network
	// Timeout bounds one request; 0 means 60 seconds.
	Timeout time.Duration
	// HTTPClient, when set, sends the requests.
	HTTPClient *http.Client
}

// API is a loaded document.
type API struct {
	opts Options
	doc  *openapi3.T
	base *url.URL
	hc   *http.Client
	ops  []*operation
}

type operation struct {
	id, method, path string
	tags             []string
	params           []*openapi3.Parameter
	bodyName         string // argument name of the JSON body, "" if none
	bodyRequired     bool
	schema           []byte
	summary          string
}

// Load reads, parses and validates the document and prepares its
// operations. Errors say what is wrong with the document.
func Load(ctx context.Context, o Options) (*API, error) {
	if o.Timeout <= 0 {
		o.Timeout = 60 * time.Second
	}
	a := &API{opts: o, hc: o.HTTPClient}
	if a.hc == nil {
		// Names reached only at public addresses unless the allowlist
		// names the address; the call's timeout bounds the answer.
		tr := egress.Transport()
		tr.ResponseHeaderTimeout = 0
		a.hc = &http.Client{Transport: tr}
	}
	hc := *a.hc
	network := o.Network
	hc.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if len(via) >= 5 {
			return errors.New("too many redirects")
		}
		return web.Allowed(network, req.URL)
	}
	a.hc = &hc
	data, docURL, err := a.fetchDocument(ctx)
	if err != nil {
		return nil, err
	}
	l := openapi3.NewLoader()
	l.IsExternalRefsAllowed = false
	doc, err := l.LoadFromData(data)
	if err != nil {
		return nil, fmt.Errorf("openapi %s: %s is not a valid OpenAPI document: %v", o.Name, redact.URL(o.Document), err)
	}
	if err := doc.Validate(ctx, openapi3.DisableExamplesValidation()); err != nil {
		return nil, fmt.Errorf("openapi %s: %s does not validate: %v", o.Name, redact.URL(o.Document), err)
	}
	a.doc = doc
	if err := a.resolveBase(docURL); err != nil {
		return nil, err
	}
	if err := a.operations(); err != nil {
		return nil, err
	}
	return a, nil
}

func (a *API) fetchDocument(ctx context.Context) ([]byte, *url.URL, error) {
	o := a.opts
	if u, err := url.Parse(o.Document); err == nil && (u.Scheme == "http" || u.Scheme == "https") {
		if err := web.Allowed(o.Network, u); err != nil {
			return nil, nil, fmt.Errorf("openapi %s: %s: %w (allow its host with --allow-host)", o.Name, redact.URL(o.Document), err)
		}
		ctx, cancel := context.WithTimeout(ctx, o.Timeout)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
		if err != nil {
			return nil, nil, err
		}
		req.Header.Set("Accept", "application/json, application/yaml")
		if err := a.authorizeDocument(ctx, req); err != nil {
			return nil, nil, err
		}
		resp, err := a.hc.Do(req)
		if err != nil {
			return nil, nil, fmt.Errorf("openapi %s: fetch %s: %s", o.Name, redact.URL(o.Document), redact.Text(err.Error()))
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return nil, nil, fmt.Errorf("openapi %s: fetch %s: %s", o.Name, redact.URL(o.Document), resp.Status)
		}
		b, err := io.ReadAll(io.LimitReader(resp.Body, MaxDocumentBytes+1))
		if err != nil {
			return nil, nil, fmt.Errorf("openapi %s: fetch %s: %v", o.Name, redact.URL(o.Document), err)
		}
		if len(b) > MaxDocumentBytes {
			return nil, nil, fmt.Errorf("openapi %s: %s is larger than %d bytes", o.Name, redact.URL(o.Document), MaxDocumentBytes)
		}
		return b, resp.Request.URL, nil
	}
	f, err := os.Open(o.Document)
	if err != nil {
		return nil, nil, fmt.Errorf("openapi %s: %v", o.Name, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxDocumentBytes+1))
	if err != nil {
		return nil, nil, fmt.Errorf("openapi %s: %v", o.Name, err)
	}
	if len(b) > MaxDocumentBytes {
		return nil, nil, fmt.Errorf("openapi %s: %s is larger than %d bytes", o.Name, redact.URL(o.Document), MaxDocumentBytes)
	}
	return b, nil, nil
}

func (a *API) resolveBase(docURL *url.URL) error {
	raw := a.opts.BaseURL
	if raw == "" && len(a.doc.Servers) > 0 {
		raw = a.doc.Servers[0].URL
	}
	if raw == "" {
		raw = "/"
	}
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("openapi %s: server URL %q: %v", a.opts.Name, raw, err)
	}
	if !u.IsAbs() {
		if docURL == nil {
			return fmt.Errorf("openapi %s: the document's server %q is relative; give the API's base URL", a.opts.Name, raw)
		}
		u = docURL.ResolveReference(u)
	}
	a.base = u
	return nil
}

var nonName = lazy.Regexp(`[^A-Za-z0-9_-]+`)

func (a *API) operations() error {
	paths := a.doc.Paths.InMatchingOrder()
	sort.Strings(paths)
	for _, p := range paths {
		item := a.doc.Paths.Find(p)
		for _, method := range []string{"GET", "HEAD", "OPTIONS", "POST", "PUT", "PATCH", "DELETE"} {
			op := item.GetOperation(method)
			if op == nil {
				continue
			}
			if len(a.opts.Operations) > 0 && !slices.Contains(a.opts.Operations, op.OperationID) {
				continue
			}
			if len(a.opts.Tags) > 0 && !slices.ContainsFunc(op.Tags, func(t string) bool { return slices.Contains(a.opts.Tags, t) }) {
				continue
			}
			if len(a.ops) >= MaxOperations {
				return fmt.Errorf("openapi %s: more than %d operations; keep fewer with tags or operations", a.opts.Name, MaxOperations)
			}
			o, err := a.operation(method, p, item, op)
			if err != nil {
				return err
			}
			a.ops = append(a.ops, o)
		}
	}
	return nil
}

func (a *API) operation(method, p string, item *openapi3.PathItem, op *openapi3.Operation) (*operation, error) {
	id := op.OperationID
	if id == "" {
		id = strings.ToLower(method) + "_" + strings.Trim(nonName().ReplaceAllString(p, "_"), "_")
	}
	id = strings.Trim(nonName().ReplaceAllString(id, "_"), "_")
	o := &operation{id: id, method: method, path: p, tags: op.Tags, summary: strings.TrimSpace(op.Summary + "\n" + op.Description)}
	props := map[string]any{}
	var required []string
	for _, pr := range append(slices.Clone(item.Parameters), op.Parameters...) {
		if pr == nil || pr.Value == nil {
			continue
		}
		v := pr.Value
		if v.In == "cookie" || (v.In == "header" && strings.EqualFold(v.Name, "authorization")) {
			continue
		}
		// An operation's parameter replaces the path item's of the same name.
		o.params = slices.DeleteFunc(o.params, func(x *openapi3.Parameter) bool { return x.Name == v.Name && x.In == v.In })
		o.params = append(o.params, v)
		s := map[string]any{"type": "string"}
		if v.Schema != nil {
			s = schemaOf(v.Schema)
		}
		if v.Description != "" {
			s["description"] = v.Description
		}
		props[v.Name] = s
		if v.Required || v.In == "path" {
			required = append(required, v.Name)
		}
	}
	if rb := op.RequestBody; rb != nil && rb.Value != nil {
		if mt := rb.Value.Content.Get("application/json"); mt != nil && mt.Schema != nil {
			o.bodyName = "body"
			if _, clash := props["body"]; clash {
				o.bodyName = "request_body"
			}
			s := schemaOf(mt.Schema)
			s["description"] = "the JSON request body"
			props[o.bodyName] = s
			if rb.Value.Required {
				required = append(required, o.bodyName)
				o.bodyRequired = true
			}
		}
	}
	schema := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
	if len(required) > 0 {
		sort.Strings(required)
		schema["required"] = required
	}
	b, err := json.Marshal(schema)
	if err != nil {
		return nil, err
	}
	b = a.withDefs(b)
	if len(b) > maxSchemaBytes {
		return nil, fmt.Errorf("openapi %s: the input schema of %s is %d bytes (at most %d)", a.opts.Name, id, len(b), maxSchemaBytes)
	}
	o.schema = b
	return o, nil
}

// schemaOf returns a schema as JSON Schema: its own JSON, where component
// references stay references (resolved by withDefs).
func schemaOf(sr *openapi3.SchemaRef) map[string]any {
	var b []byte
	if sr.Ref != "" {
		b, _ = json.Marshal(map[string]string{"$ref": sr.Ref})
	} else {
		b, _ = json.Marshal(sr.Value)
	}
	var m map[string]any
	if json.Unmarshal(b, &m) != nil || m == nil {
		m = map[string]any{}
	}
	return m
}

var refRE = lazy.Regexp(`"#/components/schemas/([^"]+)"`)

// withDefs rewrites component references of schema to $defs and adds the
// components it references, transitively.
func (a *API) withDefs(schema []byte) []byte {
	if !refRE().Match(schema) {
		return schema
	}
	defs := map[string]json.RawMessage{}
	queue := refRE().FindAllSubmatch(schema, -1)
	for len(queue) > 0 {
		name := string(queue[0][1])
		queue = queue[1:]
		if _, ok := defs[name]; ok {
			continue
		}
		sr := a.doc.Components.Schemas[name]
		if sr == nil || sr.Value == nil {
			defs[name] = json.RawMessage(`{}`)
			continue
		}
		b, _ := json.Marshal(sr.Value)
		defs[name] = b
		queue = append(queue, refRE().FindAllSubmatch(b, -1)...)
	}
	var m map[string]any
	json.Unmarshal(schema, &m)
	m["$defs"] = defs
	b, _ := json.Marshal(m)
	return refRE().ReplaceAll(b, []byte(`"#/$$defs/${1}"`))
}

// Pin returns the SHA-256 of an operation's definition: method, path and
// input schema.
func (o *operation) pin() string {
	h := sha256.New()
	fmt.Fprintf(h, "%s %s\n", o.method, o.path)
	h.Write(o.schema)
	return hex.EncodeToString(h.Sum(nil))
}

// Register adds a tool per operation to r and returns notes on the
// operations left out. pinned maps tool names to the pins journaled when
// the run was created (nil for a new run).
func (a *API) Register(r *tool.Registry, pinned map[string]string) []string {
	var notes []string
	for _, o := range a.ops {
		name := a.opts.Name + "__" + o.id
		if len(name) > 64 {
			notes = append(notes, fmt.Sprintf("openapi %s: operation %s left out: %s is longer than 64 characters", a.opts.Name, o.id, name))
			continue
		}
		t := a.tool(name, o)
		held := ""
		if p, ok := pinned[name]; ok && p != "" && p != t.Pin {
			held = fmt.Sprintf("the definition of operation %s (%s %s) of API %s changed since the run was created (%.12s… → %.12s…); approve to call it as now defined:\n%s",
				o.id, o.method, o.path, a.opts.Name, p, t.Pin, o.schema)
		}
		write := t.Effect != tool.ReadOnly && !a.opts.WritesByPolicy
		t.Hold = func() string {
			switch {
			case held != "":
				return held
			case write:
				return fmt.Sprintf("%s %s of API %s may change data: writes ask by default", o.method, o.path, a.opts.Name)
			}
			return ""
		}
		if err := r.TryAdd(t, a.handler(o)); err != nil {
			notes = append(notes, fmt.Sprintf("openapi %s: operation %s left out: %v", a.opts.Name, o.id, err))
		}
	}
	return notes
}

func (a *API) tool(name string, o *operation) *tool.Tool {
	desc := strings.TrimSpace(fmt.Sprintf("%s %s of the API %s.\n%s", o.method, o.path, a.opts.Name, sanitize(o.summary, 2000)))
	effect := tool.External
	if o.method == "GET" || o.method == "HEAD" || o.method == "OPTIONS" {
		effect = tool.ReadOnly
	}
	facts := map[string]any{"method": o.method, "path": o.path, "operation_id": o.id, "tags": slices.Clone(o.tags), "writes": effect != tool.ReadOnly}
	if o.tags == nil {
		facts["tags"] = []string{}
	}
	return &tool.Tool{
		Name:        name,
		Description: desc,
		InputSchema: o.schema,
		Effect:      effect,
		Idempotent:  o.method == "PUT" || o.method == "DELETE",
		Scope:       func(json.RawMessage) []string { return []string{} },
		Server:      a.opts.Name,
		Pin:         o.pin(),
		Facts:       func(json.RawMessage) map[string]any { return facts },
		Credential:  a.describe(o),
		Authorize:   a.authorizeCall(o),
	}
}

func sanitize(s string, n int) string {
	s = tool.Sanitize(s)
	if len(s) > n {
		return tool.Preview(s, n)
	}
	return s
}

func (a *API) handler(o *operation) tool.Handler {
	return func(ctx context.Context, req *tool.Request) (*tool.Result, error) {
		var args map[string]json.RawMessage
		if err := json.Unmarshal(req.Arguments, &args); err != nil {
			return tool.Errorf("invalid arguments: %v", err), nil
		}
		u, hdr := a.request(o, args)
		if err := web.Allowed(a.opts.Network, u); err != nil {
			return tool.Errorf("request refused: %v", err), nil
		}
		var body io.Reader
		if o.bodyName != "" {
			if raw, ok := args[o.bodyName]; ok {
				body = bytes.NewReader(raw)
				hdr.Set("Content-Type", "application/json")
			}
		}
		ctx, cancel := context.WithTimeout(ctx, a.opts.Timeout)
		defer cancel()
		hreq, err := http.NewRequestWithContext(ctx, o.method, u.String(), body)
		if err != nil {
			return tool.Errorf("request: %v", err), nil
		}
		for k, v := range hdr {
			hreq.Header[k] = v
		}
		hreq.Header.Set("Accept", "application/json, */*;q=0.5")
		hc := a.hc
		cred, err := a.credential(ctx, u, o.method, req.Principal, req.OnBehalfOf, req.RunID, req.CallID, req.MaxScopes)
		ar := tool.AuthRequired(err)
		switch {
		case err == nil:
			cred.Apply(hreq)
			// A credential is never carried to another URL.
			c := *a.hc
			c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
			hc = &c
		case errors.Is(err, errNoToken):
			a.staticToken(hreq)
		case ar != nil:
			return tool.Errorf("this operation needs an authorization a person must give first (%s); ask them to run: %s", ar.Error(), ar.Hint), nil
		default:
			return tool.Errorf("no credential for %s %s: %v", o.method, u.Redacted(), err), nil
		}
		resp, err := hc.Do(hreq)
		if err != nil {
			r := tool.Errorf("%s %s failed: %s", o.method, u.Redacted(), scrub(err.Error(), cred))
			r.TimedOut = errors.Is(ctx.Err(), context.DeadlineExceeded)
			return r, nil
		}
		defer resp.Body.Close()
		var ws *tool.Workspace
		maxChars := 0
		if req.Env != nil {
			ws, maxChars = req.Env.Workspace, req.Env.MaxResultChars
		}
		out := tool.NewOutput(ws, req.RunID, req.CallID, maxChars)
		data, _ := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
		fmt.Fprintf(out, "HTTP %s", resp.Status)
		if cred != nil {
			fmt.Fprintf(out, " · credential of %s", cred.Provider)
		}
		if loc := resp.Header.Get("Location"); loc != "" && cred != nil {
			fmt.Fprintf(out, "\nLocation: %.300s (not followed with the credential)", loc)
		}
		fmt.Fprintf(out, "\n%s", scrub(string(data), cred))
		if len(data) == maxResponseBytes {
			fmt.Fprintf(out, "\n[response cut at %d bytes]\n", maxResponseBytes)
		}
		out.Close()
		return &tool.Result{Content: out.View(), IsError: resp.StatusCode >= 400, Artifact: out.Artifact(), OutputBytes: out.Bytes()}, nil
	}
}

// request returns the URL and headers of a call of o with args.
func (a *API) request(o *operation, args map[string]json.RawMessage) (*url.URL, http.Header) {
	p := o.path
	q := url.Values{}
	hdr := http.Header{}
	for _, pr := range o.params {
		raw, ok := args[pr.Name]
		if !ok {
			continue
		}
		val := scalar(raw)
		switch pr.In {
		case "path":
			p = strings.ReplaceAll(p, "{"+pr.Name+"}", url.PathEscape(val))
		case "query":
			q.Set(pr.Name, val)
		case "header":
			hdr.Set(pr.Name, val)
		}
	}
	u := a.base.JoinPath(p)
	if len(q) > 0 {
		u.RawQuery = q.Encode()
	}
	return u, hdr
}

// requestURL is the URL of a call.
func (a *API) requestURL(o *operation, req *tool.Request) (*url.URL, error) {
	var args map[string]json.RawMessage
	if err := json.Unmarshal(req.Arguments, &args); err != nil {
		return nil, err
	}
	u, _ := a.request(o, args)
	return u, nil
}

// scalar returns a JSON value as a parameter's text.
func scalar(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(bytes.TrimSpace(raw))
}
