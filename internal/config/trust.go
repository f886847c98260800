package config

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// TrustFile is the file of Keel's home directory home that lists the
// files the person trusts as they are (project files, agent
// definitions, skill lockfiles), one "SHA256 PATH" a line.
func TrustFile(home string) string { return filepath.Join(home, "trusted-projects") }

// Trusted reports whether the person trusts the file path with content
// (keel config trust, or a command the person ran that wrote it).
func Trusted(home, path string, content []byte) bool {
	t, err := os.ReadFile(TrustFile(home))
	return err == nil && slices.Contains(strings.Split(string(t), "\n"), trustLine(path, content))
}

// Trust records content of the file path as trusted.
func Trust(home, path string, content []byte) error {
	if Trusted(home, path, content) {
		return nil
	}
	if err := os.MkdirAll(home, 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(TrustFile(home), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintln(f, trustLine(path, content)); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func trustLine(path string, content []byte) string {
	return fmt.Sprintf("%x %s", sha256.Sum256(content), path)
}

// TrustingKeys are the settings of a project file that apply only once
// the person trusts the file: they can loosen what a run may do, or send
// what is the person's (the API key, to a model endpoint) elsewhere.
var TrustingKeys = []string{"model", "policy", "allow-host", "setup-allow-host"}

// Untrusted lists the trusting keys (and "[[mcp.servers]]") the project
// file proj sets, as its layer l applies them, unless the person trusts
// its content (keel config trust): keel run refuses a project file that
// has any.
func Untrusted(home string, proj *Config, l *Layer) ([]string, error) {
	var sets []string
	for _, k := range TrustingKeys {
		if l.Sets(k) {
			sets = append(sets, k)
		}
	}
	if len(proj.MCP.Servers) > 0 {
		sets = append(sets, "[[mcp.servers]]")
	}
	if len(sets) == 0 {
		return nil, nil
	}
	b, err := os.ReadFile(proj.Path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if Trusted(home, proj.Path, b) {
		return nil, nil
	}
	return sets, nil
}

// Workspace is the workspace of a project file (WORKSPACE/.keel/config.toml).
func (c *Config) Workspace() string { return filepath.Dir(filepath.Dir(c.Path)) }

// MCPSource is an MCP server of the config files: its name, what runs
// (the command) or is reached (the URL), and the file that names it.
type MCPSource struct{ Name, What, File string }

// MCPSources lists the MCP servers of the config files in order (nil
// ones skipped); a later file's server replaces an earlier one's of the
// same name (the project's, the user's).
func MCPSources(files ...*Config) []MCPSource {
	var out []MCPSource
	for _, c := range files {
		if c == nil {
			continue
		}
		for _, s := range c.MCP.Servers {
			src := MCPSource{s.Name, s.URL, c.Path}
			if len(s.Command) > 0 {
				src.What = strings.Join(s.Command, " ")
			}
			if i := slices.IndexFunc(out, func(o MCPSource) bool { return o.Name == s.Name }); i >= 0 {
				out[i] = src
			} else {
				out = append(out, src)
			}
		}
	}
	return out
}
