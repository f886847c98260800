package cli_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/keel-run/keel/identity"
	"github.com/keel-run/keel/internal/testrun"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/memory"
)

// Every command written once against a backend prints the same, to the
// byte, on the local journal and through a team server on that journal:
// one table, both backends.
func TestLocalAndServerOutputSame(t *testing.T) {
	db := setup(t)
	mustKeel := func(args ...string) string {
		t.Helper()
		code, out, errOut := keel(t, args...)
		if code != 0 {
			t.Fatalf("keel %s = %d\n%s%s", strings.Join(args, " "), code, out, errOut)
		}
		return out
	}
	mustKeel("agents", "create", "--db", db, "--create-db", "bot", "--kind", "assistant", "--description", "files\ttickets \x1b[31mred\x1b[0m")
	mustKeel("agents", "create", "--db", db, "gone")
	mustKeel("agents", "revoke", "--db", db, "gone", "--reason", "left\tthe team")
	store := openDB(t, db)
	// An approval asked for more than a year ago, long expired; one
	// remembered for the agent; one waiting with no deadline.
	old := time.Now().AddDate(-1, 0, -3)
	expired := testrun.Paused(t, store, func() time.Time { return old }, "rm old.log", time.Hour)
	granted := testrun.Paused(t, store, time.Now, "rm 'a\tb'", 0)
	mustKeel("approve", "--db", db, granted, "c1", "--remember", "agent", "--no-resume")
	waiting := testrun.Paused(t, store, time.Now, "rm \x1b[2Jx", 0)
	note, err := memory.New(store, nil).Write(t.Context(), &memory.WriteParams{Scope: memory.TeamScope, Text: "tests run with\tmake \x1b[31mcheck", Source: memory.Source{By: "ann"}})
	if err != nil {
		t.Fatal(err)
	}
	store.Close()
	// A run in a git repository with checkpoints, for keel runs diff.
	ws := demoProject(t)
	gitRepo(t, ws)
	mustKeel("run", "--db", db, "--model", "scripted:demo", "--workspace", ws, "-q", "fix it")
	edited, _ := lastRun(t, db)
	seqs := checkpointSeqs(t, edited)
	firstCheckpoint, lastCheckpoint := strings.Fields(seqs[0])[0], strings.Fields(seqs[len(seqs)-1])[0]
	admin := strings.TrimSpace(mustKeel("tokens", "create", "--db", db, "--name", "root", "--scope", "admin"))
	mustKeel("tokens", "create", "--db", db, "--name", "ann", "--scope", "runs:write", "--agent", "bot")
	gone := strings.TrimSpace(mustKeel("tokens", "create", "--db", db, "--name", "old\u00a0ci"))
	mustKeel("tokens", "revoke", "--db", db, strings.Split(gone, "_")[1])

	// A schedule and a run trigger whose runs never ask (so they need no
	// notification sink), made on the journal.
	allow := allowAllPolicy(t)
	mustKeel("schedules", "create", "--db", db, "nightly", "--cron", "0 3 * * *", "--time-zone", "Europe/Berlin", "--task", "tidy {{.Time}}",
		"--model", "scripted:demo", "--workspace", ws, "--policy", allow)
	mustKeel("schedules", "pause", "--db", db, "nightly", "--reason", "not\tyet")
	mustKeel("triggers", "create", "--db", db, "after-bot", "--on-agent", "bot", "--on", "completed", "--task", "check {{.MessageID}}",
		"--model", "scripted:demo", "--workspace", ws, "--policy", allow)

	// A skill of the user's (the server's, on this machine).
	sk := filepath.Join(os.Getenv("KEEL_HOME"), "skills", "house-style")
	os.MkdirAll(sk, 0o755)
	if err := os.WriteFile(filepath.Join(sk, "SKILL.md"), []byte("---\nname: house-style\ndescription: Commit messages\tas this team writes them.\n---\nSubjects under 72 characters.\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	s := startServe(t)
	cases := [][]string{
		{"schedules", "list"},
		{"schedules", "list", "--json"},
		{"schedules", "show", "nightly"},
		{"schedules", "show", "nightly", "--json"},
		{"triggers", "list"},
		{"triggers", "show", "after-bot"},
		{"approvals", "list"},
		{"approvals", "list", "--json"},
		{"approvals", "list", "--run", expired},
		{"approvals", "list", "--run", waiting, "--json"},
		{"agents", "list"},
		{"agents", "list", "--json"},
		{"agents", "show", identity.LocalAgent},
		{"agents", "show", "gone"},
		{"agents", "show", "bot"},
		{"agents", "grants", identity.LocalAgent},
		{"agents", "grants", identity.LocalAgent, "--json"},
		{"agents", "grants", "bot"},
		{"tokens", "list"},
		{"runs", "list"},
		{"runs", "list", "--json"},
		{"runs", "list", "--status", "paused", "--limit", "2"},
		{"runs", "show", expired},
		{"runs", "show", waiting, "--json"},
		{"audit", "verify", expired, granted},
		{"audit", "verify", "--all"},
		{"audit", "verify", "--all", "--json"},
		{"runs", "diff", edited},
		{"runs", "diff", "--stat", edited},
		{"runs", "diff", "--at", lastCheckpoint, edited},
		{"runs", "diff", "--at", firstCheckpoint, edited},
		{"runs", "diff", "--at", "1", edited},
		{"runs", "diff", "--at", "3", expired},
		// A unique prefix, and the web UI's short form, name a run.
		{"runs", "show", expired[:len(expired)-2]},
		{"runs", "diff", "--stat", edited[:4] + "…" + edited[len(edited)-6:]},
		{"audit", "verify", expired[:20], granted[:20]},
		{"memory", "list"},
		{"memory", "list", "--json"},
		{"memory", "list", "--scope", "team", "--all"},
		{"memory", "show", note.ID},
		{"memory", "show", note.ID, "--json"},
		{"skills", "list", "--workspace", ws},
		{"skills", "list", "--workspace", ws, "--json"},
		{"skills", "show", "house-style", "--workspace", ws},
		{"skills", "show", "house-style", "--workspace", ws, "--json"},
		{"skills", "candidates"},
	}
	for _, args := range cases {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			lcode, lout, lerr := keel(t, append(args, "--db", db)...)
			rcode, rout, rerr := keel(t, append(args, "--server", s.url, "--token", admin)...)
			if lcode != 0 || rcode != 0 {
				t.Fatalf("exit local %d, server %d\n%s\n%s", lcode, rcode, lerr, rerr)
			}
			if diff := cmp.Diff(lout, rout); diff != "" {
				t.Errorf("local and server output differ (-local +server):\n%s", diff)
			}
		})
	}
	// Commands that change something print the same too (with the names
	// they were given).
	changes := [][]string{
		{"agents", "create", "NAME", "--kind", "assistant", "--description", "d\te"},
		{"agents", "revoke", "NAME", "--reason", "r"},
	}
	for _, args := range changes {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			named := func(name string) []string {
				out := make([]string, len(args))
				for i, a := range args {
					out[i] = strings.ReplaceAll(a, "NAME", name)
				}
				return out
			}
			lcode, lout, lerr := keel(t, append(named("local-1"), "--db", db)...)
			rcode, rout, rerr := keel(t, append(named("server-1"), "--server", s.url, "--token", admin)...)
			if lcode != 0 || rcode != 0 {
				t.Fatalf("exit local %d, server %d\n%s\n%s", lcode, rcode, lerr, rerr)
			}
			if diff := cmp.Diff(strings.ReplaceAll(lout, "local-1", "NAME"), strings.ReplaceAll(rout, "server-1", "NAME")); diff != "" {
				t.Errorf("local and server output differ (-local +server):\n%s", diff)
			}
		})
	}
}

