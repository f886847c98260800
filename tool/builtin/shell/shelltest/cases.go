package shelltest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// Cases returns the shell cases, named after the bug-case kinds they
// cover. Each kind is covered by several shapes of the fault, not only the
// reported example.
func Cases() []Case {
	var cs []Case
	cs = append(cs, pagerCases()...)
	cs = append(cs, stdinCases()...)
	cs = append(cs, idleCases()...)
	cs = append(cs, treeCases()...)
	cs = append(cs, floodCases()...)
	cs = append(cs, bytesCases()...)
	cs = append(cs, basicCases()...)
	return cs
}

// gitRepo makes a repository with n empty commits c1..cn in dir (with
// git fast-import: one process instead of n).
func gitRepo(n int) func(t *testing.T, dir string) {
	return func(t *testing.T, dir string) {
		t.Helper()
		git, err := exec.LookPath("git")
		if err != nil {
			t.Skip("git is not installed")
		}
		run := func(stdin []byte, args ...string) {
			t.Helper()
			cmd := exec.Command(git, args...)
			cmd.Dir = dir
			cmd.Stdin = bytes.NewReader(stdin)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("git %v: %v\n%s", args, err, out)
			}
		}
		var s bytes.Buffer
		for i := 1; i <= n; i++ {
			msg := fmt.Sprintf("c%d\n", i)
			fmt.Fprintf(&s, "commit refs/heads/main\nmark :%d\ncommitter Keel Test <test@example.com> %d +0000\ndata %d\n%s", i, 1700000000+i, len(msg), msg)
			if i > 1 {
				fmt.Fprintf(&s, "from :%d\n", i-1)
			}
			s.WriteString("\n")
		}
		run(nil, "init", "-q")
		run(s.Bytes(), "fast-import", "--quiet")
		run(nil, "symbolic-ref", "HEAD", "refs/heads/main")
	}
}

func pagerEnv() []string {
	return []string{"PAGER=less", "GIT_PAGER=less", "MANPAGER=less", "LESS=", "TERM=xterm-256color"}
}

// pagerCases are SHELL-HANG/pager: programs that would start a pager
// finish with their text, whatever pager the host or the operator set.
func pagerCases() []Case {
	logHasAll := func(t *testing.T, o *Outcome) {
		t.Helper()
		out := o.Output()
		if *o.Result.ExitCode != 0 || o.Result.TimedOut || !strings.Contains(out, "c400") || !strings.Contains(out, "c1\n") {
			t.Errorf("want exit 0 with c400 … c1; got %.300q", o.Result.Content)
		}
	}
	seqFile := func(t *testing.T, dir string) {
		var b strings.Builder
		for i := 1; i <= 500; i++ {
			fmt.Fprintf(&b, "%d\n", i)
		}
		os.WriteFile(filepath.Join(dir, "n.txt"), []byte(b.String()), 0o644)
	}
	lines500 := func(t *testing.T, o *Outcome) {
		t.Helper()
		if *o.Result.ExitCode != 0 || !strings.HasPrefix(o.Output(), "1\n2\n") || !strings.HasSuffix(o.Output(), "499\n500\n") {
			t.Errorf("want exit 0 and the file's 500 lines; got %.300q", o.Result.Content)
		}
	}
	return []Case{
		{Name: "SHELL-HANG/pager/git-log-host-env", Setup: gitRepo(400), HostEnv: pagerEnv(),
			Command: "git log", TimeoutMS: 30000, MaxElapsed: 15 * time.Second, Check: logHasAll},
		{Name: "SHELL-HANG/pager/git-core-pager-less", Setup: gitRepo(400), HostEnv: pagerEnv(),
			Command: "git -c core.pager=less log --oneline", TimeoutMS: 30000, MaxElapsed: 15 * time.Second, Check: logHasAll},
		// Even a pager the operator configured cannot wait for a key:
		// there is no terminal.
		{Name: "SHELL-HANG/pager/git-log-spec-env", Setup: gitRepo(400), SpecEnv: pagerEnv(),
			Command: "git log --oneline", TimeoutMS: 30000, MaxElapsed: 15 * time.Second, Check: logHasAll},
		{Name: "SHELL-HANG/pager/less-file", Setup: seqFile,
			Command: "less n.txt", TimeoutMS: 30000, MaxElapsed: 15 * time.Second, Check: lines500},
		{Name: "SHELL-HANG/pager/more-file", Setup: seqFile,
			Command: "more n.txt", TimeoutMS: 30000, MaxElapsed: 15 * time.Second,
			Check: func(t *testing.T, o *Outcome) { wantExit(t, o, 0, "\n1\n2\n", "\n499\n500\n") }},
		{Name: "SHELL-HANG/pager/man-page", HostEnv: pagerEnv(),
			Command: "man ls >/dev/null 2>&1 || true; systemctl --no-pager status >/dev/null 2>&1 || true; echo done", TimeoutMS: 30000, MaxElapsed: 15 * time.Second,
			Check: func(t *testing.T, o *Outcome) { wantExit(t, o, 0, "done") }},
	}
}

