// Package config reads Keel's configuration: the user's config file
// (~/.keel/config.toml, or $KEEL_HOME/config.toml) and the environment.
// It is, with internal/cli, the only place that reads files and
// environment variables for the library packages, which take options
// structs instead.
package config

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/BurntSushi/toml"

	"github.com/keel-run/keel/model"
)

// Config is the content of config.toml. Every field is optional.
//
//	model = "openai:gpt-4o"          # default --model
//	sandbox = "linux"                # default --sandbox
//	[prices."deepseek-chat"]         # USD per million tokens
//	input = 0.27
//	output = 1.10
//	cached_input = 0.07
//	[endpoints."https://api.deepseek.com/v1"]  # an OpenAI- or Anthropic-compatible endpoint
//	api_key_env = "DEEPSEEK_API_KEY"           # the variable holding its key
type Config struct {
	Model   string                 `toml:"model"`
	Sandbox string                 `toml:"sandbox"`
	DB      string                 `toml:"db"`
	Prices  map[string]model.Price `toml:"prices"`
	// Endpoints bind the base URLs of model specs
	// (openai-compatible:MODEL@URL, anthropic:MODEL@URL) to the
	// variables holding their keys. Only the user's file holds them,
	// never a project's.
	Endpoints map[string]Endpoint `toml:"endpoints"`
	// Memory caps the bytes of AGENTS.md / KEEL.md memory files put in
	// the system prompt.
	MemoryMaxBytes int `toml:"memory_max_bytes"`
	// Serve configures keel serve.
	Serve Serve `toml:"serve"`
	// Telemetry configures trace export (see docs/telemetry.md).
	Telemetry Telemetry `toml:"telemetry"`
	// MCP lists the MCP servers every run offers the tools of.
	MCP MCP `toml:"mcp"`
	// SQL lists the databases every run offers NAME__sql_query for.
	SQL SQL `toml:"sql"`
	// OpenAPI lists the APIs every run offers the operations of.
	OpenAPI OpenAPIs `toml:"openapi"`
	// Notify configures notification sinks (see docs/schedules.md).
	Notify Notify `toml:"notify"`
	// Run holds defaults of keel run's flags, by flag name (max_steps or
	// max-steps): a string, number, boolean, or an array for a
	// repeatable flag. internal/cli checks the names and values against
	// the flags themselves.
	Run map[string]any `toml:"run"`
	// Path is the file this Config was read from ("" when there was
	// none).
	Path string `toml:"-"`
}

// Endpoint is one [endpoints."URL"] entry of config.toml.
type Endpoint struct {
	// URL is the entry's base URL (its key in the table).
	URL string `toml:"-"`
	// APIKeyEnv names the environment variable holding the endpoint's
	// API key.
	APIKeyEnv string `toml:"api_key_env"`
}

// Endpoint returns the [endpoints] entry of base URL u (a trailing slash
// does not matter).
func (c *Config) Endpoint(u string) (Endpoint, bool) {
	if c == nil {
		return Endpoint{}, false
	}
	want := strings.TrimRight(u, "/")
	for k, e := range c.Endpoints {
		if strings.TrimRight(k, "/") == want {
			e.URL = k
			return e, true
		}
	}
	return Endpoint{}, false
}

// ProjectFile is where a repository keeps its Keel settings, relative to
// its top directory (the run's workspace). Inside a run the whole .keel
// directory is read-only to the agent: the sandbox mounts it read-only
// and the file tools refuse it.
const ProjectFile = ".keel/config.toml"

// projectKeys are the top-level keys a project file may hold: the
// settings of runs, not where journals live, prices or the server's.
var projectKeys = map[string]bool{"model": true, "sandbox": true, "run": true, "mcp": true}

