// Package mcp turns the tools of MCP servers into Keel tools, on the
// official MCP Go SDK (github.com/modelcontextprotocol/go-sdk).
//
// A stdio server is started inside the run's sandbox, as one long-lived
// command (its limits and network policy apply; its stdin and stdout are
// the protocol); a streamable-HTTP server is reached from Keel, only when
// its host is in the run's network allowlist (the same rule as
// fetch_url). Each tool TOOL of server NAME becomes the Keel tool
// NAME__TOOL: its arguments are validated against the server's schema by
// the registry, each call passes the gate with the server as its
// resource, and its result is bounded and sanitised like a built-in's,
// with images and embedded resources saved as workspace artifacts.
//
// The server's annotations are hints: every MCP tool has the external
// effect class (an interrupted call is never run again; its outcome is
// unknown), and the annotations reach the policy as facts
// (read_only_hint, destructive_hint, ...).
//
// Pinning: each tool's definition (name, description, input schema) is
// hashed ([Pin]); the hash is journaled with the run's tools. When the
// server later offers a different definition (a notification mid-run, or
// a resume), the tool is held: its calls wait for a person's approval,
// whose request shows the difference. Descriptions are sanitised (hidden
// Unicode removed, instruction-like text flagged) and bounded before the
// model sees them.
package mcp

import (
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
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/keel-run/keel/internal/lazy"
	"github.com/keel-run/keel/redact"
	"github.com/keel-run/keel/sandbox"
	"github.com/keel-run/keel/sandbox/egress"
	"github.com/keel-run/keel/tool"
	"github.com/keel-run/keel/tool/builtin/web"
	"github.com/keel-run/keel/tool/codefiles"
)

// Server describes how to reach one MCP server.
type Server struct {
	// Name is the prefix of the server's tools (NAME__TOOL): letters,
	// digits, '-' and '_', without "__".
	Name string
	// Command is the argv of a stdio server; URL the endpoint of a
	// streamable-HTTP server. Exactly one is set.
	Command []string
	URL     string
	// Env adds KEY=VALUE entries to a stdio server's environment.
	Env []string
	// Unset names variables of the sandbox's environment a stdio server
	// does not get ([sandbox.Cmd].Unset): the run's secrets, unless the
	// operator gave them to this server.
	Unset []string
	// SecretEnv names the run's secrets the operator gave a stdio server
	// (those not in Unset): an approval to start it with changed files
	// names them.
	SecretEnv []string
	// Tools, when non-empty, are the only tools offered (server names).
	Tools []string
}

// Options configures a connection.
type Options struct {
	// Sandbox runs stdio servers; required for them.
	Sandbox sandbox.Sandbox
	// Dir is a stdio server's working directory in the sandbox ("" is
	// the sandbox's default, the workspace).
	Dir string
	// Network is the run's egress policy, which an HTTP server's URL must
	// pass.
	Network sandbox.Network
	// HTTPClient, when set, carries HTTP requests (for example with the
	// vault's credentials); its redirects are checked against Network too.
	HTTPClient *http.Client
	// StartTimeout bounds starting and initialising the server; 0 means
	// 30 seconds.
	StartTimeout time.Duration
	// CallTimeout bounds one tool call; 0 means 2 minutes.
	CallTimeout time.Duration
	// MaxDescription bounds a description the model sees; 0 means 2,000
	// characters.
	MaxDescription int
	// OAuth, when set, authorizes an HTTP server's requests (MCP
	// authorization: protected resource metadata, PKCE, resource
	// indicators, the issuer check), for example the SDK's
	// auth.NewAuthorizationCodeHandler.
	OAuth auth.OAuthHandler
	// Auth, when set (and OAuth is not), authorizes an HTTP server with
	// tokens from Keel's credential vault ([Auth]).
	Auth *Auth
	// Workspace, when set, is the run's workspace, a stdio server's
	// working directory: the files a server runs from it are taken by
	// digest when Keel first starts it, and a later start with other
	// files waits for a person's approval (files.go).
	Workspace *tool.Workspace
	// Files are the digests of a stdio server's files journaled when
	// the run first started it ([Client.Files]); nil: the files of the
	// first start in this process. When the files differ from them,
	// Connect does not start the server: its tools are registered from
	// their pins and the first call asks a person.
	Files map[string]string
	// FileDigests are the digests of single files journaled with Files
	// ([Client.FileDigests]), to name the files that changed.
	FileDigests map[string]string
	// Record, when set, keeps the digests of the files each start ran
	// for the workspace, across runs: a new run (Files nil) does not
	// start the server with files other than those an earlier run last
	// started it (or other code) with before a person approves them, as
	// for a restart.
	Record *codefiles.Store
	// Elicit, when set, answers the server's requests for a person's
	// input during a tool call (elicitation, and the input requests of
	// multi-round-trip calls): the client then advertises the capability.
	// It may wait as long as the person takes; the call's timeout is
	// suspended meanwhile. Nil: such requests are refused.
	Elicit func(ctx context.Context, q *Question) (*sdk.ElicitResult, error)
}

