package cli_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/keel-run/keel/client"
	"github.com/keel-run/keel/internal/demo"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/service"
)

// serveProc is `keel serve` running as a child process (this test binary
// re-executed as the keel command).
type serveProc struct {
	cmd    *exec.Cmd
	url    string
	stderr *strings.Builder
	done   chan struct{}
}

// startServe starts `keel serve` on a free port with the KEEL_HOME of the
// test and the system's temporary directory (where tests make their
// workspaces) as its workspace root, and waits until it listens.
func startServe(t testing.TB, extra ...string) *serveProc {
	t.Helper()
	return startServeArgs(t, append([]string{"serve", "--addr", "127.0.0.1:0", "--workers", "2", "--workspace-root", os.TempDir()}, extra...)...)
}

// startServeArgs starts keel with argv (a serve command line) and waits
// until it listens.
func startServeArgs(t testing.TB, argv ...string) *serveProc {
	t.Helper()
	args, _ := json.Marshal(argv)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "KEEL_TEST_MAIN="+string(args))
	pipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &serveProc{cmd: cmd, stderr: &strings.Builder{}, done: make(chan struct{})}
	listening := make(chan string, 1)
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			line := sc.Text()
			p.stderr.WriteString(line + "\n")
			if rest, ok := strings.CutPrefix(line, "keel serve: listening on "); ok {
				listening <- strings.Fields(rest)[0]
			}
		}
		_, _ = io.Copy(io.Discard, pipe)
		_ = cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
	})
	select {
	case p.url = <-listening:
	case <-p.done:
		t.Fatalf("keel serve exited before listening:\n%s", p.stderr)
	case <-time.After(time.Minute):
		t.Fatalf("keel serve did not listen within a minute:\n%s", p.stderr)
	}
	return p
}

// apiClient returns a client of p with the token keel serve saved.
func (p *serveProc) apiClient(t testing.TB) *client.Client {
	t.Helper()
	return p.clientWith(t, p.savedToken(t))
}

// savedToken returns the admin token keel serve saved for p.
func (p *serveProc) savedToken(t testing.TB) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(os.Getenv("KEEL_HOME"), "server-token"))
	if err != nil {
		t.Fatalf("keel serve saved no token: %v\n%s", err, p.stderr)
	}
	var saved struct {
		Servers []string `json:"servers"`
		Token   string   `json:"token"`
	}
	if err := json.Unmarshal(b, &saved); err != nil || saved.Token == "" {
		t.Fatalf("server-token: %v: %s", err, b)
	}
	return saved.Token
}