func wantExit(t *testing.T, o *Outcome, code int, contains ...string) {
	t.Helper()
	if *o.Result.ExitCode != code || o.Result.TimedOut {
		t.Errorf("want exit code %d, not timed out; got %.300q", code, o.Result.Content)
	}
	for _, s := range contains {
		if !strings.Contains(o.Output(), s) {
			t.Errorf("output lacks %q: %.300q", s, o.Output())
		}
	}
}

// stdinCases are SHELL-HANG/stdin-open: everything that reads stdin or the
// terminal sees EOF or no terminal at once.
func stdinCases() []Case {
	const limit, guard = 20000, 10 * time.Second
	return []Case{
		{Name: "SHELL-HANG/stdin-open/python-input", Command: `python3 -c "print(input('name? '))"`, TimeoutMS: limit, MaxElapsed: guard,
			Check: func(t *testing.T, o *Outcome) { wantExit(t, o, 1, "EOFError") }},
		{Name: "SHELL-HANG/stdin-open/read-prompt", Command: `read -r -p 'continue? ' a; echo "got:[$a] rc=$?"`, TimeoutMS: limit, MaxElapsed: guard,
			Check: func(t *testing.T, o *Outcome) { wantExit(t, o, 0, "got:[] rc=1") }},
		{Name: "SHELL-HANG/stdin-open/python-repl", Command: "python3", TimeoutMS: limit, MaxElapsed: guard,
			Check: func(t *testing.T, o *Outcome) { wantExit(t, o, 0) }},
		{Name: "SHELL-HANG/stdin-open/cat", Command: "cat; echo rc=$?", TimeoutMS: limit, MaxElapsed: guard,
			Check: func(t *testing.T, o *Outcome) { wantExit(t, o, 0, "rc=0") }},
		{Name: "SHELL-HANG/stdin-open/getpass", Command: `python3 -c "import getpass; getpass.getpass('pw: ')"`, TimeoutMS: limit, MaxElapsed: guard,
			Check: func(t *testing.T, o *Outcome) { wantExit(t, o, 1, "EOFError") }},
		// A prompt that opens the terminal itself (ssh, sudo, gpg do):
		// there is no controlling terminal to open.
		{Name: "SHELL-HANG/stdin-open/dev-tty", Command: `read -r x < /dev/tty; echo "rc=$?"`, TimeoutMS: limit, MaxElapsed: guard,
			Check: func(t *testing.T, o *Outcome) { wantExit(t, o, 0, "rc=1") }},
		{Name: "SHELL-HANG/stdin-open/stdin-is-devnull", Command: `[ -t 0 ] || echo stdin-not-tty; [ -t 1 ] || echo stdout-not-tty; head -c 10 | wc -c`, TimeoutMS: limit, MaxElapsed: guard,
			Check: func(t *testing.T, o *Outcome) { wantExit(t, o, 0, "stdin-not-tty\nstdout-not-tty\n0\n") }},
	}
}

