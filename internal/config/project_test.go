package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestLoadProject(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		file    string // "" : no file
		wantErr string
		model   string
		run     map[string]any
		servers int
	}{
		{name: "no file"},
		{name: "run defaults", file: "model = \"openai:gpt-4o\"\n[run]\nmax_steps = 40\nenv = [\"A=1\"]\ntimeout = \"2h\"\n",
			model: "openai:gpt-4o", run: map[string]any{"max_steps": int64(40), "env": []any{"A=1"}, "timeout": "2h"}},
		{name: "mcp servers", file: "[[mcp.servers]]\nname = \"docs\"\ncommand = [\"node\", \"srv.js\"]\nread_only = [\"tools\"]\n", servers: 1},
		{name: "where journals live is not a project's", file: "db = \"x.db\"\n", wantErr: `"db" is not a project setting`},
		{name: "prices are not a project's", file: "[prices.\"m\"]\ninput = 1.0\n", wantErr: `"prices" is not a project setting`},
		{name: "serve is not a project's", file: "[serve]\nworkspace_roots = [\"/\"]\n", wantErr: `"serve" is not a project setting`},
		{name: "syntax error", file: "[run\nmax_steps = 1\n", wantErr: "config.toml"},
		{name: "unknown key", file: "modle = \"x\"\n", wantErr: `"modle" is not a project setting`},
		{name: "bad mcp server", file: "[[mcp.servers]]\nname = \"x\"\n", wantErr: "give command or url"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			if tt.file != "" {
				os.MkdirAll(filepath.Join(dir, ".keel"), 0o755)
				if err := os.WriteFile(filepath.Join(dir, ".keel", "config.toml"), []byte(tt.file), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			c, err := LoadProject(dir)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tt.file == "" {
				if c != nil {
					t.Fatalf("no file gave %+v", c)
				}
				return
			}
			if c.Path != filepath.Join(dir, ".keel", "config.toml") || c.Model != tt.model || len(c.MCP.Servers) != tt.servers {
				t.Errorf("got path %s model %q servers %d", c.Path, c.Model, len(c.MCP.Servers))
			}
			if tt.run != nil {
				if d := cmp.Diff(tt.run, c.Run); d != "" {
					t.Errorf("run (-want +got):\n%s", d)
				}
			}
			if tt.servers > 0 && c.MCP.Servers[0].ReadOnly[0] != filepath.Join(dir, "tools") {
				t.Errorf("read_only %v: want relative to the project", c.MCP.Servers[0].ReadOnly)
			}
		})
	}
}
