package cli_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/keel-run/keel/internal/testrun"
	"github.com/keel-run/keel/journal"
)

// keel runs resume of a run that waits for a person's decision behaves
// the same in the local and the --server form (fresh-user trial 9, N11:
// locally it journaled run.resumed and run.paused at every try and
// exited 3; the server form refused it as a conflict, exit 1, and so
// hid a bad flag). With nobody at the terminal and nothing brought,
// both say what the run waits for and exit 3, journaling nothing; a
// bad value is refused first, exit 2; a limit or a message is journaled
// and the run waits again at the same call, in the same words.
func TestResumeWaitingRunBothForms(t *testing.T) {
	db := setup(t)
	if code, _, errOut := keel(t, "agents", "list", "--create-db"); code != 0 {
		t.Fatal(errOut)
	}
	store := openDB(t, db)
	waiting := testrun.Paused(t, store, time.Now, "rm old.log", 0)
	store.Close()
	events := func(id string) int {
		t.Helper()
		store := openDB(t, db)
		defer store.Close()
		evs, err := store.Read(t.Context(), id, 1)
		if err != nil {
			t.Fatal(err)
		}
		return len(evs)
	}
	before := events(waiting)
	s := startServe(t)
	server := "keel --server " + s.url + " "
	for _, c := range []struct {
		args []string
		code int
	}{
		{[]string{"runs", "resume", waiting}, 3},
		{[]string{"runs", "resume", waiting, "--json"}, 3},
		{[]string{"runs", "resume", waiting, "-q"}, 3},
		{[]string{"runs", "resume", waiting, "--command-timeout", "-5s"}, 2},
		{[]string{"runs", "resume", waiting, "--max-steps", "-1", "--message", "hi"}, 2},
		{[]string{"runs", "resume", waiting, "--model-retries", "4", "--command-timeout", "1m"}, 3},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			for try := range 2 {
				lcode, lout, lerr := keel(t, c.args...)
				rcode, rout, rerr := keel(t, append([]string{"--server", s.url}, c.args...)...)
				lerr, rerr = withoutLog(lerr), withoutLog(rerr)
				if n := strings.Count(rerr, server); n != strings.Count(lerr, "keel ") {
					t.Errorf("the server form's hints name keel --server URL %d times, the local form's keel %d times:\n%s", n, strings.Count(lerr, "keel "), rerr)
				}
				rerr = strings.ReplaceAll(rerr, server, "keel ")
				if lcode != c.code || rcode != c.code {
					t.Errorf("try %d: exit status local %d, server %d, want %d\n%s\n%s", try, lcode, rcode, c.code, lerr, rerr)
				}
				if lerr != rerr || lout != rout {
					t.Errorf("try %d: output differs:\nlocal:  %q %q\nserver: %q %q", try, lout, lerr, rout, rerr)
				}
				if c.code == 3 && len(c.args) == 3 && !strings.Contains(lerr, "paused (approval: waiting for approval of c1)") {
					t.Errorf("try %d: the run's wait is not named:\n%s", try, lerr)
				}
			}
			if n := events(waiting); n != before {
				t.Errorf("the resumes journaled %d event(s)", n-before)
			}
		})
	}

	// A limit or a message is journaled in both forms, and the run waits
	// again at the same call: two demo runs that wait for their edit,
	// one resumed locally, one through the server.
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed: .ci/run installs it")
	}
	demoRun := func() string {
		t.Helper()
		code, _, errOut := keel(t, "demo", "--no-wait")
		m := regexp.MustCompile(`keel approve (\S+) demo_4`).FindStringSubmatch(errOut)
		if code != 3 || m == nil {
			t.Fatalf("keel demo --no-wait = %d\n%s", code, errOut)
		}
		return m[1]
	}
	local, remote := demoRun(), demoRun()
	normal := func(out, id string) string {
		out = strings.ReplaceAll(withoutLog(out), id, "RUN")
		out = strings.ReplaceAll(out, server, "keel ")
		return regexp.MustCompile(`workspace \S+ →`).ReplaceAllString(out, "workspace W →")
	}
	for _, args := range [][]string{
		{"--max-steps", "2"},
		{"--message", "use strings.Fields"},
		{"--max-steps", "2"}, // the run's own now: nothing to journal
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			lb, rb := events(local), events(remote)
			lcode, lout, lerr := keel(t, append([]string{"runs", "resume", local}, args...)...)
			rcode, rout, rerr := keel(t, append([]string{"--server", s.url, "runs", "resume", remote}, args...)...)
			if lcode != 3 || rcode != 3 {
				t.Errorf("exit status local %d, server %d, want 3\n%s\n%s", lcode, rcode, lerr, rerr)
			}
			if l, r := normal(lerr, local), normal(rerr, remote); l != r || lout != rout {
				t.Errorf("output differs:\nlocal:\n%s%s\nserver:\n%s%s", lout, l, rout, r)
			}
			if ln, rn := events(local)-lb, events(remote)-rb; ln != rn {
				t.Errorf("journaled local %d event(s), server %d", ln, rn)
			}
		})
	}
	for _, id := range []string{local, remote} {
		st, _ := loadRun(t, db, id)
		if st.Status != journal.StatusPaused || len(st.Pending()) != 1 || st.Limits.MaxSteps != 2 {
			t.Errorf("run %s: %s, %d pending, step limit %d; want paused at demo_4 with 2 steps", id, st.Status, len(st.Pending()), st.Limits.MaxSteps)
		}
	}
}