// idleCases are the idle watchdog: a command that stops printing because
// it waits for something that never comes is ended, with its partial
// output and a clear note; one that keeps printing is left alone.
func idleCases() []Case {
	idleKilled := func(t *testing.T, o *Outcome) {
		t.Helper()
		r := o.Result
		if !r.IsError || !r.TimedOut || !strings.Contains(o.Header(), "(killed: no output for 2s, likely waiting for input") {
			t.Errorf("want an idle kill; got %.300q (is_error %v)", r.Content, r.IsError)
		}
		if !strings.Contains(o.Output(), "waiting") {
			t.Errorf("partial output lost: %q", o.Output())
		}
	}
	return []Case{
		{Name: "SHELL-HANG/idle/silent-sleep", Command: "echo waiting; sleep 600.{{T}}", IdleTimeout: 2 * time.Second, TimeoutMS: 60000,
			MaxElapsed: 30 * time.Second, NoLeftovers: true, Check: idleKilled},
		{Name: "SHELL-HANG/idle/fifo-reader", Command: "mkfifo f{{T}} && echo waiting && cat f{{T}}", IdleTimeout: 2 * time.Second, TimeoutMS: 60000,
			MaxElapsed: 30 * time.Second, NoLeftovers: true, Check: idleKilled},
		{Name: "SHELL-HANG/idle/progress-keeps-alive", Command: "for i in 1 2 3 4 5 6; do echo tick $i; sleep 0.5; done", IdleTimeout: 3 * time.Second, TimeoutMS: 60000,
			Check: func(t *testing.T, o *Outcome) { wantExit(t, o, 0, "tick 6") }},
	}
}

// treeCases are PROCESS-TREE/timeout-orphans: calls return when the shell
// exits or at the limit, and leave no process behind.
func treeCases() []Case {
	timedOut := func(partial string) func(t *testing.T, o *Outcome) {
		return func(t *testing.T, o *Outcome) {
			t.Helper()
			r := o.Result
			if !r.IsError || !r.TimedOut || !strings.Contains(o.Header(), "(timed out after 3s; process tree killed)") {
				t.Errorf("want a timeout; got %.300q", r.Content)
			}
			if !strings.Contains(o.Output(), partial) {
				t.Errorf("partial output lost: %q", o.Output())
			}
		}
	}
	return []Case{
		{Name: "PROCESS-TREE/timeout-orphans/a-background-child", Command: "sleep 30.{{T}} & echo started:$!; exit 0",
			MaxElapsed: 15 * time.Second, NoLeftovers: true,
			Check: func(t *testing.T, o *Outcome) {
				wantExit(t, o, 0)
				if !regexp.MustCompile(`^started:\d+\n$`).MatchString(o.Output()) {
					t.Errorf("output = %q, want started:<pid>", o.Output())
				}
			}},
		{Name: "PROCESS-TREE/timeout-orphans/b-background-writer", Command: "(while :; do echo tick-{{T}}; sleep 1; done) & sleep 600.{{T}}",
			TimeoutMS: 3000, MaxElapsed: 30 * time.Second, NoLeftovers: true, Check: timedOut("tick-")},
		{Name: "PROCESS-TREE/timeout-orphans/c-ignores-sigterm", Command: `echo begun; sh -c 'trap "" TERM; sleep 600.{{T}}' & wait`,
			TimeoutMS: 3000, MaxElapsed: 30 * time.Second, NoLeftovers: true, Check: timedOut("begun")},
		// Descendants that leave the process group or the session.
		{Name: "PROCESS-TREE/timeout-orphans/setsid-holds-pipe", Command: "setsid sleep 600.{{T}} & echo ok",
			MaxElapsed: 15 * time.Second, NoLeftovers: true,
			Check: func(t *testing.T, o *Outcome) { wantExit(t, o, 0, "ok") }},
		{Name: "PROCESS-TREE/timeout-orphans/daemonized", Command: "setsid sh -c 'sleep 600.{{T}}' </dev/null >/dev/null 2>&1 & echo ok",
			MaxElapsed: 15 * time.Second, NoLeftovers: true,
			Check: func(t *testing.T, o *Outcome) { wantExit(t, o, 0, "ok") }},
		{Name: "PROCESS-TREE/timeout-orphans/job-control-group", Command: "set -m; sleep 600.{{T}} & echo ok",
			MaxElapsed: 15 * time.Second, NoLeftovers: true,
			Check: func(t *testing.T, o *Outcome) { wantExit(t, o, 0, "ok") }},
		{Name: "PROCESS-TREE/timeout-orphans/nohup", Command: "nohup sleep 600.{{T}} >/dev/null 2>&1 & echo ok",
			MaxElapsed: 15 * time.Second, NoLeftovers: true,
			Check: func(t *testing.T, o *Outcome) { wantExit(t, o, 0, "ok") }},
	}
}