// Question is a server's request for a person's input, with the call it
// came during.
type Question struct {
	// RunID and CallID are the call's; Tool its Keel name; Server the
	// server's name.
	RunID, CallID, Tool, Server string
	Params                      *sdk.ElicitParams
}

// Name and size limits.
const (
	// MaxToolName is the longest Keel tool name (the providers' limit).
	MaxToolName = 64
	// maxSchemaBytes bounds one tool's input schema.
	maxSchemaBytes = 64 << 10
	// maxTools bounds the tools taken from one server.
	maxTools = 200
	// maxStderr is how much of a stdio server's standard error is kept
	// for error messages.
	maxStderr = 8 << 10
)

// Client is a connection to one MCP server. It is safe for concurrent use.
type Client struct {
	srv  Server
	opts Options

	mu       sync.Mutex
	session  *sdk.ClientSession
	proc     *process // stdio only
	live     map[string]*sdk.Tool
	accepted map[string]string // server tool name → pin approved in this process
	closed   bool
	inflight []*inflight // calls in progress, oldest first
	// roots are what a stdio server runs from the workspace; started
	// the digests of the files it was last started with (or, before
	// the first start in this process, those journaled).
	roots   []root
	started *fileSet
	// timeouts counts the calls in a row that got no answer within
	// CallTimeout (an answer resets it): a stdio server is stopped at
	// the first (and started again for the next call); a server over
	// HTTP is no longer called after maxTimeouts.
	timeouts int

	// With Options.Auth: the vault provider of the server's tokens (""
	// until the server asks for authorization), the scopes its calls
	// need, and what a person must authorize when Connect could not
	// list the tools for want of a grant. amu guards them (it is
	// taken inside mu, never the other way: requests made while mu is
	// held, such as the session's close, read them).
	amu      sync.Mutex
	provider string
	scopes   []string
	waiting  *tool.AuthRequiredError
}

// inflight is a call in progress: the server's questions are asked for
// it, with its timeout suspended.
type inflight struct {
	req    *tool.Request
	remote string
	ctx    context.Context
	timer  *time.Timer
}

// Connect starts or reaches the server, initialises the session and lists
// its tools. The error says what went wrong (with the end of a stdio
// server's standard error).
func Connect(ctx context.Context, srv Server, opts *Options) (*Client, error) {
	if err := srv.check(); err != nil {
		return nil, err
	}
	c := &Client{srv: srv, accepted: map[string]string{}}
	if opts != nil {
		c.opts = *opts
	}
	if c.opts.StartTimeout <= 0 {
		c.opts.StartTimeout = 30 * time.Second
	}
	if c.opts.CallTimeout <= 0 {
		c.opts.CallTimeout = 2 * time.Minute
	}
	if c.opts.MaxDescription <= 0 {
		c.opts.MaxDescription = 2000
	}
	if c.opts.Auth != nil && (c.opts.OAuth != nil || c.opts.Auth.Vault == nil) {
		return nil, fmt.Errorf("mcp server %s: give OAuth or Auth with a vault, not both", srv.Name)
	}
	if len(srv.Command) > 0 && c.opts.Workspace != nil {
		c.roots = serverRoots(srv.Command, srv.Env, c.opts.Workspace)
		if len(c.roots) > 0 && c.opts.Files != nil {
			c.started = journaled(c.roots, c.opts.Files, c.opts.FileDigests)
			if now := fingerprint(c.opts.Workspace, c.roots); now.Sum() != c.started.Sum() {
				// Changed since the run first started it: not started
				// before a person approves (the first call asks).
				return c, nil
			}
		}
		if len(c.roots) > 0 && c.opts.Files == nil && c.opts.Record != nil {
			// The first start in a new run: held against the files Keel
			// last started code from in this workspace, in an earlier
			// run, which may have changed them for this one.
			base, err := c.opts.Record.Load(c.opts.Workspace)
			if err != nil {
				return nil, fmt.Errorf("mcp server %s: %w", srv.Name, err)
			}
			now := fingerprint(c.opts.Workspace, c.roots)
			if was := codefiles.Since(base, now); was.Sum() != now.Sum() {
				c.started = was
				return c, nil
			}
		}
	}
	if err := c.connect(ctx); err != nil {
		if ar := tool.AuthRequired(err); c.opts.Auth != nil && ar != nil {
			// A person must authorize first: the tools pinned by an
			// earlier run are offered and their calls wait for it.
			c.setWaiting(ar)
			return c, nil
		}
		return nil, err
	}
	return c, nil
}

func (s *Server) check() error {
	if err := CheckName(s.Name); err != nil {
		return err
	}
	switch {
	case len(s.Command) > 0 && s.URL != "":
		return fmt.Errorf("mcp server %s: give a command or a URL, not both", s.Name)
	case len(s.Command) == 0 && s.URL == "":
		return fmt.Errorf("mcp server %s: give a command or a URL", s.Name)
	}
	for _, e := range s.Env {
		if k, _, ok := strings.Cut(e, "="); !ok || k == "" {
			return fmt.Errorf("mcp server %s: env %q: want KEY=VALUE", s.Name, e)
		}
	}
	return nil
}