// keel runs cancel works in both forms, says the same, and records who
// canceled: the person named by --by locally, the token's person on a
// server; a second cancel says the run is canceled already.
func TestCancelBothForms(t *testing.T) {
	db := setup(t)
	if code, _, errOut := keel(t, "agents", "list", "--db", db, "--create-db"); code != 0 {
		t.Fatal(errOut)
	}
	store := openDB(t, db)
	localRun := testrun.Paused(t, store, time.Now, "rm a", 0)
	serverRun := testrun.Paused(t, store, time.Now, "rm b", 0)
	store.Close()
	_, tok, _ := keel(t, "tokens", "create", "--db", db, "--name", "root", "--scope", "admin")
	s := startServe(t)
	local := []string{"--db", db, "--by", "ann"}
	remote := []string{"--server", s.url, "--token", strings.TrimSpace(tok)}
	for _, c := range []struct {
		id   string
		form []string
		by   string
	}{{localRun, local, "ann"}, {serverRun, remote, "root"}} {
		code, _, errOut := keel(t, append([]string{"runs", "cancel", c.id[:len(c.id)-2]}, c.form...)...)
		if code != 0 || !strings.HasPrefix(errOut, "keel: canceled run "+c.id+" (") {
			t.Fatalf("cancel %v = %d %q", c.form[0], code, errOut)
		}
		code, _, errOut = keel(t, append([]string{"runs", "cancel", c.id}, c.form...)...)
		if want := "keel: run " + c.id + " is already canceled\n"; code != 0 || errOut != want {
			t.Errorf("second cancel %v = %d %q, want %q", c.form[0], code, errOut, want)
		}
		store := openDB(t, db)
		evs, err := store.Read(t.Context(), c.id, 1)
		store.Close()
		if err != nil {
			t.Fatal(err)
		}
		last := evs[len(evs)-1]
		if last.Type != journal.RunCanceled || !strings.Contains(string(last.Payload), `"`+c.by+`"`) {
			t.Errorf("%v: last event %s %s, want run.canceled by %s", c.form[0], last.Type, last.Payload, c.by)
		}
	}
}

