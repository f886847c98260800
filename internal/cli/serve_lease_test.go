package cli_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keel-run/keel/internal/cli"
)

// A second keel serve on a SQLite journal another server holds refuses
// to start (exit 2) naming the holder's pid and address, and leaves the
// saved CLI token alone; once the first server is gone (kill -9: the
// kernel releases the lease), a server starts on it again.
func TestSecondServeOnSQLiteRefused(t *testing.T) {
	setup(t)
	first := startServe(t)
	tokenFile := filepath.Join(os.Getenv("KEEL_HOME"), "server-token")
	before, err := os.ReadFile(tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	second := func() (int, string) {
		// The timeout only bounds a second server that wrongly starts.
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		var o, e bytes.Buffer
		code := cli.Main(ctx, []string{"serve", "--addr", "127.0.0.1:0", "--workspace-root", os.TempDir()}, &o, &e)
		return code, e.String()
	}
	code, errOut := second()
	pid := "pid " + strconv.Itoa(first.cmd.Process.Pid)
	if code != 2 || !strings.Contains(errOut, "already has a server") || !strings.Contains(errOut, pid) || !strings.Contains(errOut, first.url) {
		t.Fatalf("second keel serve = %d, want 2 naming %s at %s\n%s", code, pid, first.url, errOut)
	}
	after, err := os.ReadFile(tokenFile)
	if err != nil || !bytes.Equal(before, after) {
		t.Errorf("the refused server changed the saved token:\n%s\n%s", before, after)
	}
	if err := first.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-first.done
	startServe(t)
}

// While keel serve holds a SQLite journal, keel schedules trigger and
// backfill on it are refused (exit 2, nothing fired) naming the server
// to fire through: that server executes only the runs it makes.
func TestScheduleFireRefusedUnderServe(t *testing.T) {
	db := setup(t)
	ws := t.TempDir()
	allow := allowAllPolicy(t)
	srv := startServe(t)
	if code, _, errOut := keel(t, "schedules", "create", "--db", db, "nightly", "--cron", "0 3 * * *", "--task", "tidy",
		"--model", "scripted:demo", "--workspace", ws, "--policy", allow); code != 0 {
		t.Fatalf("schedules create = %d\n%s", code, errOut)
	}
	for _, args := range [][]string{
		{"schedules", "trigger", "--db", db, "nightly"},
		{"schedules", "backfill", "--db", db, "nightly", "--from", "2026-01-01T00:00:00Z", "--to", "2026-01-03T00:00:00Z"},
	} {
		code, _, errOut := keel(t, args...)
		if want := "fire it through the server: keel --server " + srv.url + " schedules " + args[1] + " nightly"; code != 2 || !strings.Contains(errOut, want) {
			t.Errorf("keel %s = %d, want 2 saying %q\n%s", strings.Join(args, " "), code, want, errOut)
		}
	}
	code, out, errOut := keel(t, "runs", "list", "--db", db, "--json")
	if code != 0 || strings.TrimSpace(out) != "" {
		t.Errorf("runs after the refusals = %d (want none)\n%s%s", code, out, errOut)
	}
	code, out, errOut = keel(t, "--server", srv.url, "schedules", "trigger", "nightly")
	if code != 0 || !strings.Contains(out, "fired") {
		t.Errorf("the trigger through the server = %d\n%s%s", code, out, errOut)
	}
}

// A schedule's creation makes no run: a skill that would not be offered
// to its runs is not reported then (it printed the service's log lines,
// "level=WARN msg=..." amid the command's output).
func TestScheduleCreateQuietAboutSkills(t *testing.T) {
	db := setup(t)
	bad := filepath.Join(os.Getenv("KEEL_HOME"), "skills", "bad")
	if err := os.MkdirAll(bad, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bad, "SKILL.md"), []byte("no front matter\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	allow := allowAllPolicy(t)
	code, _, errOut := keel(t, "schedules", "create", "--db", db, "--create-db", "nightly", "--cron", "0 3 * * *", "--task", "tidy",
		"--model", "scripted:demo", "--workspace", t.TempDir(), "--policy", allow)
	if code != 0 || strings.Contains(errOut, "level=") || strings.Contains(errOut, "skill") {
		t.Errorf("schedules create = %d, stderr:\n%s", code, errOut)
	}
}

// Two keel serve on two journals from one KEEL_HOME: the second saves
// its token beside the first's, and the command line reaches each server
// with its own token (the second overwrote the first's).
func TestSecondServeKeepsFirstToken(t *testing.T) {
	setup(t)
	first := startServe(t)
	second := startServe(t, "--db", filepath.Join(t.TempDir(), "other.db"), "--create-db")
	for _, s := range []*serveProc{first, second} {
		if code, _, errOut := keel(t, "--server", s.url, "runs", "list"); code != 0 {
			t.Errorf("runs list on %s = %d\n%s", s.url, code, errOut)
		}
	}
}