// CheckName reports whether name can prefix tool names: 1 to 32 letters,
// digits, '-' and '_', without "__" and not ending in '_'.
func CheckName(name string) error {
	if name == "" || len(name) > 32 {
		return fmt.Errorf("mcp server name %q: want 1 to 32 characters", name)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return fmt.Errorf("mcp server name %q: only letters, digits, '-' and '_'", name)
		}
	}
	if strings.Contains(name, "__") || strings.HasSuffix(name, "_") {
		return fmt.Errorf("mcp server name %q: must not contain \"__\" or end in '_' (tools are named NAME__TOOL)", name)
	}
	return nil
}

// connect (re)establishes the session; c.mu need not be held, it is
// taken to install the session.
func (c *Client) connect(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.opts.StartTimeout)
	defer cancel()
	var (
		t    sdk.Transport
		proc *process
		err  error
	)
	if len(c.srv.Command) > 0 {
		if c.opts.Sandbox == nil {
			return fmt.Errorf("mcp server %s: a stdio server needs the run's sandbox", c.srv.Name)
		}
		if len(c.roots) > 0 {
			now := fingerprint(c.opts.Workspace, c.roots)
			c.mu.Lock()
			if c.started == nil {
				c.started = now // the first start: what later starts are held against
			} else if now.Sum() == c.started.Sum() {
				c.started = now // the same files, known one by one from now on
			}
			same := now.Sum() == c.started.Sum()
			c.mu.Unlock()
			if !same {
				return fmt.Errorf("mcp server %s: %w", c.srv.Name, errFilesChanged)
			}
		}
		proc, err = startProcess(c.opts.Sandbox, c.opts.Dir, c.srv.Command, c.srv.Env, c.srv.Unset)
		if err != nil {
			return fmt.Errorf("mcp server %s: %w", c.srv.Name, err)
		}
		t = &sdk.IOTransport{Reader: proc.stdout, Writer: proc.stdin}
	} else {
		u, err := url.Parse(c.srv.URL)
		if err != nil {
			return fmt.Errorf("mcp server %s: URL %q: %v", c.srv.Name, redact.URL(c.srv.URL), c.hideURL(err))
		}
		if err := web.Allowed(c.opts.Network, u); err != nil {
			return fmt.Errorf("mcp server %s: %s: %w (allow its host with --allow-host)", c.srv.Name, redact.URL(c.srv.URL), c.hideURL(err))
		}
		hc, oh := c.httpClient(), c.opts.OAuth
		if c.opts.Auth != nil && oh == nil {
			base := hc.Transport
			if base == nil {
				base = http.DefaultTransport
			}
			hc.Transport, oh = &vaultTransport{c: c, base: base}, vaultHandler{c}
		}
		t = &sdk.StreamableClientTransport{Endpoint: c.srv.URL, HTTPClient: hc, MaxRetries: -1, OAuthHandler: oh}
	}
	copts := &sdk.ClientOptions{
		Capabilities: &sdk.ClientCapabilities{},
		ToolListChangedHandler: func(context.Context, *sdk.ToolListChangedRequest) {
			// Learn the new definitions off the SDK's goroutine; a
			// changed tool is held by the gate until approved.
			go c.Refresh(context.Background())
		},
	}
	if c.opts.Elicit != nil {
		copts.ElicitationHandler = c.elicit
	}
	client := sdk.NewClient(&sdk.Implementation{Name: "keel", Version: "1"}, copts)
	cs, err := client.Connect(ctx, t, nil)
	if err != nil {
		if proc != nil {
			proc.close()
			return fmt.Errorf("mcp server %s (%s) did not start: %w%s", c.srv.Name, strings.Join(c.srv.Command, " "), err, proc.note())
		}
		return fmt.Errorf("mcp server %s (%s): %w", c.srv.Name, redact.URL(c.srv.URL), c.hideURL(err))
	}
	tools, err := listTools(ctx, cs)
	if err != nil {
		cs.Close()
		if proc != nil {
			proc.close()
			return fmt.Errorf("mcp server %s: list tools: %w%s", c.srv.Name, err, proc.note())
		}
		return fmt.Errorf("mcp server %s: list tools: %w", c.srv.Name, err)
	}
	var after *fileSet
	if proc != nil && len(c.roots) > 0 {
		// Its files as it runs them: those it was started with, and
		// what it wrote itself while starting (Python's __pycache__).
		// No command of the run ran meanwhile: a call of the server's
		// tools runs apart from every call that writes (Exclusive).
		after = fingerprint(c.opts.Workspace, c.roots)
		// What the next run's first start is held against. Not kept
		// (Keel's home not writable), the older record stays, and the
		// next run asks about more, not less.
		_ = c.opts.Record.Update(c.opts.Workspace, c.roots, after)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		cs.Close()
		if proc != nil {
			proc.close()
		}
		return errClosed
	}
	c.session, c.proc, c.live = cs, proc, tools
	if after != nil {
		c.started = after
	}
	c.setWaiting(nil)
	return nil
}

