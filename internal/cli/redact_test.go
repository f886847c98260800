package cli_test

import (
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/keel-run/keel/internal/testenv"
)

// dsnPassword is the password of the connection strings of
// TestDSNPasswordNeverPrinted. The test cluster trusts user keel, so each
// of them connects, password and all.
const dsnPassword = "Canary9Pw"

// TestDSNPasswordNeverPrinted gives a PostgreSQL connection string with a
// password, in each form pgx accepts, to every printer of one, and finds
// the password in none of their output: keel serve's startup line and
// logs (debug level) up to its shutdown, keel worker's, the CLI's hints
// that name the journal (keel --db DSN runs resume ...), errors that quote
// the journal's address (unreachable, unknown scheme), keel config show
// (--sql), and a --sql database's run: its output and its journaled
// run.created.
func TestDSNPasswordNeverPrinted(t *testing.T) {
	setup(t)
	base := testenv.Postgres(t) // postgres://keel@127.0.0.1:PORT/NAME?sslmode=disable
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	hostport, db := u.Host, strings.TrimPrefix(u.Path, "/")
	// Forms a journal takes (a URL: the journal's backend is chosen by
	// scheme) and those only a --sql database takes (key=value).
	journalForms := []struct{ name, dsn string }{
		{"user:pw@", "postgres://keel:" + dsnPassword + "@" + hostport + "/" + db + "?sslmode=disable"},
		{"?password=", base + "&password=" + dsnPassword},
		{"?sslpassword=", base + "&sslpassword=" + dsnPassword},
		{"escaped ?pass%77ord=", base + "&pass%77ord=" + dsnPassword},
		{"postgresql://, '?' and '#' in the password", "postgresql://keel:" + dsnPassword + "?x#y@" + hostport + "/" + db + "?sslmode=disable"},
		{"several hosts", "postgres://keel:" + dsnPassword + "@" + hostport + "," + hostport + "/" + db + "?sslmode=disable"},
	}
	host, port, _ := strings.Cut(hostport, ":")
	kv := "host=" + host + " port=" + port + " user=keel dbname=" + db + " sslmode=disable"
	sqlForms := append([]struct{ name, dsn string }{
		{"key=value", kv + " password=" + dsnPassword},
		{"key = value", "password = " + dsnPassword + " " + kv},
		{"key=value quoted", kv + " password='" + dsnPassword + " \\' x'"},
		{"key=value escaped", kv + ` password=` + dsnPassword + `\ x`},
	}, journalForms...)

	check := func(t *testing.T, printer, out string) {
		t.Helper()
		if strings.Contains(out, dsnPassword) {
			t.Errorf("%s prints the password:\n%s", printer, out)
		}
	}
	twoTurns := writeTrajectory(t, "two turns", []fcall{sh("true")}, []fcall{})
	for _, f := range journalForms {
		t.Run("journal "+f.name, func(t *testing.T) {
			// keel serve: the startup line and the logs, to its end.
			s := startServe(t, "--db", f.dsn, "--log-level", "debug")
			if _, err := s.apiClient(t).Runs(t.Context(), nil); err != nil {
				t.Errorf("the server on %s does not answer: %v", f.name, err)
			}
			stopProc(t, s.cmd.Process, s.done)
			check(t, "keel serve", s.stderr.String())
			if !strings.Contains(s.stderr.String(), "journal postgres") {
				t.Errorf("keel serve names no journal:\n%s", s.stderr)
			}

			// A hint that names the journal: a run stopped by its step
			// limit says how to go on.
			code, out, errOut := keel(t, "run", "--db", f.dsn, "--model", "replay:"+twoTurns, "--workspace", t.TempDir(), "--sandbox", "none", "--max-steps", "1")
			check(t, "keel run's hints", out+errOut)
			if code == 0 || !strings.Contains(errOut, "keel --db ") {
				t.Errorf("keel run --max-steps 1 = %d, want a hint naming the journal:\n%s", code, errOut)
			}

			// Errors that quote the journal's address.
			for _, bad := range []string{strings.ReplaceAll(f.dsn, hostport, "127.0.0.1:1"), strings.Replace(f.dsn, "postgres", "postgrez", 1)} {
				code, out, errOut := keel(t, "runs", "list", "--db", bad)
				check(t, "keel runs list's error", out+errOut)
				if code == 0 {
					t.Errorf("keel runs list --db %s = 0", bad)
				}
			}
		})
	}
	t.Run("worker", func(t *testing.T) {
		tp := testenv.Temporal(t)
		for _, f := range journalForms {
			w := startWorker(t, "--db", f.dsn, "--temporal", tp, "--workspace-root", os.TempDir())
			stopProc(t, w.cmd.Process, w.done)
			check(t, "keel worker ("+f.name+")", w.stderr.String())
			if !strings.Contains(w.stderr.String(), "journal postgres") {
				t.Errorf("keel worker names no journal:\n%s", w.stderr)
			}
		}
	})
	oneTurn := writeTrajectory(t, "one turn", []fcall{})
	// Each form's run has a journal and a workspace of its own.
	runEach(t, len(sqlForms), func(i int) string { return "sql " + sqlForms[i].name }, func(t *testing.T, i int) {
		f := sqlForms[i]
		for _, asJSON := range []bool{false, true} {
			args := []string{"config", "show", "--sql", "shop=" + f.dsn}
			if asJSON {
				args = append(args, "--config-json")
			}
			code, out, errOut := keel(t, args...)
			check(t, "keel config show", out+errOut)
			if code != 0 || !strings.Contains(out, "shop=") {
				t.Errorf("keel %s = %d:\n%s%s", strings.Join(args, " "), code, out, errOut)
			}
		}
		dbFile := t.TempDir() + "/keel.db"
		code, out, errOut := keel(t, "run", "--db", dbFile, "--sql", "shop="+f.dsn, "--model", "replay:"+oneTurn, "--workspace", t.TempDir(), "--sandbox", "none")
		check(t, "keel run --sql", out+errOut)
		if code != 0 {
			t.Fatalf("keel run --sql = %d:\n%s", code, errOut)
		}
		code, out, errOut = keel(t, "runs", "show", onlyRun(t, dbFile), "--db", dbFile, "--json")
		check(t, "the journaled run.created", out+errOut)
		if code != 0 || !strings.Contains(out, `"name":"shop"`) {
			t.Errorf("runs show --json = %d, want the database in run.created:\n%.2000s", code, out)
		}
	})
}

// stopProc interrupts a keel serve or keel worker and waits for it to
// end (its shutdown lines are printed too), killing it after a minute.
func stopProc(t *testing.T, p *os.Process, done <-chan struct{}) {
	t.Helper()
	_ = p.Signal(syscall.SIGINT)
	select {
	case <-done:
	case <-time.After(time.Minute):
		_ = p.Kill()
		<-done
		t.Errorf("pid %d did not stop within a minute of SIGINT", p.Pid)
	}
}
