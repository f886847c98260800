package cli_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/keel-run/keel/server/api"
)

// Canaries of TestConnectorCredentialsRefused: a password and a token
// that must never appear in output, journal or API response.
const (
	canaryPW  = "Canary8Pw"
	canaryTok = "Canary8Tok"
)

// noCanary fails t when text holds either canary.
func noCanary(t *testing.T, what, text string) {
	t.Helper()
	if strings.Contains(text, canaryPW) || strings.Contains(text, canaryTok) {
		t.Errorf("%s holds a credential:\n%.3000s", what, text)
	}
}

// journalBytes returns the journal file db and its WAL, as stored.
func journalBytes(t *testing.T, db string) string {
	t.Helper()
	var b bytes.Buffer
	for _, p := range []string{db, db + "-wal"} {
		if data, err := os.ReadFile(p); err == nil {
			b.Write(data)
		}
	}
	return b.String()
}

// TestConnectorCredentialsRefused gives a connector URL that carries a
// credential (a password in its user info, a secret query parameter) to
// every place a connector is defined: keel agents create (local, and the
// API of keel serve it uses with --server), keel run --mcp and --openapi,
// config.toml's [[mcp.servers]] and [[openapi.apis]]; each refuses it,
// naming the part and what to do, and neither the password nor the token
// reaches the output, the journal or an API response. A --server URL with
// a password and a key=value --db are refused without printing theirs.
func TestConnectorCredentialsRefused(t *testing.T) {
	db := setup(t)
	mcpURL := "https://bob:" + canaryPW + "@mcp.example.com/mcp?token=" + canaryTok
	tokURL := "https://mcp.example.com/mcp?x=1&access_token=" + canaryTok
	apiDoc := "https://api.example.com/openapi.json?api_key=" + canaryTok
	refused := func(t *testing.T, what string, code int, out, errOut string, want ...string) {
		t.Helper()
		noCanary(t, what, out+errOut)
		if code == 0 {
			t.Errorf("%s = 0, want it refused:\n%s%s", what, out, errOut)
		}
		for _, w := range want {
			if !strings.Contains(errOut, w) {
				t.Errorf("%s: the error does not say %q:\n%s", what, w, errOut)
			}
		}
	}
	oneTurn := writeTrajectory(t, "one turn", []fcall{})
	ws := t.TempDir()
	run := func(extra ...string) []string {
		return append([]string{"run", "--db", db, "--model", "replay:" + oneTurn, "--workspace", ws, "--sandbox", "none", "--allow-host", "mcp.example.com"}, extra...)
	}
	for _, tt := range []struct {
		name string
		args []string
		want []string
	}{
		{"agents create --mcp user:pw@", []string{"agents", "create", "--db", db, "a1", "--mcp", "docs=" + mcpURL}, []string{"password of its user info", "keel auth connect mcp-NAME", "URL https://mcp.example.com/mcp carries"}},
		{"agents create --mcp ?access_token=", []string{"agents", "create", "--db", db, "a2", "--mcp", "docs=" + tokURL}, []string{`query parameter "access_token"`}},
		{"agents create --openapi ?api_key=", []string{"agents", "create", "--db", db, "a3", "--openapi", "api=" + apiDoc}, []string{`query parameter "api_key"`, "token_env"}},
		{"run --mcp user:pw@", run("--mcp", "docs="+mcpURL, "t"), []string{"password of its user info", "keel auth connect"}},
		{"run --mcp unreachable", run("--allow-host", "127.0.0.1:1", "--mcp", "k=http://bob:"+canaryPW+"@127.0.0.1:1/mcp?token="+canaryTok, "t"), []string{"password of its user info"}},
		{"run --openapi ?api_key=", run("--openapi", "api="+apiDoc, "t"), []string{`query parameter "api_key"`, "token_env"}},
		{"--server user:pw@", []string{"--server", "http://dave:" + canaryPW + "@127.0.0.1:1", "runs", "list"}, []string{"password of its user info", "--token"}},
		{"--db key=value", []string{"runs", "list", "--db", "host=127.0.0.1 port=1 user=f password=" + canaryPW + " dbname=x"}, []string{"key=value connection string", "postgres://"}},
		{"run --db key=value", []string{"run", "--db", "host=127.0.0.1 port=1 user=f password=" + canaryPW + " dbname=x", "--model", "replay:" + oneTurn, "--workspace", ws, "--sandbox", "none", "t"}, []string{"key=value connection string"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := keel(t, tt.args...)
			refused(t, "keel "+tt.name, code, out, errOut, tt.want...)
		})
	}
	for _, cfg := range []string{
		"[[mcp.servers]]\nname = \"k\"\nurl = \"" + mcpURL + "\"\n",
		"[[openapi.apis]]\nname = \"api\"\ndocument = \"" + apiDoc + "\"\n",
		"[[openapi.apis]]\nname = \"api\"\ndocument = \"/nonexistent/openapi.json\"\nbase_url = \"" + tokURL + "\"\n",
	} {
		if err := os.WriteFile(filepath.Join(os.Getenv("KEEL_HOME"), "config.toml"), []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		code, out, errOut := keel(t, run("t")...)
		refused(t, "keel run with config.toml "+cfg, code, out, errOut, "config.toml", "carries a credential")
	}
	// V2: the other spellings of a credential in a connector, each
	// refused by agents create (local and the API), run --mcp/--openapi
	// and config.toml, never shown nor journaled.
	spellings := []struct{ kind, spec, want string }{
		{"mcp", "https://mcp.example.com/mcp?key=" + canaryTok, `query parameter "key"`},
		{"mcp", "https://mcp.example.com/mcp?sv=2022-11-02&sig=" + canaryTok, `query parameter "sig"`},
		{"mcp", "https://mcp.example.com/mcp?signature=" + canaryTok, `query parameter "signature"`},
		{"mcp", "https://mcp.example.com/mcp?X-Amz-Credential=" + canaryTok, `query parameter "X-Amz-Credential"`},
		{"mcp", "https://mcp.example.com/mcp?X-Amz-Signature=" + canaryTok, `query parameter "X-Amz-Signature"`},
		{"mcp", "https://mcp.example.com/mcp?X-Amz-Security-Token=" + canaryTok, `query parameter "X-Amz-Security-Token"`},
		{"mcp", "https://mcp.example.com/mcp?x-goog-signature=" + canaryTok, `query parameter "x-goog-signature"`},
		{"mcp", "https://mcp.example.com/mcp?X-Goog-Credential=" + canaryTok, `query parameter "X-Goog-Credential"`},
		{"mcp", "https://mcp.example.com/mcp?AUTH=" + canaryTok, `query parameter "AUTH"`},
		{"mcp", "https://mcp.example.com/mcp?code=" + canaryTok, `query parameter "code"`},
		{"mcp", "https://mcp.example.com/mcp?jwt=" + canaryTok, `query parameter "jwt"`},
		{"mcp", "https://mcp.example.com/mcp?session=" + canaryTok, `query parameter "session"`},
		{"mcp", "https://mcp.example.com/mcp?sessionid=" + canaryTok, `query parameter "sessionid"`},
		{"mcp", "https://mcp.example.com/mcp?bearer=" + canaryTok, `query parameter "bearer"`},
		{"mcp", "https://mcp.example.com/mcp?pass=" + canaryPW, `query parameter "pass"`},
		{"mcp", "https://mcp.example.com/mcp?p%77d=" + canaryPW, `query parameter "pwd"`},
		{"mcp", "https://mcp.example.com/mcp;token=" + canaryTok, `path parameter "token"`},
		{"mcp", "https://mcp.example.com/mcp#token=" + canaryTok, "a fragment"},
		{"mcp", "https://mcp.example.com/mcp#access_token=" + canaryTok + "&token_type=bearer", "a fragment"},
		{"mcp", "https://" + canaryTok + "@mcp.example.com/mcp", "user info"},
		{"openapi", "https://api.example.com/openapi.json#" + canaryTok, "a fragment"},
		{"mcp", "/usr/bin/tool --token " + canaryTok, "the value of --token"},
		{"mcp", "/usr/bin/tool --password " + canaryPW, "the value of --password"},
		{"mcp", "/usr/bin/tool --api-key=" + canaryTok, "the value of --api-key"},
		{"mcp", "env API_KEY=" + canaryTok + " /usr/bin/tool", "the value of API_KEY"},
		{"mcp", "/usr/bin/tool https://u:" + canaryPW + "@h/x", "a URL argument with the password"},
	}
	for i, sp := range spellings {
		os.Remove(filepath.Join(os.Getenv("KEEL_HOME"), "config.toml"))
		name := fmt.Sprintf("s%d", i)
		entry := "k=" + sp.spec
		flag := "--" + sp.kind
		code, out, errOut := keel(t, "agents", "create", "--db", db, name, flag, entry)
		refused(t, "keel agents create "+flag+" "+entry, code, out, errOut, sp.want)
		code, out, errOut = keel(t, run(flag, entry, "t")...)
		refused(t, "keel run "+flag+" "+entry, code, out, errOut, sp.want)
		cfg := "[[mcp.servers]]\nname = \"k\"\nurl = " + strconv.Quote(sp.spec) + "\n"
		switch {
		case sp.kind == "openapi":
			cfg = "[[openapi.apis]]\nname = \"k\"\ndocument = " + strconv.Quote(sp.spec) + "\n"
		case !strings.Contains(sp.spec, "://") || strings.HasPrefix(sp.spec, "/"):
			words, _ := json.Marshal(strings.Fields(sp.spec))
			cfg = "[[mcp.servers]]\nname = \"k\"\ncommand = " + string(words) + "\n"
		}
		if err := os.WriteFile(filepath.Join(os.Getenv("KEEL_HOME"), "config.toml"), []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		code, out, errOut = keel(t, run("t")...)
		refused(t, "keel run with config.toml "+cfg, code, out, errOut, "config.toml", sp.want)
	}
	// A stdio server's env in config.toml is journaled too.
	if err := os.WriteFile(filepath.Join(os.Getenv("KEEL_HOME"), "config.toml"), []byte("[[mcp.servers]]\nname = \"k\"\ncommand = [\"/usr/bin/tool\"]\nenv = { LOG_LEVEL = \"warn\", API_TOKEN = \""+canaryTok+"\" }\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := keel(t, run("t")...)
	refused(t, "keel run with a secret in a server's env", code, out, errOut, "the value of API_TOKEN", "secret_env")
	os.Remove(filepath.Join(os.Getenv("KEEL_HOME"), "config.toml"))
	if entries, _ := filepath.Glob("host=*"); len(entries) > 0 {
		t.Errorf("a key=value --db made files %v (in the working directory)", entries)
		for _, e := range entries {
			os.RemoveAll(e)
		}
	}

	// The API keel --server agents create uses: refused with 400, and no
	// runs:read reader sees the credential.
	s := startServe(t)
	c := s.apiClient(t)
	conns := []*api.Connectors{{MCP: []string{"docs=" + mcpURL}}, {MCP: []string{"docs=" + tokURL}}, {OpenAPI: []string{"api=" + apiDoc}}}
	for _, sp := range spellings {
		if sp.kind == "openapi" {
			conns = append(conns, &api.Connectors{OpenAPI: []string{"api=" + sp.spec}})
		} else {
			conns = append(conns, &api.Connectors{MCP: []string{"docs=" + sp.spec}})
		}
	}
	for _, conn := range conns {
		_, err := c.CreateAgent(t.Context(), &api.CreateAgent{Name: "sec1", Kind: "employee", Connectors: conn})
		if err == nil || !strings.Contains(err.Error(), "carries a credential") {
			t.Errorf("POST /v1/agents with %v: %v, want it refused", conn, err)
		} else {
			noCanary(t, "POST /v1/agents's error", err.Error())
		}
	}
	// The same URL without its credentials is taken.
	if _, err := c.CreateAgent(t.Context(), &api.CreateAgent{Name: "ok1", Kind: "employee", Connectors: &api.Connectors{MCP: []string{"docs=https://mcp.example.com/mcp?x=1;v=2&max_tokens=5", "fs=node /srv/fs.js --token-file /run/t"}}}); err != nil {
		t.Errorf("POST /v1/agents with a URL without credentials: %v", err)
	}
	code, out, errOut = keel(t, "--server", s.url, "agents", "create", "sec2", "--mcp", "docs="+mcpURL)
	refused(t, "keel --server agents create", code, out, errOut, "password of its user info")
	req, _ := http.NewRequestWithContext(t.Context(), "GET", s.url+"/v1/agents", nil)
	req.Header.Set("Authorization", "Bearer "+s.savedToken(t))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	noCanary(t, "GET /v1/agents", string(body))
	stopProc(t, s.cmd.Process, s.done)
	noCanary(t, "keel serve's log", s.stderr.String())
	noCanary(t, "the journal", journalBytes(t, db))
}