var errClosed = errors.New("mcp: client closed")

// errFilesChanged refuses to start a stdio server whose files changed
// since it was started, unless a person approved them ([Client.mayStart]).
var errFilesChanged = errors.New("its files changed since Keel started it, and no person approved the change")

func (c *Client) httpClient() *http.Client {
	base := c.opts.HTTPClient
	if base == nil {
		// Names reached only at public addresses unless the allowlist
		// names the address; no header timeout (a call's answer may take
		// minutes: the call's own timeout bounds it).
		tr := egress.Transport()
		tr.ResponseHeaderTimeout, tr.MaxIdleConnsPerHost = 0, 4
		base = &http.Client{Transport: tr}
	}
	hc := *base
	network := c.opts.Network
	hc.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if len(via) >= 5 {
			return errors.New("too many redirects")
		}
		return web.Allowed(network, req.URL)
	}
	return &hc
}

func listTools(ctx context.Context, cs *sdk.ClientSession) (map[string]*sdk.Tool, error) {
	out := map[string]*sdk.Tool{}
	for t, err := range cs.Tools(ctx, nil) {
		if err != nil {
			return nil, err
		}
		if len(out) >= maxTools {
			break
		}
		out[t.Name] = t
	}
	return out, nil
}

// Refresh lists the server's tools again (after a change notification).
func (c *Client) Refresh(ctx context.Context) error {
	c.mu.Lock()
	cs := c.session
	c.mu.Unlock()
	if cs == nil {
		return errClosed
	}
	ctx, cancel := context.WithTimeout(ctx, c.opts.StartTimeout)
	defer cancel()
	tools, err := listTools(ctx, cs)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.live = tools
	c.mu.Unlock()
	return nil
}

// Close ends the session and a stdio server's process. It is idempotent.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	if c.session != nil {
		c.session.Close()
		c.session = nil
	}
	if c.proc != nil {
		c.proc.close()
		c.proc = nil
	}
	return nil
}

// Tools returns the names of the server's tools, sorted.
func (c *Client) Tools() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, 0, len(c.live))
	for n := range c.live {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// Name returns the server's name.
func (c *Client) Name() string { return c.srv.Name }

// Pin returns the SHA-256 (hex) of a tool definition: its name,
// description and input schema, as canonical JSON.
func Pin(t *sdk.Tool) string {
	b, _ := json.Marshal(definition(t))
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

type def struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	InputSchema any    `json:"inputSchema"`
}

// definition is what a pin covers; InputSchema is decoded JSON (maps
// marshal with sorted keys).
func definition(t *sdk.Tool) def {
	var schema any = t.InputSchema
	if b, err := json.Marshal(t.InputSchema); err == nil {
		var v any
		if json.Unmarshal(b, &v) == nil {
			schema = v
		}
	}
	return def{Name: t.Name, Description: t.Description, InputSchema: schema}
}

// Registered is a tool [Client.Register] added.
type Registered struct {
	Name   string // the Keel name, NAME__TOOL
	Remote string // the server's name for it
	Pin    string // the hash of the definition registered
}

// Pinned is a tool definition as journaled when a run was created.
type Pinned struct {
	Pin         string
	Description string          // as the model was shown it
	InputSchema json.RawMessage // as the model was shown it
}

// Register adds the server's tools to r as NAME__TOOL and returns them
// sorted, with notes on the tools it left out (a name that does not fit,
// a schema that does not compile, a tool not in Server.Tools). pinned maps
// Keel names to the definitions journaled when the run was created (nil
// for a new run): a tool whose definition no longer matches its pin is
// held until a person approves a call of it.
func (c *Client) Register(r *tool.Registry, pinned map[string]Pinned) ([]Registered, []string) {
	if c.AuthRequired() != nil || c.notStarted() {
		return c.registerPinned(r, pinned)
	}
	c.mu.Lock()
	names := make([]string, 0, len(c.live))
	for n := range c.live {
		names = append(names, n)
	}
	c.mu.Unlock()
	slices.Sort(names)
	var out []Registered
	var notes []string
	for _, remote := range names {
		if len(c.srv.Tools) > 0 && !slices.Contains(c.srv.Tools, remote) {
			continue
		}
		c.mu.Lock()
		t := c.live[remote]
		c.mu.Unlock()
		name, err := c.keelName(remote)
		if err != nil {
			notes = append(notes, err.Error())
			continue
		}
		kt, err := c.keelTool(name, t)
		if err != nil {
			notes = append(notes, err.Error())
			continue
		}
		pin := Pin(t)
		want, old := pin, shown{Description: kt.Description, InputSchema: kt.InputSchema}
		if p, ok := pinned[name]; ok && p.Pin != "" {
			want, old = p.Pin, shown{Description: p.Description, InputSchema: p.InputSchema}
			if want != pin && p.Description != "" {
				// Until a person approves the change, the model is shown
				// the definition that was pinned.
				kt.Description = p.Description
				if len(p.InputSchema) > 0 {
					kt.InputSchema = p.InputSchema
				}
			}
		}
		kt.Hold = c.holder(remote, want, old)
		if len(c.roots) > 0 {
			kt.State, kt.Exclusive = c.filesState, true
		}
		kt.Pin = want
		err = r.TryAdd(kt, c.handler(remote, want))
		if err != nil && want != pin {
			kt.InputSchema, _ = json.Marshal(t.InputSchema)
			err = r.TryAdd(kt, c.handler(remote, want))
		}
		if err != nil {
			notes = append(notes, fmt.Sprintf("mcp server %s: tool %s left out: %v", c.srv.Name, remote, err))
			continue
		}
		out = append(out, Registered{Name: name, Remote: remote, Pin: want})
	}
	for _, want := range c.srv.Tools {
		if !slices.Contains(names, want) {
			notes = append(notes, fmt.Sprintf("mcp server %s offers no tool %q (it offers: %s)", c.srv.Name, want, strings.Join(names, ", ")))
		}
	}
	return out, notes
}

// shown is a tool definition as the model sees it.
type shown struct {
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
}

func (c *Client) keelName(remote string) (string, error) {
	var b strings.Builder
	b.WriteString(c.srv.Name)
	b.WriteString("__")
	for _, r := range remote {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	name := b.String()
	if len(name) > MaxToolName {
		return "", fmt.Errorf("mcp server %s: tool %q left out: %s is longer than %d characters", c.srv.Name, remote, name, MaxToolName)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for other := range c.live {
		if other != remote && other < remote && mapName(other) == mapName(remote) {
			return "", fmt.Errorf("mcp server %s: tool %q left out: its name maps to %s like %q's", c.srv.Name, remote, name, other)
		}
	}
	return name, nil
}

func mapName(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			return r
		}
		return '_'
	}, s)
}