// LoadProject reads the project file of the workspace dir
// (dir/.keel/config.toml). A missing file is nil, nil. It holds the
// same keys as config.toml, limited to the settings of runs (model,
// sandbox, [run], [[mcp.servers]]); any other key is an
// error naming it. Relative paths in it are relative to dir.
func LoadProject(dir string) (*Config, error) {
	p := filepath.Join(dir, filepath.FromSlash(ProjectFile))
	b, err := readRegular(p, maxConfigBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	var top map[string]any
	if _, err := toml.Decode(string(b), &top); err != nil {
		return nil, fmt.Errorf("config: %s: %w", p, err)
	}
	for k := range top {
		if !projectKeys[k] {
			return nil, fmt.Errorf("config: %s: %q is not a project setting (a project file holds model, sandbox, [run] and [[mcp.servers]]; the rest goes in ~/.keel/config.toml)", p, k)
		}
	}
	c, err := parse(p, b, dir)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// OpenAPIs is the [openapi] table of config.toml:
//
//	[[openapi.apis]]
//	name = "tickets"                           # tools are tickets__OPERATION
//	document = "https://tickets.example.com/openapi.json"   # or a file
//	base_url = "https://tickets.example.com/"  # default: the document's server
//	tags = ["issues"]                          # only these (or operations = [...])
//	provider = "tickets"                       # tokens from this vault provider (default: the one covering the URL)
//	token_env = "TICKETS_TOKEN"                # else a static bearer token from this variable
//	writes = "ask"                             # or "policy": the policy alone decides writes
type OpenAPIs struct {
	APIs []OpenAPIAPI `toml:"apis"`
}

// OpenAPIAPI is one [[openapi.apis]] entry.
type OpenAPIAPI struct {
	Name       string   `toml:"name"`
	Document   string   `toml:"document"`
	BaseURL    string   `toml:"base_url"`
	Tags       []string `toml:"tags"`
	Operations []string `toml:"operations"`
	TokenEnv   string   `toml:"token_env"`
	Provider   string   `toml:"provider"`
	Writes     string   `toml:"writes"`
}

// SQL is the [sql] table of config.toml:
//
//	[[sql.databases]]
//	name = "shop"                              # the tool is shop__sql_query
//	dsn = "postgres://agent@db.internal/shop"  # the password from PGPASSWORD or ~/.pgpass
//	allow_writes = false                       # default: every statement read-only
//	max_rows = 500
//	as_user = true                             # run as the end user (their DSN from the vault)
type SQL struct {
	Databases []SQLDatabase `toml:"databases"`
}

// SQLDatabase is one [[sql.databases]] entry.
type SQLDatabase struct {
	Name        string `toml:"name"`
	DSN         string `toml:"dsn"`
	AllowWrites bool   `toml:"allow_writes"`
	MaxRows     int    `toml:"max_rows"`
	// AsUser: statements of a run acting for a user run with that
	// user's own connection string, the vault secret sql:NAME (keel
	// auth secret set).
	AsUser bool `toml:"as_user"`
}

// MCP is the [mcp] table of config.toml:
//
//	[[mcp.servers]]
//	name = "everything"                       # tools are everything__TOOL
//	command = ["node", "/opt/mcp/everything/dist/index.js", "stdio"]
//	read_only = ["/opt/mcp"]                  # host paths the server needs in the sandbox
//	env = { LOG_LEVEL = "warn" }
//	secret_env = ["API_TOKEN"]                # the run's secrets it gets (default: none)
//	tools = ["echo", "get-sum"]               # only these (default: all)
//
//	[[mcp.servers]]
//	name = "tickets"
//	url = "https://mcp.example.com/mcp"       # its host must be in --allow-host
//	client_id = "keel"                        # a client pre-registered at its authorization server
//	# or: client_metadata_url = "https://keel.example.com/client.json"
//	# or: provider = "tickets"                # a provider of keel auth providers add
type MCP struct {
	Servers []MCPServer `toml:"servers"`
}

// MCPServer is one [[mcp.servers]] entry.
type MCPServer struct {
	Name     string            `toml:"name"`
	Command  []string          `toml:"command"`
	URL      string            `toml:"url"`
	Env      map[string]string `toml:"env"`
	Tools    []string          `toml:"tools"`
	ReadOnly []string          `toml:"read_only"`
	// SecretEnv names the run's secret variables (--secret-env,
	// --secret-for-host) a stdio server gets in its environment; it
	// gets none of them otherwise.
	SecretEnv []string `toml:"secret_env"`
	// Authorization of an HTTP server that asks for it (MCP
	// authorization through the vault): the vault provider to use, or
	// the client a provider registered on first contact uses (a
	// pre-registered ClientID with its secret in ClientSecretFile, or
	// Keel's client ID metadata document at ClientMetadataURL), and the
	// scopes it asks for.
	Provider          string   `toml:"provider"`
	ClientID          string   `toml:"client_id"`
	ClientSecretFile  string   `toml:"client_secret_file"`
	ClientMetadataURL string   `toml:"client_metadata_url"`
	Scopes            []string `toml:"scopes"`
}

// Notify is the [notify] table of config.toml: the sinks schedules,
// triggers and agents name, and the agents every run of which tells
// some:
//
//	[notify.sinks.oncall]
//	kind = "email"                       # email, webhook or slack
//	smtp = "mail.example.com:587"        # HOST:PORT
//	from = "keel@example.com"
//	to = ["oncall@example.com"]
//	username = "keel"                    # optional
//	password_env = "KEEL_SMTP_PASSWORD"  # the variable holding the password
//	tls = "mandatory"                    # or opportunistic, implicit, none
//
//	[notify.sinks.ops]
//	kind = "webhook"                     # signed with Standard Webhooks
//	url = "https://ops.example.com/keel"
//	secret_env = "KEEL_OPS_WEBHOOK_SECRET"   # whsec_... (the receiver verifies with it)
//
//	[notify.sinks.team]
//	kind = "slack"                       # a Slack-compatible incoming webhook
//	url_env = "KEEL_SLACK_WEBHOOK_URL"   # the URL is the secret
//
//	[notify.agents]
//	ci-bot = ["oncall"]
//
// Secrets are named by environment variable, never written here.
type Notify struct {
	Sinks  map[string]NotifySink `toml:"sinks"`
	Agents map[string][]string   `toml:"agents"`
}

// NotifySink is one [notify.sinks.NAME] entry.
type NotifySink struct {
	Kind        string   `toml:"kind"`
	URL         string   `toml:"url"`
	URLEnv      string   `toml:"url_env"`
	SecretEnv   string   `toml:"secret_env"`
	SMTP        string   `toml:"smtp"`
	From        string   `toml:"from"`
	To          []string `toml:"to"`
	Username    string   `toml:"username"`
	PasswordEnv string   `toml:"password_env"`
	TLS         string   `toml:"tls"`
}

// check reports what is missing or wrong in sink name.
func (s *NotifySink) check(name string) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("notify sink %q: "+format, append([]any{name}, args...)...)
	}
	switch s.Kind {
	case "email":
		if s.SMTP == "" || s.From == "" || len(s.To) == 0 {
			return bad("an email sink needs smtp (HOST:PORT), from and to")
		}
		if !slices.Contains([]string{"", "mandatory", "opportunistic", "implicit", "none"}, s.TLS) {
			return bad("tls %q: want mandatory, opportunistic, implicit or none", s.TLS)
		}
	case "webhook":
		if s.URL == "" || s.SecretEnv == "" {
			return bad("a webhook sink needs url and secret_env (the variable holding its whsec_ signing secret)")
		}
	case "slack":
		if s.URLEnv == "" {
			return bad("a slack sink needs url_env (the variable holding the incoming webhook's URL, which is its secret)")
		}
	default:
		return bad("kind %q: want email, webhook or slack", s.Kind)
	}
	if s.URL != "" {
		if u, err := url.Parse(s.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return bad("url %q: not an http(s) URL", s.URL)
		}
	}
	return nil
}