// clientWith returns a client of p with token.
func (p *serveProc) clientWith(t testing.TB, token string) *client.Client {
	t.Helper()
	c, err := client.New(p.url, &client.Options{Token: token, Retry: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// untilStopped follows run id until it stops (paused or ended) and
// returns the last event.
func untilStopped(t *testing.T, c *client.Client, id string, from int64) journal.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var last journal.Event
	for e, err := range c.Events(ctx, id, &client.EventsParams{From: from, UntilStopped: true}) {
		if err != nil {
			t.Fatal(err)
		}
		last = e
	}
	return last
}

// The acceptance scenario: a run waits for approval; the server is
// killed (SIGKILL, no shutdown); a new server starts on the same
// journal; an approval through the API completes the run.
func TestServeKilledWhileWaitingForApproval(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed: .ci/run installs it")
	}
	setup(t)
	s1 := startServe(t)
	c := s1.apiClient(t)
	run, err := c.CreateRun(t.Context(), &api.CreateRun{Demo: true})
	if err != nil {
		t.Fatal(err)
	}
	asked := untilStopped(t, c, run.ID, 1)
	if asked.Type != journal.ApprovalRequested {
		t.Fatalf("the demo run stopped with %s, want approval.requested\n%s", asked.Type, s1.stderr)
	}
	if err := s1.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-s1.done

	s2 := startServe(t)
	// Web UI sessions did not survive: the restart prints a new sign-in
	// link for the saved token (fresh-user trial 6, F23).
	if !regexp.MustCompile(`keel serve: sign in to the web UI:\s+` + regexp.QuoteMeta(s2.url) + `/ui/login\?code=\S+`).MatchString(s2.stderr.String()) {
		t.Errorf("the second start printed no sign-in link:\n%s", s2.stderr)
	}
	c = s2.apiClient(t)
	pending, err := c.Approvals(t.Context())
	if err != nil || len(pending) != 1 || pending[0].RunID != run.ID {
		t.Fatalf("after the restart: Approvals() = %+v, %v", pending, err)
	}
	if _, err := c.Approve(t.Context(), run.ID, pending[0].CallID, &api.Decide{Reason: "after the crash"}); err != nil {
		t.Fatal(err)
	}
	if end := untilStopped(t, c, run.ID, asked.Seq+1); end.Type != journal.RunCompleted {
		t.Fatalf("after approval the run stopped with %s\n%s", end.Type, s2.stderr)
	}
	rep, err := c.VerifyAudit(t.Context(), nil)
	if err != nil || !rep.OK {
		t.Errorf("audit after the crash: %+v, %v", rep, err)
	}
}

// A demo run started through the API works in a new directory of
// $KEEL_HOME/demos, and goes on there to its end: not in the user's
// workspace root (it used to be ROOT/.keel-demos, a hidden directory in
// their source tree), nor in the system's temporary directory.
func TestServeDemoOutsideWorkspaceRoot(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed: .ci/run installs it")
	}
	setup(t)
	root := t.TempDir()
	s := startServeArgs(t, "serve", "--addr", "127.0.0.1:0", "--workers", "1", "--workspace-root", root)
	c := s.apiClient(t)
	run, err := c.CreateRun(t.Context(), &api.CreateRun{Demo: true})
	if err != nil {
		t.Fatal(err)
	}
	asked := untilStopped(t, c, run.ID, 1)
	if _, err := c.Approve(t.Context(), run.ID, "demo_4", &api.Decide{Reason: "test"}); err != nil {
		t.Fatalf("approve demo_4 (the run stopped at %s): %v", asked.Type, err)
	}
	untilStopped(t, c, run.ID, asked.Seq+1)
	got, err := c.Run(t.Context(), run.ID)
	if err != nil {
		t.Fatal(err)
	}
	// In the server's home, not the system's temporary directory, where
	// a server left one per demo (fresh-user report 12, B15).
	want := filepath.Join(os.Getenv("KEEL_HOME"), "demos")
	if dir := filepath.Dir(got.Workspace); dir != want || !strings.HasPrefix(filepath.Base(got.Workspace), "keel-demo-") {
		t.Errorf("the demo run's workspace is %s, want a directory keel-demo-NNN in %s", got.Workspace, want)
	}
	if got.Status != "completed" {
		t.Errorf("the demo run is %s (%s: %s), want completed", got.Status, got.Reason, got.Message)
	}
	if left, _ := filepath.Glob(filepath.Join(os.TempDir(), "keel-demo-*")); len(left) > 0 {
		t.Errorf("the server left demo workspaces in %s: %v", os.TempDir(), left)
	}
	if ents, err := os.ReadDir(root); err != nil || len(ents) > 0 {
		t.Errorf("the workspace root holds %v (%v), want nothing", ents, err)
	}
	if _, err := os.Stat(filepath.Join(got.Workspace, "textstats.py")); err != nil {
		t.Errorf("the demo project is not in its workspace: %v", err)
	}
}

