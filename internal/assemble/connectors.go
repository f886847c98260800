package assemble

import (
	"context"
	"path/filepath"
	"slices"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/identity"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/redact"
	"github.com/keel-run/keel/tool/codefiles"
	"github.com/keel-run/keel/tool/mcp"
	"github.com/keel-run/keel/tool/openapi"
	"github.com/keel-run/keel/tool/sqlquery"
)

// previousPins returns, for each tool of servers, the definition pinned by
// the newest of the last runs in the journal that used the same server
// (same name and command or URL), with the changes people approved in
// that run.
func (a *Assembler) previousPins(ctx context.Context, servers []agent.MCPServer) map[string]mcp.Pinned {
	out := map[string]mcp.Pinned{}
	store, err := a.openJournal(ctx)
	if err != nil {
		return out
	}
	defer store.Close()
	runs, err := store.Runs(ctx, &journal.ListParams{Limit: 50})
	if err != nil {
		return out
	}
	same := func(x, y agent.MCPServer) bool {
		return x.Name == y.Name && x.URL == y.URL && slices.Equal(x.Command, y.Command)
	}
	done := map[string]bool{}
	for _, r := range runs {
		if len(done) == len(servers) {
			break
		}
		evs, err := store.Read(ctx, r.RunID, 1)
		if err != nil || len(evs) == 0 {
			continue
		}
		st, err := agent.Fold(r.RunID, evs)
		if err != nil || st.Created == nil {
			continue
		}
		for _, s := range servers {
			if done[s.Name] || !slices.ContainsFunc(st.Created.MCP, func(o agent.MCPServer) bool { return same(o, s) }) {
				continue
			}
			done[s.Name] = true
			for _, t := range st.Created.Tools {
				if t.Server == s.Name && t.Pin != "" {
					out[t.Name] = mcp.Pinned{Pin: t.Pin, Description: t.Description, InputSchema: t.Parameters}
				}
			}
			for _, turn := range st.Turns {
				for _, call := range turn.Calls {
					if call.Decision == nil || call.Resolved == nil || call.Resolved.Decision != policy.Allow || !slices.Contains(call.Decision.Policies, agent.PolicyPin) {
						continue
					}
					if _, ok := out[call.Name]; ok {
						if np := mcp.ApprovedPin(call.Decision.Reason); np != "" {
							// Approved: the new definition is the pin; what
							// the model is shown comes from the server.
							out[call.Name] = mcp.Pinned{Pin: np}
						}
					}
				}
			}
		}
	}
	return out
}

// connectMCP connects the run's MCP servers and registers their tools.
// For a run being resumed, the definitions journaled in run.created are
// the pins a changed tool is held against.
func (a *Assembler) connectMCP(ctx context.Context, w *Run, c *agent.RunCreated) error {
	if err := a.connectSQL(ctx, w, c); err != nil {
		return err
	}
	if err := a.connectOpenAPI(ctx, w, c); err != nil {
		return err
	}
	if len(c.MCP) == 0 {
		return nil
	}
	pinned := map[string]mcp.Pinned{}
	for _, t := range c.Tools {
		if t.Server != "" {
			pinned[t.Name] = mcp.Pinned{Pin: t.Pin, Description: t.Description, InputSchema: t.Parameters}
		}
	}
	if len(c.Tools) == 0 {
		// A new run: the pins are those of the newest earlier run that
		// used the same server, so that a definition changed between
		// runs is held too.
		pinned = a.previousPins(ctx, c.MCP)
	}
	if len(c.Tools) == 0 {
		// The files of each server's first start are set below: in a
		// copy, never in a slice another run's payload may share.
		c.MCP = slices.Clone(c.MCP)
	}
	for i, s := range c.MCP {
		opts := &mcp.Options{Sandbox: w.sb, Network: w.Env.Network, CallTimeout: w.Env.CommandTimeout, Elicit: w.elicit,
			// What a stdio server runs from the workspace, held against
			// the files the run first started it with.
			Workspace: w.Env.Workspace, Files: s.Files, FileDigests: s.FileDigests, Record: a.codeFiles(c.Workspace)}
		if s.URL != "" {
			// A server that answers 401 is authorized through the vault.
			var err error
			if opts.Auth, err = a.mcpAuth(w, c, s); err != nil {
				return err
			}
		}
		cl, err := mcp.Connect(ctx, mcp.Server{Name: s.Name, Command: s.Command, URL: s.URL, Env: s.Env, Unset: withheldSecrets(c, s), SecretEnv: s.SecretEnv, Tools: s.Tools}, opts)
		if err != nil {
			return err
		}
		w.mcp = append(w.mcp, cl)
		if len(c.Tools) == 0 && s.Files == nil {
			// A new run (not journaled yet): the files of this first
			// start are the run's.
			c.MCP[i].Files, c.MCP[i].FileDigests = cl.Files(), cl.FileDigests()
		}
		if cl.Files() != nil && !cl.Started() {
			since := "the run first started it"
			if s.Files == nil {
				since = "Keel last started code from them in this workspace (an earlier run may have written them)"
			}
			a.notef("keel: mcp server %s was not started: the files it runs from the workspace changed since %s; its first call asks a person\n", s.Name, since)
		}
		regs, notes := cl.Register(w.Tools, pinned)
		for _, n := range notes {
			a.notef("keel: %s\n", n)
		}
		if ar := cl.AuthRequired(); ar != nil {
			if len(regs) == 0 {
				return mcpAuthError(s, ar)
			}
			a.notef("keel: mcp server %s waits for an authorization (%s); its calls wait until: %s\n", s.Name, ar.Reason, ar.Hint)
		}
	}
	return nil
}