// At a terminal, keel runs resume of a run that waits for approval asks
// about the call in both forms (the edit as a diff, the y/n question of
// tui.Prompt.DecideInline), then goes on with the run to its end as keel
// run does; the server form records the answer through the server. Both
// ask before they journal anything (the local form journaled run.resumed
// and run.paused before it asked), and both journal the same events.
func TestResumeWaitingRunAsksAtTerminal(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed: .ci/run installs it")
	}
	db := setup(t)
	s := startServe(t)
	types := func(id string) []string {
		t.Helper()
		store := openDB(t, db)
		defer store.Close()
		evs, err := store.Read(t.Context(), id, 1)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range evs {
			out = append(out, string(e.Type))
		}
		return out
	}
	var journaled [][]string
	for _, form := range [][]string{nil, {"--server", s.url}} {
		t.Run(strings.Join(append([]string{"form"}, form...), " "), func(t *testing.T) {
			code, _, errOut := keel(t, append(form, "demo", "--no-wait")...)
			m := regexp.MustCompile(`decide with: .*approve (\S+) demo_4`).FindStringSubmatch(errOut)
			if code != 3 || m == nil {
				t.Fatalf("keel demo --no-wait = %d\n%s", code, errOut)
			}
			id := m[1]
			before := types(id)
			args, _ := json.Marshal(append(form, "runs", "resume", id))
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), "KEEL_TEST_MAIN="+string(args), "TERM=xterm")
			term := startTerminal(t, cmd)
			ask := term.expect("always for this agent: ")
			for _, want := range []string{"call demo_4 (edit_file) needs your approval", "-    return len(text.split(\" \"))", "+    return len(text.split())"} {
				if !strings.Contains(ask, want) {
					t.Errorf("the question lacks %q:\n%s", want, ask)
				}
			}
			if now := types(id); len(now) != len(before) {
				t.Errorf("journaled before the question: %v", now[len(before):])
			}
			term.send("y")
			term.expect("completed")
			<-term.done
			if err := cmd.Wait(); err != nil {
				t.Fatalf("keel runs resume: %v\n%s", err, term.text())
			}
			st, _ := loadRun(t, db, id)
			if st.Status != journal.StatusCompleted {
				t.Errorf("run %s is %s, want completed", id, st.Status)
			}
			journaled = append(journaled, types(id)[len(before):])
		})
	}
	if len(journaled) == 2 && !slices.Equal(journaled[0], journaled[1]) {
		t.Errorf("the resumes journaled\nlocal:  %v\nserver: %v", journaled[0], journaled[1])
	}
}