// keelTool builds the Keel description of a server tool.
func (c *Client) keelTool(name string, t *sdk.Tool) (*tool.Tool, error) {
	schema, err := json.Marshal(t.InputSchema)
	if err != nil || len(schema) == 0 || string(schema) == "null" {
		schema = []byte(`{"type":"object"}`)
	}
	if len(schema) > maxSchemaBytes {
		return nil, fmt.Errorf("mcp server %s: tool %q left out: its input schema is %d bytes (at most %d)", c.srv.Name, t.Name, len(schema), maxSchemaBytes)
	}
	facts := annotationFacts(t.Annotations)
	kt := &tool.Tool{
		Name:        name,
		Description: c.describe(t),
		InputSchema: schema,
		// Annotations are hints from the server, which may lie: an MCP
		// call is never assumed read-only or idempotent.
		Effect:    tool.External,
		Scope:     func(json.RawMessage) []string { return []string{} },
		Server:    c.srv.Name,
		Facts:     func(json.RawMessage) map[string]any { return facts },
		Authorize: c.authorizeCall,
	}
	return kt, nil
}

// describe returns the description of t the model sees: the title and
// the sanitised, bounded description, and where the tool comes from.
func (c *Client) describe(t *sdk.Tool) string {
	desc := Describe(t.Description, c.opts.MaxDescription)
	if title := toolTitle(t); title != "" && !strings.Contains(desc, title) {
		desc = SanitizeText(title, 200) + ": " + desc
	}
	return strings.TrimSpace(fmt.Sprintf("%s\n\n(Tool %q of the MCP server %s.)", desc, SanitizeText(t.Name, 200), c.srv.Name))
}

func toolTitle(t *sdk.Tool) string {
	if t.Title != "" {
		return t.Title
	}
	if t.Annotations != nil {
		return t.Annotations.Title
	}
	return ""
}

// annotationFacts turns a tool's annotations into policy facts; unknown
// hints are absent (the policy tests with `has`).
func annotationFacts(a *sdk.ToolAnnotations) map[string]any {
	f := map[string]any{"annotated": a != nil}
	if a == nil {
		return f
	}
	f["read_only_hint"] = a.ReadOnlyHint
	f["idempotent_hint"] = a.IdempotentHint
	if a.DestructiveHint != nil {
		f["destructive_hint"] = *a.DestructiveHint
	}
	if a.OpenWorldHint != nil {
		f["open_world_hint"] = *a.OpenWorldHint
	}
	return f
}

