package cli_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A --db that names no file is a mistyped path more often than a new
// journal: commands that read or change a journal refuse it (and create
// nothing), naming the journals that are there; --create-db, and the
// commands that add runs, agents or tokens, create it and say so; the
// default path is created silently on first use.
func TestMistypedDBPath(t *testing.T) {
	setup(t)
	dir := t.TempDir()
	team := filepath.Join(dir, "team.db")
	ws := demoProject(t)
	code, _, errOut := keel(t, "run", "--db", team, "--model", "scripted:demo", "--workspace", ws, "-q", "fix it")
	if code != 0 || !strings.Contains(errOut, "keel: "+team+" did not exist: created a new journal there") {
		t.Fatalf("first run into a new --db = %d\n%s", code, errOut)
	}
	if code, out, errOut := keel(t, "runs", "list", "--db", team); code != 0 || !strings.Contains(out, "completed") || strings.Contains(errOut, "created") {
		t.Fatalf("runs list of the journal = %d\n%s%s", code, out, errOut)
	}

	tema := filepath.Join(dir, "tema.db")
	for _, args := range [][]string{
		{"runs", "list", "--db", tema},
		{"audit", "verify", "--all", "--db", tema},
		{"approvals", "list", "--db", tema},
		{"agents", "list", "--db", tema},
	} {
		code, out, errOut := keel(t, args...)
		want := "keel: no journal at " + tema + " (journals in " + dir + ": team.db): check --db, or pass --create-db to start a new one there\n"
		if code != 2 || out != "" || errOut != want {
			t.Errorf("keel %s = %d\nstdout %q\nstderr %q\nwant stderr %q", strings.Join(args, " "), code, out, errOut, want)
		}
		if _, err := os.Stat(tema); !os.IsNotExist(err) {
			t.Fatalf("keel %s left a file at the mistyped path: %v", strings.Join(args, " "), err)
		}
	}

	fresh := filepath.Join(dir, "sub", "fresh.db")
	if code, out, errOut := keel(t, "runs", "list", "--db", fresh, "--create-db"); code != 0 || !strings.Contains(errOut, "created a new journal") {
		t.Fatalf("runs list --create-db = %d\n%s%s", code, out, errOut)
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Fatalf("--create-db created nothing: %v", err)
	}

	agents := filepath.Join(dir, "agents.db")
	if code, _, errOut := keel(t, "agents", "create", "--db", agents, "ci-bot"); code != 0 || !strings.Contains(errOut, "created a new journal") {
		t.Fatalf("agents create into a new --db = %d\n%s", code, errOut)
	}
	if code, out, errOut := keel(t, "agents", "revoke", "--db", filepath.Join(dir, "agent.db"), "ci-bot"); code != 2 || !strings.Contains(errOut, "no journal at") {
		t.Fatalf("agents revoke in a mistyped --db = %d\n%s%s", code, out, errOut)
	}

	// The default journal (KEEL_HOME/keel.db) comes to be on first use,
	// saying where (a mistyped KEEL_HOME shows), once.
	if code, out, errOut := keel(t, "runs", "list"); code != 0 || !strings.Contains(errOut, "keel.db did not exist: created a new journal there") {
		t.Fatalf("runs list on a new KEEL_HOME = %d\n%s%s", code, out, errOut)
	}
	if code, out, errOut := keel(t, "runs", "list"); code != 0 || errOut != "" {
		t.Fatalf("runs list again = %d\n%s%s", code, out, errOut)
	}
}

// A --db that names a directory, and a config.toml that does not parse,
// are configuration errors: exit 2 with a message that says what is wrong
// and how to fix it, before anything runs.
func TestDBDirectoryAndBadConfig(t *testing.T) {
	setup(t)
	dir := t.TempDir()
	ws := demoProject(t)
	for _, args := range [][]string{
		{"runs", "list", "--db", dir},
		{"run", "--db", dir, "--model", "scripted:demo", "--workspace", ws, "fix it"},
	} {
		code, _, errOut := keel(t, args...)
		want := "keel: the journal " + dir + " is a directory: --db must name the journal's file (for example " + filepath.Join(dir, "keel.db") + ")\n"
		if code != 2 || errOut != want {
			t.Errorf("keel %s = %d %q, want 2 %q", strings.Join(args, " "), code, errOut, want)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("a refused --db DIR left %d files in it", len(entries))
	}
	if _, err := os.Lstat(filepath.Join(ws, ".keel")); err == nil {
		t.Errorf("a refused keel run left .keel in its workspace")
	}
	cfg := filepath.Join(os.Getenv("KEEL_HOME"), "config.toml")
	for _, text := range []string{"sandbox = \"linux\"\n[serve\n", "sandbx = \"linux\"\n"} {
		if err := os.WriteFile(cfg, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		code, _, errOut := keel(t, "runs", "list")
		if code != 2 || !strings.Contains(errOut, "keel: config: "+cfg+": ") {
			t.Errorf("config %q: runs list = %d %q, want 2 naming the file", text, code, errOut)
		}
	}
}
