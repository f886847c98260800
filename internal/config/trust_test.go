package config

import (
	"os"
	"path/filepath"
	"testing"
)

func TestTrustIsForTheExactContent(t *testing.T) {
	home := filepath.Join(t.TempDir(), "home")
	p := "/work/proj/.keel/config.toml"
	if Trusted(home, p, []byte("a")) {
		t.Fatal("trusted before any trust")
	}
	for range 2 { // a second trust of the same content adds no line
		if err := Trust(home, p, []byte("a")); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range []struct {
		path, content string
		want          bool
	}{{p, "a", true}, {p, "b", false}, {"/work/other/.keel/config.toml", "a", false}} {
		if got := Trusted(home, tt.path, []byte(tt.content)); got != tt.want {
			t.Errorf("Trusted(%s, %q) = %v, want %v", tt.path, tt.content, got, tt.want)
		}
	}
	b, err := os.ReadFile(TrustFile(home))
	if err != nil {
		t.Fatal(err)
	}
	if want := "ca978112ca1bbdcafac231b39a23dc4da786eff8147c4e72b9807785afee48bb " + p + "\n"; string(b) != want {
		t.Errorf("trust file %q, want %q", b, want)
	}
	if fi, err := os.Stat(TrustFile(home)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("trust file mode %v (%v), want 0600", fi.Mode(), err)
	}
}

func TestMCPSourcesProjectReplacesUser(t *testing.T) {
	user := &Config{Path: "/home/u/.keel/config.toml", MCP: MCP{Servers: []MCPServer{{Name: "fs", Command: []string{"mcp-fs", "/"}}, {Name: "web", URL: "https://u.example/mcp"}}}}
	proj := &Config{Path: "/work/p/.keel/config.toml", MCP: MCP{Servers: []MCPServer{{Name: "web", URL: "https://p.example/mcp"}, {Name: "db", URL: "https://db.example/mcp"}}}}
	got := MCPSources(user, nil, proj)
	want := []MCPSource{{"fs", "mcp-fs /", user.Path}, {"web", "https://p.example/mcp", proj.Path}, {"db", "https://db.example/mcp", proj.Path}}
	if len(got) != len(want) {
		t.Fatalf("MCPSources = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("MCPSources[%d] = %v, want %v", i, got[i], want[i])
		}
	}
	if w := proj.Workspace(); w != "/work/p" {
		t.Errorf("Workspace() = %s, want /work/p", w)
	}
}

func TestUntrustedUntilTrusted(t *testing.T) {
	ws := t.TempDir()
	home := filepath.Join(t.TempDir(), "home")
	if err := os.MkdirAll(filepath.Join(ws, ".keel"), 0o700); err != nil {
		t.Fatal(err)
	}
	body := "[run]\nallow-host = [\"example.com\"]\n"
	if err := os.WriteFile(filepath.Join(ws, ProjectFile), []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	proj, err := LoadProject(ws)
	if err != nil {
		t.Fatal(err)
	}
	l, err := NewLayer(proj, ws, true)
	if err != nil {
		t.Fatal(err)
	}
	if sets, err := Untrusted(home, proj, l); err != nil || len(sets) != 1 || sets[0] != "allow-host" {
		t.Fatalf("Untrusted = %v, %v; want [allow-host]", sets, err)
	}
	if err := Trust(home, proj.Path, []byte(body)); err != nil {
		t.Fatal(err)
	}
	if sets, err := Untrusted(home, proj, l); err != nil || sets != nil {
		t.Errorf("Untrusted after trust = %v, %v; want none", sets, err)
	}
}