// holder returns the tool's Hold: a reason with the difference when the
// server's current definition does not match the pin and no person
// approved the new one in this process.
func (c *Client) holder(remote, pin string, old shown) func() string {
	return func() string {
		files := c.filesHold()
		c.mu.Lock()
		t := c.live[remote]
		accepted := c.accepted[remote]
		c.mu.Unlock()
		if t == nil {
			return files // the call fails with "no longer offered"
		}
		now := Pin(t)
		if now == pin || now == accepted {
			return files
		}
		cur := shown{Description: c.describe(t)}
		cur.InputSchema, _ = json.Marshal(t.InputSchema)
		why := holdReason(c.srv.Name, remote, pin, now, old, cur)
		if files != "" {
			why = files + "; and " + why
		}
		return why
	}
}

// holdReason describes a changed definition for the person who approves.
func holdReason(server, remote, oldPin, newPin string, old, now shown) string {
	var b strings.Builder
	fmt.Fprintf(&b, "the definition of tool %q of MCP server %s changed since it was pinned (%.12s… → %.12s…); approve to use the new definition (sha256:%s):\n", remote, server, oldPin, newPin, newPin)
	b.WriteString(Diff(old, now))
	return b.String()
}

// approvedPin matches the new pin in the reason of a hold.
var approvedPin = lazy.Regexp(`approve to use the new definition \(sha256:([0-9a-f]{64})\)`)

// ApprovedPin returns the pin a hold's reason proposes ("" when reason is
// not a hold's): once a person approved the call, that definition is the
// tool's pin for later runs.
func ApprovedPin(reason string) string {
	if m := approvedPin().FindStringSubmatch(reason); m != nil {
		return m[1]
	}
	return ""
}

// handler returns the handler of remote: the call goes to the server,
// and its result becomes a Keel result.
func (c *Client) handler(remote, pin string) tool.Handler {
	return func(ctx context.Context, req *tool.Request) (*tool.Result, error) {
		c.mu.Lock()
		t := c.live[remote]
		cs := c.session
		proc := c.proc
		if t != nil && Pin(t) != pin {
			// The gate held the changed tool and a person approved this
			// call: the new definition is accepted from now on.
			c.accepted[remote] = Pin(t)
		}
		c.mu.Unlock()
		if t == nil {
			return tool.Errorf("the MCP server %s no longer offers the tool %q", c.srv.Name, remote), nil
		}
		if proc == nil && c.wedged() {
			return tool.Errorf("not called: the MCP server %s did not answer %d calls in a row (each waited %s), so Keel no longer calls it in this execution (resuming the run connects to it again); do without its tools", c.srv.Name, maxTimeouts, c.opts.CallTimeout), nil
		}
		if cs == nil || (proc != nil && !proc.alive()) {
			note := ""
			if proc != nil {
				note = proc.note()
			}
			if r := c.mayStart(req); r != nil {
				return r, nil
			}
			if err := c.reconnect(ctx); err != nil {
				return tool.Errorf("the MCP server %s is not running and could not be restarted: %v", c.srv.Name, err), nil
			}
			c.mu.Lock()
			cs = c.session
			c.mu.Unlock()
			_ = note
		}
		// The call's timeout, suspended while the server waits for a
		// person's input (elicit).
		cctx, cancel := context.WithCancelCause(withCaller(ctx, req))
		defer cancel(nil)
		fl := &inflight{req: req, remote: remote, ctx: cctx, timer: time.AfterFunc(c.opts.CallTimeout, func() { cancel(errCallTimeout) })}
		defer fl.timer.Stop()
		c.mu.Lock()
		c.inflight = append(c.inflight, fl)
		c.mu.Unlock()
		defer func() {
			c.mu.Lock()
			c.inflight = slices.DeleteFunc(c.inflight, func(x *inflight) bool { return x == fl })
			c.mu.Unlock()
		}()
		params := &sdk.CallToolParams{Name: remote, Arguments: json.RawMessage(req.Arguments)}
		if tp := tool.TraceParent(ctx); tp != "" {
			// W3C trace context in _meta, so the server joins the run's trace.
			params.Meta = sdk.Meta{"traceparent": tp}
		}
		res, err := cs.CallTool(cctx, params)
		if err != nil {
			msg := err.Error()
			switch {
			case errors.Is(context.Cause(cctx), errCallTimeout) && ctx.Err() == nil:
				msg = fmt.Sprintf("no answer within %s", c.opts.CallTimeout)
			case ctx.Err() != nil:
				return nil, ctx.Err()
			}
			timedOut := errors.Is(context.Cause(cctx), errCallTimeout)
			note := c.deathNote()
			if timedOut {
				note = c.timedOut(cs)
			}
			r := tool.Errorf("the MCP server %s failed to run %s: %s%s", c.srv.Name, remote, tool.Preview(msg, 2000), note)
			r.TimedOut = timedOut
			return r, nil
		}
		c.mu.Lock()
		c.timeouts = 0
		c.mu.Unlock()
		return convert(req, res), nil
	}
}

// maxTimeouts is how many calls in a row a server over HTTP may leave
// unanswered within the call timeout before Keel stops calling it: a
// wedged server would otherwise hold every later call of the run for the
// whole timeout.
const maxTimeouts = 2

// wedged reports whether the server left maxTimeouts calls in a row
// unanswered.
func (c *Client) wedged() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.timeouts >= maxTimeouts
}