// With --server, the listing and inspection commands print what they
// print on the local journal.
func TestClientOutputMatchesLocal(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed: .ci/run installs it")
	}
	setup(t)
	s := startServe(t)
	c := s.apiClient(t)
	var ids []string
	for range 2 {
		run, err := c.CreateRun(t.Context(), &api.CreateRun{Demo: true})
		if err != nil {
			t.Fatal(err)
		}
		untilStopped(t, c, run.ID, 1)
		ids = append(ids, run.ID)
	}
	// Complete the first, through the command line.
	if code, _, errOut := keel(t, "--server", s.url, "approve", ids[0], "demo_4", "--reason", "ok"); code != 0 {
		t.Fatalf("keel --server approve = %d\n%s", code, errOut)
	}
	for _, args := range [][]string{
		{"runs", "list"},
		{"runs", "list", "--json"},
		{"runs", "show", ids[0]},
		{"runs", "show", ids[1], "--json"},
		{"approvals", "list"},
		{"approvals", "list", "--json"},
		{"agents", "list"},
		{"audit", "verify", "--all"},
		{"audit", "verify", ids[0]},
		{"cost"},
		{"cost", "--by", "run", "--json"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			lcode, local, lerr := keel(t, args...)
			rcode, remote, rerr := keel(t, append([]string{"--server", s.url}, args...)...)
			if lcode != rcode || local != remote {
				t.Errorf("local (exit %d):\n%s%s\nwith --server (exit %d):\n%s%s", lcode, local, lerr, rcode, remote, rerr)
			}
		})
	}
	// The approval names the token's person; the run completed.
	code, out, _ := keel(t, "runs", "show", ids[0])
	if code != 0 || !strings.Contains(out, "run.completed") || !strings.Contains(out, "demo_4 allow by") {
		t.Errorf("runs show after approve:\n%s", out)
	}
}

// keel run --server creates the run on the server, streams its progress
// like a local run, waits for the approval, and exits with the run's
// status; flags that configure only this process are refused.
func TestClientRunAndUsage(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed: .ci/run installs it")
	}
	setup(t)
	s := startServe(t)
	ws := t.TempDir()
	code, _, errOut := keel(t, "--server", s.url, "run", "--model", "scripted:demo", "--workspace", ws, "--concurrency", "2", "task")
	if code != 2 || !strings.Contains(errOut, "--concurrency cannot be used") {
		t.Errorf("unsupported flag: exit %d, %q", code, errOut)
	}
	code, _, errOut = keel(t, "--server", s.url, "--token", "keel_bogus_x", "runs", "list")
	if code != 1 || !strings.Contains(errOut, "invalid or revoked API token") {
		t.Errorf("bad token: exit %d, %q", code, errOut)
	}
	code, _, errOut = keel(t, "--server", s.url, "run", "--model", "scripted:demo", "--workspace", demoProject(t), "--policy", "default", "--no-wait", "fix it")
	if code != 0 {
		// The default policy does not ask for edits: the demo completes.
		t.Errorf("keel --server run = %d\n%s", code, errOut)
	}
	for _, want := range []string{"step 1", "read_file", "completed (answer)"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("progress lacks %q:\n%s", want, errOut)
		}
	}
	// With the demo policy (sent as the file's content) the edit asks;
	// --no-wait stops there with exit 3, like a local run.
	pol := filepath.Join(t.TempDir(), "demo.toml")
	if err := os.WriteFile(pol, service.DemoPolicy().Source(), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errOut = keel(t, "--server", s.url, "run", "--model", "scripted:demo", "--workspace", demoProject(t), "--policy", pol, "--no-wait", "fix it")
	if code != 3 || !strings.Contains(errOut, "approval needed for edit_file textstats.py: keel --server "+s.url+" approve ") ||
		!strings.Contains(errOut, "decide with: keel --server "+s.url+" approve ") || strings.Contains(errOut, "runs resume") {
		t.Errorf("keel --server run --no-wait with an ask = %d\n%s", code, errOut)
	}
	// Without --no-wait, a standard input that is not a terminal (nobody
	// to ask) decides the same, as for a local run, instead of waiting
	// forever.
	if _, err := unix.IoctlGetTermios(int(os.Stdin.Fd()), unix.TCGETS); err == nil {
		t.Log("stdin is a terminal: the unattended form is not checked")
		return
	}
	code, _, errOut = keel(t, "--server", s.url, "run", "--model", "scripted:demo", "--workspace", demoProject(t), "--policy", pol, "fix it")
	if code != 3 || !strings.Contains(errOut, "decide with: keel --server "+s.url+" approve ") {
		t.Errorf("keel --server run with an ask, stdin not a terminal = %d\n%s", code, errOut)
	}
}

// demoProject returns a fresh copy of the demo project.
func demoProject(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := demo.WriteProject(dir); err != nil {
		t.Fatal(err)
	}
	return dir
}