// approvals list --run takes what a RUN argument takes (a unique prefix,
// the web UI's short form) and refuses a run that does not exist, as
// every RUN argument does; it listed nothing for both.
func TestApprovalsListRunRef(t *testing.T) {
	db := setup(t)
	if code, _, errOut := keel(t, "agents", "list", "--db", db, "--create-db"); code != 0 {
		t.Fatal(errOut)
	}
	store := openDB(t, db)
	id := testrun.Paused(t, store, time.Now, "rm waiting.txt", 0)
	store.Close()
	for _, ref := range []string{id, id[:8], id[:4] + "…" + id[len(id)-6:]} {
		code, out, errOut := keel(t, "approvals", "list", "--db", db, "--run", ref)
		if code != 0 || !strings.Contains(out, "waiting.txt") {
			t.Errorf("approvals list --run %s = %d\n%s%s", ref, code, out, errOut)
		}
	}
	code, out, errOut := keel(t, "approvals", "list", "--db", db, "--run", "01zzzzzzzz")
	if code != 2 || !strings.Contains(errOut, `no run "01zzzzzzzz"`) {
		t.Errorf("approvals list --run of no run = %d\n%s%s", code, out, errOut)
	}
}

// No help shows a default that typing it back is refused: limits are 0
// (no limit) or more, so "(default -1)" must never appear.
func TestLimitFlagDefaultsCanBeTyped(t *testing.T) {
	for _, args := range [][]string{{"run"}, {"runs", "resume"}, {"runs", "fork"}, {"schedules", "create"}, {"triggers", "create"}, {"eval", "run"}} {
		code, out, errOut := keel(t, append(args, "--help")...)
		if code != 0 {
			t.Fatalf("%v --help = %d %s", args, code, errOut)
		}
		if strings.Contains(out, "(default -") {
			t.Errorf("%v --help shows a negative default:\n%s", args, out)
		}
	}
}

// A local fire makes a run nothing in this process executes: the command
// says so and how it runs (trial 8, F15), and runs list shows it queued.
func TestLocalScheduleTriggerSaysQueued(t *testing.T) {
	db := setup(t)
	ws := demoProject(t)
	allow := allowAllPolicy(t)
	if code, _, errOut := keel(t, "schedules", "create", "--db", db, "--create-db", "nightly", "--every", "24h", "--task", "tidy",
		"--model", "scripted:demo", "--workspace", ws, "--policy", allow); code != 0 {
		t.Fatal(errOut)
	}
	code, out, errOut := keel(t, "schedules", "trigger", "--db", db, "nightly")
	if code != 0 || !strings.Contains(out, "fired") || !strings.Contains(errOut, "is queued: keel scheduler on this journal executes it") {
		t.Fatalf("schedules trigger = %d\n%s%s", code, out, errOut)
	}
	if code, out, _ := keel(t, "runs", "list", "--db", db, "--status", "queued"); code != 0 || strings.Count(out, "\n") != 2 {
		t.Errorf("runs list --status queued:\n%s", out)
	}
}

// A local webhook trigger on a journal without a vault key: the request's
// own mistakes are reported first (exit 2), then the missing key in
// words true without a server (trial 8, F14).
func TestLocalWebhookTriggerWithoutVaultKey(t *testing.T) {
	db := setup(t)
	ws := demoProject(t)
	allow := allowAllPolicy(t)
	args := []string{"triggers", "create", "--db", db, "--create-db", "hook", "--task", "hello", "--model", "scripted:demo", "--workspace", ws, "--policy", allow}
	code, _, errOut := keel(t, append(args, "--max-steps", "-1")...)
	if code != 2 || !strings.Contains(errOut, "limits.max_steps -1") {
		t.Errorf("bad limit = %d %q, want 2 and the limit's message", code, errOut)
	}
	code, _, errOut = keel(t, args...)
	if code == 0 || !strings.Contains(errOut, "this journal has no vault key") || strings.Contains(errOut, "this server") {
		t.Errorf("no vault key = %d %q", code, errOut)
	}
}
