//go:build linux

package linux_test

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/keel-run/keel/sandbox"
	"github.com/keel-run/keel/sandbox/linux"
)

// tree lists every path below dir, relative and sorted, leaving out the
// git guard's own state (.keel/sandbox/*).
func tree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel != "." && !strings.HasPrefix(rel, ".keel/sandbox/") {
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// TestWorkspacePlaceholders checks what a sandbox leaves in a workspace:
// .keel always (Keel's own, made before the sandbox starts), in an
// existing repository an empty hooks directory and config if they were
// missing, and nothing else, before and after Close (placeholders are
// never removed, so no sandbox unlinks what another one has bound).
func TestWorkspacePlaceholders(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name      string
		files     []string
		protected []string
		want      []string
	}{
		{"empty workspace", nil, []string{"notes/secret.md"}, []string{".keel", ".keel/sandbox"}},
		{"repository without hooks or config", []string{".git/HEAD"}, nil,
			[]string{".git", ".git/HEAD", ".git/config", ".git/hooks", ".keel", ".keel/sandbox"}},
		{"worktree checkout", []string{".git"}, nil, []string{".git", ".keel", ".keel/sandbox"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ws := t.TempDir()
			for _, f := range tt.files {
				writeFile(t, filepath.Join(ws, f), "x\n")
			}
			sb := newSB(t, &sandbox.Spec{Workspace: ws, Protected: tt.protected}, nil)
			if got := tree(t, ws); !slices.Contains(got, ".keel") {
				t.Errorf("no .keel while the sandbox runs: %v", got)
			}
			res, out := sh(t, sb, `touch .keel/x 2>&1; ls -a notes 2>&1; echo rc=$?`)
			if !strings.Contains(out, "Read-only file system") || !strings.Contains(out, "No such file") {
				t.Errorf("inside: %+v %q", res, out)
			}
			sb.Close()
			if diff := cmp.Diff(tt.want, tree(t, ws)); diff != "" {
				t.Errorf("workspace after Close (-want +got):\n%s", diff)
			}
		})
	}
}

// TestConcurrentSandboxesShareWorkspace is the two-runs fault: run A and
// run B on one workspace; A closes; B's protections must all still hold.
func TestConcurrentSandboxesShareWorkspace(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	writeFile(t, filepath.Join(ws, ".git/HEAD"), "ref: refs/heads/main\n")
	a := newSB(t, &sandbox.Spec{Workspace: ws}, nil)
	b := newSB(t, &sandbox.Spec{Workspace: ws}, nil)
	a.Close()
	res, out := sh(t, b, `echo x > .git/hooks/pre-commit; echo '[core]' >> .git/config; touch .keel/x; echo done`)
	if strings.Count(out, "Read-only file system") != 3 {
		t.Errorf("after the other sandbox closed: %+v %q", res, out)
	}
}

// TestKilledKeelLeavesNothingUnchecked kills Keel with SIGKILL after a
// command planted git files: no placeholder is left behind, and the next
// sandbox on the workspace quarantines what the dead one could not check
// and says so.
func TestKilledKeelLeavesNothingUnchecked(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	plant := `mkdir -p .cache/g/objects && echo 'ref: refs/heads/main' > .cache/g/HEAD && printf '[core]\n\tfsmonitor = evil\n' > .cache/g/config
mkdir -p .git/hooks && echo evil > .git/hooks/pre-commit`
	cmd := exec.Command("/proc/self/exe", "-test.run=^$")
	cmd.Env = append(os.Environ(), "KEEL_TEST_DYING_HOST="+fmt.Sprintf("keel-plant-%d", time.Now().UnixNano()), "KEEL_TEST_WS="+ws, "KEEL_TEST_PLANT="+plant)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	cmd.Process.Kill()
	cmd.Wait()
	if err != nil || line != "ready\n" {
		t.Fatalf("helper said %q, %v", line, err)
	}
	want := []string{".cache", ".cache/g", ".cache/g/HEAD", ".cache/g/config", ".cache/g/objects", ".git", ".git/hooks", ".git/hooks/pre-commit", ".keel", ".keel/sandbox"}
	if diff := cmp.Diff(want, tree(t, ws)); diff != "" {
		t.Errorf("workspace after SIGKILL (-want +got):\n%s", diff)
	}
	var mu sync.Mutex
	var got []string
	sb := newSB(t, &sandbox.Spec{Workspace: ws}, &linux.Options{OnQuarantine: func(q linux.Quarantine) {
		mu.Lock()
		got = append(got, q.Path)
		mu.Unlock()
	}})
	slices.Sort(got)
	if diff := cmp.Diff([]string{".cache/g/config", ".git/hooks/pre-commit"}, got); diff != "" {
		t.Errorf("quarantined after the crash (-want +got):\n%s", diff)
	}
	if w := strings.Join(sb.Mechanisms().Warnings, "\n"); !strings.Contains(w, "ended without closing") {
		t.Errorf("warnings do not tell: %s", w)
	}
	sb.Close()
	if states, _ := os.ReadDir(filepath.Join(ws, ".keel/sandbox")); len(states) != 0 {
		t.Errorf("guard states left after Close: %v", states)
	}
}

