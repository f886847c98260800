//go:build linux

package linux

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/keel-run/keel/sandbox"
	"github.com/keel-run/keel/sandbox/sandboxtest"
)

// The git guard must fail closed when Keel runs as an ordinary user: a
// directory the walk cannot read (the sandbox runs as the same user and
// can take permissions away) must not hide a repository from it. These
// tests run as an ordinary user: as the invoking user when that is not
// root, and otherwise again as uid and gid 65534 (nobody), in a copy of
// the test binary that user can execute.

const nobody = 65534

// userEnv marks the re-executed test process.
const userEnv = "KEEL_TEST_AS_USER"

var (
	userBinOnce sync.Once
	userBin     string
	userBinErr  error
)

// RemoveUserBin removes the copy of the test binary that asUser made, if
// any: TestMain calls it after the tests.
func RemoveUserBin() {
	if userBin != "" {
		os.RemoveAll(filepath.Dir(userBin))
	}
}

// asUser reports whether the caller must run the test body itself (the
// process is not root, or is the re-executed one). As root it runs the
// test again as nobody with env added, fails t with the child's output
// if the child fails, and returns false.
func asUser(t *testing.T, env ...string) bool {
	t.Helper()
	return asUserRun(t, "^"+t.Name()+"$", "", env...)
}

// asUserRun is asUser running the tests that match pattern and not
// skip ("" skips none).
func asUserRun(t *testing.T, pattern, skip string, env ...string) bool {
	t.Helper()
	if os.Getenv(userEnv) != "" || os.Geteuid() != 0 {
		return true
	}
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	userBinOnce.Do(func() {
		dir, err := os.MkdirTemp("", "keel-user-bin-")
		if err != nil {
			userBinErr = err
			return
		}
		self, err := os.Executable()
		if err != nil {
			userBinErr = err
			return
		}
		data, err := os.ReadFile(self)
		if err != nil {
			userBinErr = err
			return
		}
		userBin = filepath.Join(dir, "linux.test")
		if err := os.WriteFile(userBin, data, 0o755); err != nil {
			userBinErr = err
			return
		}
		userBinErr = os.Chmod(dir, 0o755)
	})
	if userBinErr != nil {
		t.Fatalf("copying the test binary for uid %d: %v", nobody, userBinErr)
	}
	home := t.TempDir()
	if err := os.Chmod(filepath.Dir(home), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(home, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(userBin, "-test.run", pattern, "-test.skip", skip, "-test.v", "-test.count=1")
	cmd.Env = append([]string{userEnv + "=1", "TMPDIR=" + home, "HOME=" + home, "PATH=" + os.Getenv("PATH"), "LC_ALL=C"}, env...)
	cmd.Dir = home
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody, Groups: []uint32{}}}
	out, err := cmd.CombinedOutput()
	t.Logf("as uid %d:\n%s", nobody, out)
	if err != nil {
		t.Fatalf("the test failed as uid %d: %v", nobody, err)
	}
	if !bytes.Contains(out, []byte("--- PASS: "+t.Name())) {
		t.Fatalf("the test did not pass as uid %d (skipped?)", nobody)
	}
	return false
}