// Serve is the [serve] table of config.toml, the settings of keel serve:
//
//	[serve]
//	workspace_roots = ["/srv/keel/work"]   # also --workspace-root
//	replay_dirs = ["/srv/keel/recordings"] # also --replay-dir
//
// Relative paths are relative to the config file's directory.
type Serve struct {
	// WorkspaceRoots are the directories runs created through the API may
	// work in (each one or below it).
	WorkspaceRoots []string `toml:"workspace_roots"`
	// ReplayDirs are the directories replay recordings of non-admin
	// tokens come from.
	ReplayDirs []string `toml:"replay_dirs"`
}

// Home returns Keel's state directory: $KEEL_HOME if set, else ~/.keel.
func Home(getenv func(string) string) (string, error) {
	if h := getenv("KEEL_HOME"); h != "" {
		return h, nil
	}
	home := getenv("HOME")
	if home == "" {
		var err error
		home, err = os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("config: no home directory: set KEEL_HOME or HOME: %w", err)
		}
	}
	return filepath.Join(home, ".keel"), nil
}

// Load reads dir/config.toml. A missing file is an empty Config; a file
// that does not parse is an error naming the file, line and problem, and
// unknown keys are reported as errors (a typo must not be ignored).
func Load(dir string) (*Config, error) {
	p := filepath.Join(dir, "config.toml")
	b, err := readRegular(p, maxConfigBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return &Config{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return parse(p, b, dir)
}

// parse decodes config file p (content b); relative paths are relative
// to dir.
func parse(p string, b []byte, dir string) (*Config, error) {
	var c Config
	c.Path = p
	md, err := toml.Decode(string(b), &c)
	if err != nil {
		return nil, fmt.Errorf("config: %s: %w", p, err)
	}
	if und := md.Undecoded(); len(und) > 0 {
		return nil, fmt.Errorf("config: %s: unknown key %q", p, und[0].String())
	}
	for name, pr := range c.Prices {
		for _, v := range []float64{pr.Input, pr.Output, pr.CachedInput, pr.CacheWrite} {
			if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
				return nil, fmt.Errorf("config: %s: prices.%q: prices must be finite and not negative", p, name)
			}
		}
	}
	for u, e := range c.Endpoints {
		if pu, err := url.Parse(u); err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
			return nil, fmt.Errorf("config: %s: endpoints.%q: not an http(s) URL", p, u)
		}
		if e.APIKeyEnv == "" {
			return nil, fmt.Errorf("config: %s: endpoints.%q: api_key_env is empty (name the variable holding the endpoint's key)", p, u)
		}
	}
	if c.DB != "" && !filepath.IsAbs(c.DB) {
		// Relative to the config file, not to wherever keel runs.
		c.DB = filepath.Join(dir, c.DB)
	}
	for _, list := range [][]string{c.Serve.WorkspaceRoots, c.Serve.ReplayDirs} {
		for i, d := range list {
			if d == "" {
				return nil, fmt.Errorf("config: %s: [serve]: empty directory", p)
			}
			if !filepath.IsAbs(d) {
				list[i] = filepath.Join(dir, d)
			}
		}
	}
	for name, sk := range c.Notify.Sinks {
		if err := sk.check(name); err != nil {
			return nil, fmt.Errorf("config: %s: %w", p, err)
		}
	}
	for agent, sinks := range c.Notify.Agents {
		for _, k := range sinks {
			if _, ok := c.Notify.Sinks[k]; !ok {
				return nil, fmt.Errorf("config: %s: [notify.agents] %s names sink %q, which [notify.sinks] does not define", p, agent, k)
			}
		}
	}
	for i := range c.MCP.Servers {
		s := &c.MCP.Servers[i]
		if s.Name == "" {
			return nil, fmt.Errorf("config: %s: [[mcp.servers]] entry %d has no name", p, i+1)
		}
		if (len(s.Command) == 0) == (s.URL == "") {
			return nil, fmt.Errorf("config: %s: mcp server %q: give command or url (one of them)", p, s.Name)
		}
		for j, d := range s.ReadOnly {
			if !filepath.IsAbs(d) {
				s.ReadOnly[j] = filepath.Join(dir, d)
			}
		}
	}
	return &c, nil
}

// PriceTable returns the built-in prices overridden by the config's.
func (c *Config) PriceTable() model.PriceTable {
	t := model.DefaultPrices()
	for k, v := range c.Prices {
		t[k] = v
	}
	return t
}

// maxConfigBytes bounds config.toml.
const maxConfigBytes = 1 << 20

// readRegular reads the regular file p, at most max bytes, without
// blocking on a FIFO put in its place and without reading a device.
func readRegular(p string, max int64) ([]byte, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", p)
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%s is larger than %d bytes", p, max)
	}
	return b, nil
}