// floodCases are OUTPUT-FLOOD/context-overflow: a bounded view with the
// total size and the path of the whole output, which is kept.
func floodCases() []Case {
	logLine := []byte("2026-11-30T12:00:00Z INFO request served in 12ms path=/api/v1/items\n")
	logSize := int64(50_000_000 / len(logLine) * len(logLine))
	flood := func(size int64, first, last string) func(t *testing.T, o *Outcome) {
		return func(t *testing.T, o *Outcome) {
			t.Helper()
			r := o.Result
			wantExit(t, o, 0)
			if r.OutputBytes != size {
				t.Errorf("OutputBytes = %d, want %d", r.OutputBytes, size)
			}
			if !strings.HasPrefix(o.Output(), first) || !strings.HasSuffix(o.Output(), last) {
				t.Errorf("view does not show the first and last lines: %.100q … %q", o.Output(), tail(o.Output(), 100))
			}
			if r.Artifact == "" || !strings.Contains(r.Content, fmt.Sprintf("bytes elided of %s total; full output: %s", commas(size), r.Artifact)) {
				t.Errorf("no elision marker naming the artifact in %q", tail(r.Content, 4000))
				return
			}
			fi, err := os.Stat(filepath.Join(o.Dir, r.Artifact))
			if err != nil || fi.Size() != size {
				t.Errorf("artifact %s: %v, %v; want %d bytes", r.Artifact, fi, err, size)
			}
		}
	}
	return []Case{
		{Name: "OUTPUT-FLOOD/context-overflow/yes-50MB", Command: "yes 'filler line for output flood test' | head -c 50000000",
			TimeoutMS: 120000, Check: flood(50_000_000, "filler line for output flood test\n", "filler l")},
		{Name: "OUTPUT-FLOOD/context-overflow/seq-3M", Command: "seq 1 3000000",
			TimeoutMS: 120000, Check: flood(22_888_896, "1\n2\n3\n", "2999999\n3000000\n")},
		{Name: "OUTPUT-FLOOD/context-overflow/cat-big-log",
			Setup: func(t *testing.T, dir string) {
				b := bytes.Repeat(logLine, 50_000_000/len(logLine))
				if err := os.WriteFile(filepath.Join(dir, "big.log"), b, 0o644); err != nil {
					t.Fatal(err)
				}
			},
			Command: "cat big.log", TimeoutMS: 120000,
			Check: flood(logSize, "2026-11-30T12:00:00Z INFO", "path=/api/v1/items\n")},
		{Name: "OUTPUT-FLOOD/context-overflow/one-huge-line", Command: "head -c 3000000 /dev/zero | tr '\\0' x",
			TimeoutMS: 120000, Check: func(t *testing.T, o *Outcome) {
				wantExit(t, o, 0)
				if o.Result.Artifact == "" || !strings.Contains(o.Output(), "more characters on this line]") {
					t.Errorf("want a clipped line and an artifact: %.300q", o.Result.Content)
				}
			}},
	}
}