// TestGuardFailsClosedAsUser is the guard's half: directories of Keel's
// user that it cannot read are made readable and checked; what it cannot
// read and cannot move is refused.
func TestGuardFailsClosedAsUser(t *testing.T) {
	if !asUser(t) {
		return
	}
	evil := "[core]\n\tfsmonitor = evil\n"
	for _, tt := range []struct {
		name     string
		change   func(t *testing.T, ws string)
		readable []string // directories made readable
		moved    []string
	}{
		{"no read or write on a directory, search only", func(t *testing.T, ws string) {
			writeFile(t, filepath.Join(ws, "d/pl/.git/HEAD"), "ref: refs/heads/main\n")
			writeFile(t, filepath.Join(ws, "d/pl/.git/config"), evil)
			chmod(t, filepath.Join(ws, "d"), 0o111)
		}, []string{"d"}, []string{"d/pl/.git/config"}},
		{"no search on a directory", func(t *testing.T, ws string) {
			writeFile(t, filepath.Join(ws, "e/sub/.git/config"), evil)
			chmod(t, filepath.Join(ws, "e"), 0o644)
		}, []string{"e"}, []string{"e/sub/.git/config"}},
		{"nothing at all on a git directory", func(t *testing.T, ws string) {
			writeFile(t, filepath.Join(ws, "f/.git/config"), evil)
			chmod(t, filepath.Join(ws, "f/.git"), 0o000)
		}, []string{"f/.git"}, []string{"f/.git/config"}},
		{"hooks directory without read", func(t *testing.T, ws string) {
			writeFile(t, filepath.Join(ws, "h/.git/HEAD"), "x\n")
			writeFile(t, filepath.Join(ws, "h/.git/hooks/post-checkout"), "#!/bin/sh\n")
			chmod(t, filepath.Join(ws, "h/.git/hooks"), 0o300)
		}, []string{"h/.git/hooks"}, []string{"h/.git/hooks/post-checkout"}},
		{"config git could read but the check cannot", func(t *testing.T, ws string) {
			writeFile(t, filepath.Join(ws, "c/.git/config"), evil)
			chmod(t, filepath.Join(ws, "c/.git/config"), 0o000)
		}, nil, []string{"c/.git/config"}},
		{"gitfile the check cannot read", func(t *testing.T, ws string) {
			writeFile(t, filepath.Join(ws, "g/.git"), "gitdir: ../.git/objects/zz\n")
			writeFile(t, filepath.Join(ws, ".git/objects/zz/config"), evil)
			chmod(t, filepath.Join(ws, "g/.git"), 0o000)
		}, nil, []string{"g/.git"}},
		{"the workspace root itself", func(t *testing.T, ws string) {
			writeFile(t, filepath.Join(ws, "r/.git/config"), evil)
			chmod(t, ws, 0o100)
		}, []string{"."}, []string{"r/.git/config"}},
		{"a directory and its parent to be moved out of", func(t *testing.T, ws string) {
			writeFile(t, filepath.Join(ws, "m/n/.git/config"), evil)
			chmod(t, filepath.Join(ws, "m/n/.git"), 0o500)
		}, nil, []string{"m/n/.git/config"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ws := guardFixture(t)
			t.Cleanup(func() {
				filepath.Walk(ws, func(p string, _ os.FileInfo, _ error) error { os.Chmod(p, 0o755); return nil })
			})
			g := newTestGuard(t, ws)
			tt.change(t, ws)
			qs, _ := g.check()
			var readable, moved []string
			for _, q := range qs {
				switch {
				case q.Err != nil:
					t.Errorf("not handled: %s", q)
				case q.Action == ActionReadable:
					readable = append(readable, q.Path)
				case q.Action == ActionMoved:
					moved = append(moved, q.Path)
				default:
					t.Errorf("unexpected: %s", q)
				}
			}
			slices.Sort(readable)
			slices.Sort(moved)
			if diff := cmp.Diff(tt.readable, readable); diff != "" {
				t.Errorf("made readable (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.moved, moved); diff != "" {
				t.Errorf("moved (-want +got):\n%s\nall: %v", diff, qs)
			}
			if err := g.unsafe(); err != nil {
				t.Errorf("unsafe after a check that handled everything: %v", err)
			}
			if again, _ := g.check(); len(again) != 0 {
				t.Errorf("a second check found %v", again)
			}
		})
	}
}

func chmod(t *testing.T, p string, mode os.FileMode) {
	t.Helper()
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

// TestGuardForeignDirectories is run as root, which prepares directories
// the user does not own, and then as the user: one it can neither read
// nor search is out of the sandbox's reach and accepted; one it can
// search but not list stops the sandbox from starting; a repository it
// cannot move a planted config out of stops every later command.
func TestGuardForeignDirectories(t *testing.T) {
	if os.Getenv(userEnv) == "" {
		if os.Geteuid() != 0 {
			t.Skip("needs root to prepare directories another user owns")
		}
		base := t.TempDir()
		chmod(t, base, 0o755)
		mk := func(name string, owner int) string {
			ws := filepath.Join(base, name)
			writeFile(t, filepath.Join(ws, "README"), "x\n")
			if err := os.Chown(ws, owner, owner); err != nil {
				t.Fatal(err)
			}
			return ws
		}
		sealed := mk("sealed", nobody)
		writeFile(t, filepath.Join(sealed, "private/.git/config"), "[core]\n\tbare = false\n")
		chmod(t, filepath.Join(sealed, "private"), 0o700)
		open := mk("open", nobody)
		writeFile(t, filepath.Join(open, "blind/tmp/x"), "x\n")
		chmod(t, filepath.Join(open, "blind"), 0o711)
		chmod(t, filepath.Join(open, "blind/tmp"), 0o777)
		stuck := mk("stuck", nobody)
		writeFile(t, filepath.Join(stuck, "vendor/.git/HEAD"), "ref: refs/heads/main\n")
		writeFile(t, filepath.Join(stuck, "vendor/.git/config"), "[core]\n\tbare = false\n")
		chmod(t, filepath.Join(stuck, "vendor/.git/config"), 0o666)
		asUser(t, "KEEL_TEST_SEALED="+sealed, "KEEL_TEST_OPEN="+open, "KEEL_TEST_STUCK="+stuck)
		return
	}
	if _, _, err := newGuard(openRoot(t, os.Getenv("KEEL_TEST_SEALED")), os.Getenv("KEEL_TEST_SEALED"), nil); err != nil {
		t.Errorf("a directory out of the user's reach stopped the guard: %v", err)
	}
	_, _, err := newGuard(openRoot(t, os.Getenv("KEEL_TEST_OPEN")), os.Getenv("KEEL_TEST_OPEN"), nil)
	if err == nil || !strings.Contains(err.Error(), "blind") {
		t.Errorf("newGuard with a searchable, unlistable directory = %v, want an error naming it", err)
	}

	ws := os.Getenv("KEEL_TEST_STUCK")
	sb, err := New(&sandbox.Spec{Workspace: ws}, &Options{GuardInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	var out bytes.Buffer
	res, err := sb.Exec(context.Background(), &sandbox.Cmd{Args: []string{"sh", "-c", `printf '[core]\n\tfsmonitor = evil\n' >> vendor/.git/config`}, Stdout: &out})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("plant: %v %+v %s", err, res, out.String())
	}
	if !strings.Contains(out.String(), "DANGER: vendor/.git/config") {
		t.Errorf("the command's output does not say the config could not be quarantined:\n%s", out.String())
	}
	_, err = sb.Exec(context.Background(), &sandbox.Cmd{Args: []string{"true"}})
	if !errors.Is(err, ErrUnsafeWorkspace) {
		t.Errorf("the next command ran: %v, want %v", err, ErrUnsafeWorkspace)
	}
	if err := sb.CheckWorkspace(io.Discard); !errors.Is(err, ErrUnsafeWorkspace) {
		t.Errorf("CheckWorkspace = %v, want %v", err, ErrUnsafeWorkspace)
	}
}

func openRoot(t *testing.T, dir string) *os.Root {
	t.Helper()
	r, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// TestGitGuardUnreadableDirectoryAsUser is the attack of the report end
// to end, as an ordinary user: a command plants a submodule whose config
// runs a program and takes read permission away from its parent; the
// host's git status (run as that user) must not run it.
func TestGitGuardUnreadableDirectoryAsUser(t *testing.T) {
	if !asUser(t) {
		return
	}
	ws := t.TempDir()
	marker := filepath.Join(t.TempDir(), "pwned")
	hostGit(t, ws, "init", "-q")
	var got []Quarantine
	var mu sync.Mutex
	sb, err := New(&sandbox.Spec{Workspace: ws}, &Options{GuardInterval: -1, OnQuarantine: func(q Quarantine) {
		mu.Lock()
		got = append(got, q)
		mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	script := `set -e
mkdir d
git init -q d/pl
git -C d/pl -c user.name=x -c user.email=x@y commit -q --allow-empty -m x
git add d/pl
printf '[core]\n\tfsmonitor = "touch ` + marker + `; false"\n' >> d/pl/.git/config
chmod 111 d
echo planted`
	var out bytes.Buffer
	res, err := sb.Exec(context.Background(), &sandbox.Cmd{Args: []string{"bash", "-c", script}, Stdout: &out, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v\n%s", res, out.String())
	if res.ExitCode != 0 {
		t.Fatalf("the attack did not run: %+v", res)
	}
	for _, want := range []string{"keel: made d readable", "keel: quarantined d/pl/.git/config"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the command's output lacks %q", want)
		}
	}
	mu.Lock()
	if len(got) != 2 || got[0].Action != ActionReadable || got[1].Path != "d/pl/.git/config" {
		t.Errorf("OnQuarantine got %+v", got)
	}
	mu.Unlock()
	status := hostGit(t, ws, "status")
	t.Logf("host git status:\n%s", status)
	if _, err := os.Lstat(marker); err == nil {
		t.Fatalf("ESCAPE: the host's git ran the planted fsmonitor (%s exists)", marker)
	}
}

// hostGit runs git in dir as a person would, with an empty global
// configuration.
func hostGit(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = []string{"HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH"), "GIT_CONFIG_NOSYSTEM=1", "LC_ALL=C",
		"GIT_CEILING_DIRECTORIES=" + filepath.Dir(dir)}
	out, err := cmd.CombinedOutput()
	if err != nil && args[0] == "init" {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// TestGuardPeriodicCheck plants a config in a command that then waits:
// the periodic check must quarantine it while the command still runs,
// and the command's output must say so when it ends.
func TestGuardPeriodicCheck(t *testing.T) {
	ws := t.TempDir()
	found := make(chan Quarantine, 4)
	sb, err := New(&sandbox.Spec{Workspace: ws}, &Options{GuardInterval: 5 * time.Millisecond, OnQuarantine: func(q Quarantine) { found <- q }})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdinW.Close()
	var out bytes.Buffer
	done := make(chan error, 1)
	go func() {
		_, err := sb.Exec(context.Background(), &sandbox.Cmd{Args: []string{"sh", "-c", `mkdir -p s/.git && printf '[core]\n\tfsmonitor = evil\n' > s/.git/config && read line`},
			Stdin: stdinR, Stdout: &out, Timeout: -1})
		done <- err
	}()
	select {
	case q := <-found:
		if q.Path != "s/.git/config" || q.Action != ActionMoved {
			t.Errorf("quarantine while the command runs = %+v", q)
		}
	case err := <-done:
		t.Fatalf("the command ended before the periodic check: %v\n%s", err, out.String())
	case <-time.After(time.Minute):
		t.Fatal("no periodic check within a minute")
	}
	if _, err := os.Lstat(filepath.Join(ws, "s/.git/config")); err == nil {
		t.Error("the planted config is still there while the command runs")
	}
	stdinW.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "keel: quarantined s/.git/config") {
		t.Errorf("the command's output does not report the periodic check's quarantine:\n%s", out.String())
	}
}

// TestCheckWorkspace is the hook of long-lived commands (the python
// kernel): called while such a command runs, it checks at once.
func TestCheckWorkspace(t *testing.T) {
	ws := t.TempDir()
	sb, err := New(&sandbox.Spec{Workspace: ws}, &Options{GuardInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdinW.Close()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() {
		_, err := sb.Exec(context.Background(), &sandbox.Cmd{Args: []string{"sh", "-c", `mkdir -p k/.git/hooks && printf 'touch x' > k/.git/hooks/pre-commit && echo planted && read line`},
			Stdin: stdinR, Stdout: outW, Timeout: -1})
		outW.Close()
		done <- err
	}()
	line := make([]byte, len("planted\n"))
	if _, err := io.ReadFull(outR, line); err != nil || string(line) != "planted\n" {
		t.Fatalf("reading the command's output: %q %v", line, err)
	}
	var report bytes.Buffer
	if err := sb.CheckWorkspace(&report); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(report.String(), "keel: quarantined k/.git/hooks/pre-commit") {
		t.Errorf("CheckWorkspace reported %q", report.String())
	}
	if _, err := os.Lstat(filepath.Join(ws, "k/.git/hooks/pre-commit")); err == nil {
		t.Error("the hook is still there")
	}
	stdinW.Close()
	go io.Copy(io.Discard, outR)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestEscapesAsUser runs the escape suite with Keel as an ordinary
// user, where the git guard cannot read what the sandbox hides from it.
// The memory and fork bombs are left out: an ordinary user has no
// cgroups here, and the rlimits that contain the bombs then do not
// report the limit by name (docs/sandbox.md, "Limits").
func TestEscapesAsUser(t *testing.T) {
	if os.Geteuid() != 0 && os.Getenv(userEnv) == "" {
		t.Skip("Keel runs as an ordinary user already: TestEscapes is this test")
	}
	if !asUserRun(t, "^"+t.Name()+"$", "^"+t.Name()+"$/^(memory_bomb|fork_bomb)$") {
		return
	}
	sandboxtest.RunEscapes(t, func(t *testing.T, spec *sandbox.Spec) sandbox.Sandbox {
		t.Helper()
		sb, err := New(spec, nil)
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		t.Cleanup(func() { sb.Close() })
		return sb
	})
}