// TestGitWorkflows checks that ordinary git work inside the sandbox is
// not disturbed by the protections: a new repository, commits, a linked
// worktree and a clone, with no quarantine, and the host's git reads the
// result.
func TestGitWorkflows(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	ws := t.TempDir()
	sb := newSB(t, &sandbox.Spec{Workspace: ws}, nil)
	res, out := sh(t, sb, `set -e
git init -q -b main && git config user.email k@k.invalid && git config user.name k
echo x > f && git add f && git commit -qm one
git worktree add -q wt -b side && git -C wt log --oneline | wc -l
git clone -q . sub/clone && git -C sub/clone config user.name k && git -C sub/clone log --oneline | wc -l
git status --short`)
	if res.ExitCode != 0 || strings.Contains(out, "quarantined") {
		t.Errorf("git in the sandbox: %+v\n%s", res, out)
	}
	res, out = sh(t, sb, `git log --oneline | wc -l`)
	if res.ExitCode != 0 || strings.TrimSpace(out) != "1" {
		t.Errorf("second command: %+v %q", res, out)
	}
	sb.Close()
	host := exec.Command("git", "-C", ws, "log", "--oneline")
	host.Env = []string{"HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH"), "GIT_CONFIG_NOSYSTEM=1"}
	if b, err := host.CombinedOutput(); err != nil || !strings.Contains(string(b), "one") {
		t.Errorf("host git log: %v\n%s", err, b)
	}
}

func writeFile(t *testing.T, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// hostGit runs git on the host in dir, with no user or system config.
func hostGit(t *testing.T, dir string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	cmd.Env = []string{"HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH"), "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=k", "GIT_AUTHOR_EMAIL=k@k.invalid", "GIT_COMMITTER_NAME=k", "GIT_COMMITTER_EMAIL=k@k.invalid"}
	b, err := cmd.CombinedOutput()
	return string(b), err
}

// Git state the sandbox writes works on the host: a linked worktree made
// in the sandbox records paths that are valid on the host (and still in
// the sandbox), so it is neither broken nor prunable there; a write git
// cannot make to the protected .git/config fails and says why.
func TestGitStateWorksOnHost(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	ws := t.TempDir()
	for _, args := range [][]string{{"init", "-q", "-b", "main"}, {"commit", "-q", "--allow-empty", "-m", "one"}} {
		if out, err := hostGit(t, ws, args...); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	sb := newSB(t, &sandbox.Spec{Workspace: ws}, nil)
	env := func(c *sandbox.Cmd) {
		c.Env = append(c.Env, "GIT_AUTHOR_NAME=k", "GIT_AUTHOR_EMAIL=k@k.invalid", "GIT_COMMITTER_NAME=k", "GIT_COMMITTER_EMAIL=k@k.invalid")
	}
	res, out := sh(t, sb, `git worktree add -q wt -b side && git -C wt commit -q --allow-empty -m two && git -C wt log --oneline | wc -l`, env)
	if res.ExitCode != 0 || strings.TrimSpace(lastLine(out)) != "2" {
		t.Fatalf("git worktree add in the sandbox: %+v\n%s", res, out)
	}
	// The next command in the sandbox still reads the worktree.
	if res, out := sh(t, sb, `git -C wt status --short && git worktree list`, env); res.ExitCode != 0 || strings.Contains(out, "prunable") {
		t.Errorf("the worktree in the sandbox afterwards: %+v\n%s", res, out)
	}
	if out, err := hostGit(t, filepath.Join(ws, "wt"), "log", "--oneline"); err != nil || !strings.Contains(out, "two") {
		t.Errorf("host git in the worktree: %v\n%s", err, out)
	}
	if out, err := hostGit(t, ws, "worktree", "list", "--porcelain"); err != nil || strings.Contains(out, "prunable") || strings.Contains(out, "/workspace") {
		t.Errorf("host git worktree list: %v\n%s", err, out)
	}
	// A submodule: git records it in .git/config, which it cannot write;
	// the command must fail and say why, not half-succeed.
	if out, err := hostGit(t, ws, "init", "-q", "lib"); err != nil {
		t.Fatal(out)
	}
	if out, err := hostGit(t, filepath.Join(ws, "lib"), "commit", "-q", "--allow-empty", "-m", "lib"); err != nil {
		t.Fatal(out)
	}
	_, out = sh(t, sb, `git -c protocol.file.allow=always submodule add -q ./lib sub`, env)
	if !strings.Contains(out, "after `git submodule add`, the submodule is not initialized") {
		t.Errorf("git submodule add in the sandbox does not say what it could not do:\n%s", out)
	}
	// A write to the protected config fails, and the output says why.
	res, out = sh(t, sb, `git config core.editor vi`, env)
	if res.ExitCode == 0 || !strings.Contains(out, ".git/config is read-only in the sandbox") {
		t.Errorf("git config in the sandbox: %+v\n%s", res, out)
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