// timedOut counts a call of session cs that got no answer in time and
// says what Keel did about it: a stdio server still on cs is stopped
// (a server that ignores the call's cancellation would hold every
// later call), to be started again for the next call; a server over
// HTTP is called no more after maxTimeouts.
func (c *Client) timedOut(cs *sdk.ClientSession) string {
	c.mu.Lock()
	c.timeouts++
	if c.proc == nil {
		n := c.timeouts
		c.mu.Unlock()
		if n >= maxTimeouts {
			return fmt.Sprintf("; it left %d calls in a row unanswered, so Keel no longer calls it in this execution", n)
		}
		return ""
	}
	if c.session != cs {
		c.mu.Unlock()
		return "" // restarted already by another call
	}
	proc := c.proc
	c.session, c.proc = nil, nil
	c.timeouts = 0
	c.mu.Unlock()
	proc.close()
	cs.Close()
	return "; Keel stopped the server (it did not answer in time) and starts it again for the next call"
}

// errCallTimeout is the cause of a call that ran past CallTimeout.
var errCallTimeout = errors.New("mcp: call timeout")

// elicit answers the server's request for a person's input: it is asked
// for the oldest call in progress (a server asks during a call; with
// several at once the request does not say which), with that call's
// timeout suspended until the answer.
func (c *Client) elicit(ctx context.Context, req *sdk.ElicitRequest) (*sdk.ElicitResult, error) {
	c.mu.Lock()
	var fl *inflight
	if len(c.inflight) > 0 {
		fl = c.inflight[0]
	}
	c.mu.Unlock()
	if fl == nil || c.opts.Elicit == nil {
		return nil, fmt.Errorf("keel asks a person for input only during a tool call")
	}
	if !fl.timer.Stop() {
		return nil, fmt.Errorf("the call already timed out")
	}
	defer fl.timer.Reset(c.opts.CallTimeout)
	name, _ := c.keelName(fl.remote)
	// The wait ends with the call (a stopped run), or with the server's
	// request.
	wctx, cancel := context.WithCancel(fl.ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, cancel)
	defer stop()
	return c.opts.Elicit(wctx, &Question{RunID: fl.req.RunID, CallID: fl.req.CallID, Tool: name, Server: c.srv.Name, Params: req.Params})
}

// deathNote says how a stdio server ended, when it did.
func (c *Client) deathNote() string {
	c.mu.Lock()
	p := c.proc
	c.mu.Unlock()
	if p == nil || p.alive() {
		return ""
	}
	return "; the server exited" + p.note()
}

// reconnect replaces a dead session with a new one.
func (c *Client) reconnect(ctx context.Context) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return errClosed
	}
	if c.session != nil {
		c.session.Close()
	}
	if c.proc != nil {
		c.proc.close()
	}
	c.session, c.proc = nil, nil
	old := c.live
	c.mu.Unlock()
	if err := c.connect(ctx); err != nil {
		c.mu.Lock()
		if c.live == nil {
			c.live = old
		}
		c.mu.Unlock()
		return err
	}
	return nil
}

// convert turns a tool result into a Keel result: text through
// [tool.Output] (bounded, sanitised, the whole kept as an artifact),
// images, audio and resource blobs saved as artifacts and named.
func convert(req *tool.Request, res *sdk.CallToolResult) *tool.Result {
	var ws *tool.Workspace
	maxChars := 0
	if req.Env != nil {
		ws, maxChars = req.Env.Workspace, req.Env.MaxResultChars
	}
	out := tool.NewOutput(ws, req.RunID, req.CallID, maxChars)
	n := 0
	save := func(kind, mime string, data []byte) {
		n++
		name := fmt.Sprintf("%s-%d%s", req.CallID, n, extension(mime))
		rel, err := tool.WriteArtifact(ws, req.RunID, name, data)
		if err != nil {
			fmt.Fprintf(out, "[%s %s, %d bytes, not saved: %v]\n", kind, mime, len(data), err)
			return
		}
		fmt.Fprintf(out, "[%s %s, %d bytes, saved to %s]\n", kind, mime, len(data), rel)
	}
	for _, ct := range res.Content {
		switch x := ct.(type) {
		case *sdk.TextContent:
			io.WriteString(out, x.Text)
			if !strings.HasSuffix(x.Text, "\n") {
				io.WriteString(out, "\n")
			}
		case *sdk.ImageContent:
			save("image", x.MIMEType, x.Data)
		case *sdk.AudioContent:
			save("audio", x.MIMEType, x.Data)
		case *sdk.ResourceLink:
			fmt.Fprintf(out, "[resource link %s", x.URI)
			if x.Name != "" {
				fmt.Fprintf(out, " %q", x.Name)
			}
			if x.MIMEType != "" {
				fmt.Fprintf(out, " %s", x.MIMEType)
			}
			io.WriteString(out, "]\n")
			if x.Description != "" {
				fmt.Fprintf(out, "%s\n", x.Description)
			}
		case *sdk.EmbeddedResource:
			r := x.Resource
			if r == nil {
				continue
			}
			if r.Text != "" {
				fmt.Fprintf(out, "[resource %s %s]\n%s\n", r.URI, r.MIMEType, r.Text)
			}
			if len(r.Blob) > 0 {
				save("resource "+r.URI, r.MIMEType, r.Blob)
			}
		default:
			b, _ := json.Marshal(ct)
			fmt.Fprintf(out, "%s\n", b)
		}
	}
	if len(res.Content) == 0 && res.StructuredContent != nil {
		b, _ := json.MarshalIndent(res.StructuredContent, "", "  ")
		out.Write(b)
	}
	out.Close()
	return &tool.Result{Content: out.View(), IsError: res.IsError, Artifact: out.Artifact(), OutputBytes: out.Bytes()}
}

