//go:build unix

package fs_test

import (
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/keel-run/keel/tool"
	"github.com/keel-run/keel/tool/builtin/fs"
)

// permissionCall is one call of TestPermissionDenied.
type permissionCall struct {
	Name string         `json:"name"`
	Args map[string]any `json:"args"`
	Want string         `json:"want"`
}

var permissionCalls = []permissionCall{
	{fs.WriteName, map[string]any{"path": "ro/ro.txt", "content": "new"}, "permission denied; the file was not changed"},
	{fs.EditName, map[string]any{"path": "ro/ro.txt", "old_string": "old", "new_string": "new"}, "permission denied; the file was not changed"},
	{fs.WriteName, map[string]any{"path": "ro/sub/new.txt", "content": "new"}, "permission denied"},
	{fs.WriteName, map[string]any{"path": "ro/new.txt", "content": "new"}, "permission denied"},
	{fs.ReadName, map[string]any{"path": "secret.txt"}, "permission denied"},
	{fs.EditName, map[string]any{"path": "secret.txt", "old_string": "s", "new_string": "t"}, "permission denied"},
	{fs.ListName, map[string]any{"path": "locked"}, "cannot list locked: permission denied"},
	{fs.ListName, map[string]any{"path": ".", "depth": 2}, "locked/\n  [cannot open: permission denied]"},
	{fs.SearchName, map[string]any{"pattern": "s", "path": "."}, "unreadable"},
}

const helperEnv = "KEEL_FS_TEST_HELPER_DIR"

// TestPermissionDenied checks that EACCES is a tool error, never a crash,
// and leaves files unchanged. Root ignores permission bits, so as root
// the calls run in a copy of this test binary started as user nobody
// (uid 65534), the real way to get EACCES.
func TestPermissionDenied(t *testing.T) {
	t.Parallel()
	top := t.TempDir()
	ws := filepath.Join(top, "ws")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(ws, "ro"), 0o755))
	must(os.MkdirAll(filepath.Join(ws, "locked"), 0o755))
	must(os.WriteFile(filepath.Join(ws, "ro", "ro.txt"), []byte("old\n"), 0o644))
	must(os.WriteFile(filepath.Join(ws, "secret.txt"), []byte("s\n"), 0o600))
	var results []*tool.Result
	if os.Geteuid() != 0 {
		must(os.Chmod(filepath.Join(ws, "ro", "ro.txt"), 0o444))
		must(os.Chmod(filepath.Join(ws, "ro"), 0o555))
		must(os.Chmod(filepath.Join(ws, "secret.txt"), 0o000))
		must(os.Chmod(filepath.Join(ws, "locked"), 0o000))
		t.Cleanup(func() {
			os.Chmod(filepath.Join(ws, "ro"), 0o755)
			os.Chmod(filepath.Join(ws, "locked"), 0o755)
		})
		e := newEnvAt(t, ws, nil)
		for _, c := range permissionCalls {
			results = append(results, e.call(c.Name, c.Args))
		}
	} else {
		must(os.Chmod(filepath.Join(ws, "locked"), 0o700))
		results = runAsNobody(t, top, ws)
	}
	if len(results) != len(permissionCalls) {
		t.Fatalf("got %d results, want %d", len(results), len(permissionCalls))
	}
	for i, c := range permissionCalls {
		r := results[i]
		if c.Name == fs.SearchName || (c.Name == fs.ListName && c.Args["path"] == ".") {
			wantOK(t, r, c.Want)
			continue
		}
		wantErr(t, r, c.Want)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "ro", "ro.txt")); string(b) != "old\n" {
		t.Errorf("ro.txt = %q, want it unchanged", b)
	}
	assertNoTemp(t, ws)
}

// runAsNobody runs permissionCalls in a copy of the test binary as uid
// 65534 and returns the results.
func runAsNobody(t *testing.T, top, ws string) []*tool.Result {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Skip(err)
	}
	bin := filepath.Join(top, "fs.test")
	copyFile(t, self, bin)
	for _, d := range []string{filepath.Dir(top), top, ws} {
		os.Chmod(d, 0o755) // let nobody reach the workspace
	}
	cmd := exec.Command(bin, "-test.run=^TestPermissionHelper$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"="+ws)
	cmd.Dir = top
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper as nobody: %v\n%s", err, out)
	}
	_, js, ok := strings.Cut(string(out), "RESULTS:")
	if !ok {
		t.Fatalf("helper printed no results:\n%s", out)
	}
	js, _, _ = strings.Cut(js, "\n")
	var results []*tool.Result
	if err := json.Unmarshal([]byte(js), &results); err != nil {
		t.Fatalf("helper results: %v", err)
	}
	return results
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	src, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestPermissionHelper is the body of TestPermissionDenied run as an
// unprivileged user; it does nothing in a normal test run.
func TestPermissionHelper(t *testing.T) {
	ws := os.Getenv(helperEnv)
	if ws == "" {
		t.Skip("helper process for TestPermissionDenied")
	}
	e := newEnvAt(t, ws, nil)
	var results []*tool.Result
	for _, c := range permissionCalls {
		results = append(results, e.call(c.Name, c.Args))
	}
	b, _ := json.Marshal(results)
	os.Stdout.WriteString("RESULTS:" + string(b) + "\n")
}