// withheldSecrets are the run's secret variables stdio server s does
// not get: all but those its configuration gives it (secret_env). A
// server is code in the workspace, which the run (or an earlier one)
// may have changed, and it starts before any call is decided: with a
// secret in its environment, a planted module next to its script (a
// json.py beside server.py) would send it with no question.
func withheldSecrets(c *agent.RunCreated, s agent.MCPServer) []string {
	var out []string
	for _, n := range c.SecretEnv {
		if !slices.Contains(s.SecretEnv, n) {
			out = append(out, n)
		}
	}
	for _, h := range c.SecretHosts {
		if !slices.Contains(s.SecretEnv, h.Name) {
			out = append(out, h.Name)
		}
	}
	return out
}

// mcpReadOnly are the host paths the run's stdio servers need bound.
func mcpReadOnly(servers []agent.MCPServer) []string {
	var out []string
	for _, s := range servers {
		if len(s.Command) == 0 {
			continue
		}
		for _, p := range s.ReadOnly {
			if !slices.Contains(out, p) {
				out = append(out, p)
			}
		}
	}
	return out
}

// connectSQL opens the run's databases and registers their tools. The
// connection string with its password comes from this process (the
// flags) or config.toml; the journaled one otherwise.
func (a *Assembler) connectSQL(ctx context.Context, w *Run, c *agent.RunCreated) error {
	for _, d := range c.SQL {
		dsn := d.DSN
		if full, ok := w.params.SQLDSN[d.Name]; ok {
			dsn = full
		} else if a.Config != nil {
			for _, cd := range a.Config.SQL.Databases {
				if cd.Name == d.Name && redact.DSN(cd.DSN) == d.DSN {
					dsn = cd.DSN
				}
			}
		}
		o := sqlquery.Options{Name: d.Name, DSN: dsn, AllowWrites: d.AllowWrites, MaxRows: d.MaxRows, StatementTimeout: w.Env.CommandTimeout}
		if d.AsUser {
			// As the end user: their connection string from the vault.
			agentName := c.Principal
			if agentName == "" {
				agentName = identity.LocalAgent
			}
			o.UserDSN = sqlquery.VaultDSN(w.vault, d.Name, agentName, c.OnBehalfOf)
		}
		db, err := sqlquery.Open(ctx, o)
		if err != nil {
			return err
		}
		w.closers = append(w.closers, db.Close)
		t, h := db.Tool()
		if err := w.Tools.TryAdd(t, h); err != nil {
			return err
		}
	}
	return nil
}

// connectOpenAPI loads the run's API documents and registers their
// operations, held against the pins of run.created on a resume.
func (a *Assembler) connectOpenAPI(ctx context.Context, w *Run, c *agent.RunCreated) error {
	pinned := map[string]string{}
	for _, t := range c.Tools {
		if t.Server != "" {
			pinned[t.Name] = t.Pin
		}
	}
	for _, o := range c.OpenAPI {
		env := o.TokenEnv
		agentName := c.Principal
		if agentName == "" {
			agentName = identity.LocalAgent
		}
		api, err := openapi.Load(ctx, openapi.Options{Name: o.Name, Document: o.Document, BaseURL: o.BaseURL, Tags: o.Tags, Operations: o.Operations,
			WritesByPolicy: o.WritesByPolicy, Network: w.Env.Network, Timeout: w.Env.CommandTimeout,
			// Tokens from the vault (the provider covering the API, or
			// the one it names); the variable only where none does.
			Vault: w.vault, Provider: o.Provider, Agent: agentName, User: c.OnBehalfOf,
			Token: func() string {
				if env == "" {
					return ""
				}
				return a.getenv(env)
			}})
		if err != nil {
			return err
		}
		for _, n := range api.Register(w.Tools, pinned) {
			a.notef("keel: %s\n", n)
		}
	}
	return nil
}

// openJournal opens the journal (Assembler.OpenJournal).
func (a *Assembler) openJournal(ctx context.Context) (journal.Store, error) {
	if a.OpenJournal != nil {
		return a.OpenJournal(ctx)
	}
	return journal.Open(ctx, a.Journal)
}

// codeFiles is where Keel keeps, per workspace, the digests of the
// files it last started code from (a setup script, a stdio MCP server):
// in the workspace's state directory in its home, which no sandbox
// sees. nil without a home.
func (a *Assembler) codeFiles(ws string) *codefiles.Store {
	if a.Home == "" {
		return nil
	}
	return CodeFiles(a.Home, ws)
}

// CodeFiles is the record of the files Keel last started code from in
// the workspace ws ([codefiles.Store]), in its state directory of home.
func CodeFiles(home, ws string) *codefiles.Store {
	return &codefiles.Store{File: filepath.Join(StateDir(home, ws), "code-files.json")}
}