func extension(mime string) string {
	switch mime {
	case "image/png":
		return ".png"
	case "image/jpeg":
		return ".jpg"
	case "image/gif":
		return ".gif"
	case "image/webp":
		return ".webp"
	case "image/svg+xml":
		return ".svg"
	case "audio/wav", "audio/x-wav":
		return ".wav"
	case "audio/mpeg":
		return ".mp3"
	case "application/json":
		return ".json"
	case "application/gzip":
		return ".gz"
	}
	if strings.HasPrefix(mime, "text/") {
		return ".txt"
	}
	return ".bin"
}

// process is a stdio server running in the sandbox.
type process struct {
	stdin  *os.File      // write end of the server's stdin
	stdout io.ReadCloser // what the server writes
	cancel context.CancelFunc
	exited chan struct{}
	stderr *tail

	mu  sync.Mutex
	res *sandbox.Result
	err error
}

func startProcess(sb sandbox.Sandbox, dir string, argv, env, unset []string) (*process, error) {
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	p := &process{stdin: inW, stdout: outR, cancel: cancel, exited: make(chan struct{}), stderr: &tail{max: maxStderr}}
	cmd := &sandbox.Cmd{
		Args:    argv,
		Dir:     dir,
		Env:     env,
		Unset:   unset,
		Stdin:   inR,
		Stdout:  outW,
		Stderr:  p.stderr,
		Timeout: -1, // the server lives as long as the run; calls have their own limit
	}
	go func() {
		res, err := sb.Exec(ctx, cmd)
		inR.Close()
		p.mu.Lock()
		p.res, p.err = res, err
		p.mu.Unlock()
		close(p.exited)
		outW.CloseWithError(io.EOF)
	}()
	return p, nil
}

func (p *process) alive() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

func (p *process) close() {
	p.stdin.Close()
	p.cancel()
}

// note describes how the process ended and what it last wrote on
// standard error ("" when nothing is known).
func (p *process) note() string {
	var b strings.Builder
	p.mu.Lock()
	switch {
	case p.err != nil:
		fmt.Fprintf(&b, " (%v)", p.err)
	case p.res != nil && p.res.Signal != "":
		fmt.Fprintf(&b, " (killed by %s", p.res.Signal)
		if p.res.Limit != "" {
			fmt.Fprintf(&b, ", %s limit", p.res.Limit)
		}
		b.WriteString(")")
	case p.res != nil:
		fmt.Fprintf(&b, " (exit code %d", p.res.ExitCode)
		if p.res.Limit != "" {
			fmt.Fprintf(&b, ", %s limit", p.res.Limit)
		}
		b.WriteString(")")
	}
	p.mu.Unlock()
	if s := strings.TrimSpace(p.stderr.String()); s != "" {
		fmt.Fprintf(&b, "; its standard error ends with:\n%s", tool.Sanitize(tool.Preview(lastLines(s, 15), 2000)))
	}
	return b.String()
}

func lastLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// tail keeps the last max bytes written to it.
type tail struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.max {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.max:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

// hideURL returns err with the server's URL, as written or as net/url
// prints it (password as "***"), shown as [redact.URL] prints it: a URL
// journaled before connectors with credentials were refused may still
// hold one. It unwraps to err.
func (c *Client) hideURL(err error) error {
	if err == nil || c.srv.URL == "" || redact.URLCredential(c.srv.URL) == "" {
		return err
	}
	msg, shown := err.Error(), redact.URL(c.srv.URL)
	forms := []string{c.srv.URL}
	if u, perr := url.Parse(c.srv.URL); perr == nil && u.User != nil {
		// net/url's and net/http's masked forms.
		forms = append(forms, u.Redacted(), strings.Replace(u.String(), u.User.String()+"@", u.User.Username()+":***@", 1))
	}
	for _, f := range forms {
		msg = strings.ReplaceAll(msg, f, shown)
	}
	return &hiddenURLError{msg: msg, err: err}
}

type hiddenURLError struct {
	msg string
	err error
}

func (e *hiddenURLError) Error() string { return e.msg }
func (e *hiddenURLError) Unwrap() error { return e.err }