// bytesCases are OUTPUT-BYTES/NUL-breaks-JSON: every byte sequence a
// command can print becomes a safe result (checked for every case by
// RunCase) with the bytes shown visibly.
func bytesCases() []Case {
	contains := func(want ...string) func(t *testing.T, o *Outcome) {
		return func(t *testing.T, o *Outcome) { wantExit(t, o, 0, want...) }
	}
	return []Case{
		{Name: "OUTPUT-BYTES/NUL-breaks-JSON/nul", Command: `printf 'A\000B\000C\n'`, Check: contains(`A\0B\0C`)},
		{Name: "OUTPUT-BYTES/NUL-breaks-JSON/binary", Command: "head -c 4096 /bin/ls", Check: contains(`\x7fELF`, "[output looks binary")},
		{Name: "OUTPUT-BYTES/NUL-breaks-JSON/bad-utf8", Command: `printf 'bad utf8: \xff\xfe\xc3\x28\n'`, Check: contains("bad utf8: \uFFFD\uFFFD\uFFFD(\n")},
		{Name: "OUTPUT-BYTES/NUL-breaks-JSON/ansi-cr", Command: `printf '\033[31mred\033[0m \033[2K\r progress\n'`,
			Check: func(t *testing.T, o *Outcome) {
				wantExit(t, o, 0)
				if o.Output() != " progress\n" {
					t.Errorf("output = %q, want %q", o.Output(), " progress\n")
				}
			}},
		{Name: "OUTPUT-BYTES/NUL-breaks-JSON/every-control-byte", Command: `for i in $(seq 0 31) 127; do printf "\\$(printf %03o $i)"; done; printf '\xc2\x85\xe2\x80\xae\n'`,
			Check: contains(`\0\x01\x02`, `\x1f`, `\x7f`, `\u0085\u202e`)},
		{Name: "OUTPUT-BYTES/NUL-breaks-JSON/osc-and-progress", Command: `printf '\033]0;title\007\033]8;;http://x\033\\link\033]8;;\033\\\n'; for i in 10 50 100; do printf '\r%s%%' $i; done; echo`,
			Check: contains("link\n100%\n")},
		{Name: "OUTPUT-BYTES/NUL-breaks-JSON/utf8-split-across-writes", Command: `printf '\xe6\x97'; sleep 0.2; printf '\xa5\n'`,
			Check: contains("日\n")},
	}
}

// basicCases pin the rest of the tool's contract.
func basicCases() []Case {
	return []Case{
		{Name: "EXIT/nonzero-is-not-a-tool-error", Command: "echo out; echo err >&2; echo out2; exit 3",
			Check: func(t *testing.T, o *Outcome) {
				wantExit(t, o, 3)
				if o.Result.IsError || o.Output() != "out\nerr\nout2\n" || o.Header() != "exit code: 3" {
					t.Errorf("got %q (is_error %v), want exit code 3, stdout and stderr in order, no error", o.Result.Content, o.Result.IsError)
				}
			}},
		{Name: "EXIT/signal", Command: "kill -SEGV $$",
			Check: func(t *testing.T, o *Outcome) {
				if *o.Result.ExitCode != 139 || !strings.Contains(o.Header(), "SIGSEGV") {
					t.Errorf("got %q, want exit code 139 and the signal named", o.Result.Content)
				}
			}},
		{Name: "ENV/non-interactive", Command: `echo "$PAGER|$GIT_PAGER|$TERM|$CI|$GIT_TERMINAL_PROMPT|$LC_ALL"`,
			Check: func(t *testing.T, o *Outcome) { wantExit(t, o, 0, "cat|cat|dumb|1|0|C.UTF-8\n") }},
		{Name: "ENV/no-host-variables", HostEnv: []string{"KEEL_SHELLTEST_SECRET=hunter2", "AWS_SECRET_ACCESS_KEY=hunter3"},
			Command: "env",
			Check: func(t *testing.T, o *Outcome) {
				wantExit(t, o, 0, "PATH=", "HOME=")
				if strings.Contains(o.Output(), "hunter") {
					t.Errorf("host variables reached the command: %q", o.Output())
				}
			}},
		{Name: "CWD/fresh-shell-each-call", Setup: func(t *testing.T, dir string) { os.Mkdir(filepath.Join(dir, "sub"), 0o755) },
			Command: "cd sub && export KEEL_X=1 && touch here && pwd",
			Check: func(t *testing.T, o *Outcome) {
				wantExit(t, o, 0)
				if _, err := os.Stat(filepath.Join(o.Dir, "sub", "here")); err != nil {
					t.Errorf("the command did not run in the workspace: %v", err)
				}
				r := o.Call(`ls; echo "x=[$KEEL_X]"`)
				if !strings.Contains(r.Content, "sub\n") || !strings.Contains(r.Content, "x=[]") {
					t.Errorf("cd or export persisted between calls: %q", r.Content)
				}
			}},
		{Name: "EXIT/command-not-found", Command: "no-such-command-{{T}}",
			Check: func(t *testing.T, o *Outcome) { wantExit(t, o, 127, "not found") }},
	}
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[len(s)-n:]
	for len(s) > 0 && !utf8.RuneStart(s[0]) {
		s = s[1:]
	}
	return s
}

func commas(n int64) string {
	s := fmt.Sprint(n)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}
