package keel_test

import (
	"encoding/json"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

type goPackage struct {
	ImportPath string
	Dir        string
	Name       string
	Doc        string
	GoFiles    []string
	Deps       []string
	Imports    []string
}

func listPackages(t *testing.T, patterns ...string) []goPackage {
	t.Helper()
	out, err := exec.Command("go", append([]string{"list", "-e", "-json"}, patterns...)...).Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	var pkgs []goPackage
	for dec.More() {
		var p goPackage
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// Every package has a doc comment starting "Package NAME" (or "Command"
// for main packages), as tailscale's pkgdoc_test checks.
func TestEveryPackageHasDoc(t *testing.T) {
	for _, p := range listPackages(t, "./...") {
		if len(p.GoFiles) == 0 {
			continue
		}
		fset := token.NewFileSet()
		found := false
		for _, f := range p.GoFiles {
			af, err := parser.ParseFile(fset, filepath.Join(p.Dir, f), nil, parser.PackageClauseOnly|parser.ParseComments)
			if err != nil {
				t.Fatal(err)
			}
			if af.Doc == nil {
				continue
			}
			text := af.Doc.Text()
			want := "Package " + p.Name + " "
			if p.Name == "main" {
				want = "Command "
			}
			if !strings.HasPrefix(text, want) {
				t.Errorf("%s: doc comment in %s starts %q, want %q", p.ImportPath, f, firstWords(text), want)
			}
			found = true
		}
		if !found {
			t.Errorf("%s has no package doc comment", p.ImportPath)
		}
	}
}

func firstWords(s string) string {
	if len(s) > 30 {
		return s[:30]
	}
	return s
}

// The dependency direction of docs/architecture.md: the agent imports no
// storage driver, no HTTP server package and no CLI (net/http itself
// arrives with the model clients); library packages import
// neither internal/cli nor internal/config.
func TestDependencyBoundaries(t *testing.T) {
	const mod = "github.com/keel-run/keel/"
	for _, tt := range []struct {
		pkg    string
		banned []string
	}{
		{"./agent", []string{"modernc.org/sqlite", "github.com/jackc/pgx/v5", mod + "journal/sqlite", mod + "internal/cli", mod + "internal/config", mod + "server", mod + "sandbox/linux", mod + "model/openai", mod + "model/anthropic"}},
		{"./journal", []string{"modernc.org/sqlite", "net/http", mod + "agent"}},
		{"./model", []string{mod + "agent", mod + "journal", mod + "tool", mod + "model/openai", mod + "model/anthropic"}},
		{"./tool", []string{mod + "agent", mod + "journal", mod + "internal/cli"}},
		{"./sandbox", []string{mod + "agent", mod + "journal", mod + "tool"}},
		{"./policy", []string{"net/http", "os/exec", mod + "agent", mod + "journal"}},
		{"./model/openai", []string{"github.com/anthropics/anthropic-sdk-go/v2", mod + "model/anthropic"}},
		{"./model/anthropic", []string{"github.com/openai/openai-go/v3", mod + "model/openai"}},
	} {
		pkgs := listPackages(t, tt.pkg)
		if len(pkgs) != 1 {
			t.Fatalf("go list %s: %d packages", tt.pkg, len(pkgs))
		}
		for _, b := range tt.banned {
			if slices.Contains(pkgs[0].Deps, b) {
				t.Errorf("%s depends on %s", tt.pkg, b)
			}
		}
	}
	// No library package reads flags or configuration.
	for _, p := range listPackages(t, "./...") {
		if strings.Contains(p.ImportPath, "/internal/") || strings.HasSuffix(p.ImportPath, "/cmd/keel") || strings.HasSuffix(p.ImportPath, "keel-run/keel") {
			continue
		}
		for _, imp := range p.Imports {
			if imp == mod+"internal/cli" || imp == mod+"internal/config" || imp == "flag" || imp == "github.com/spf13/cobra" {
				t.Errorf("library package %s imports %s", p.ImportPath, imp)
			}
		}
	}
}
