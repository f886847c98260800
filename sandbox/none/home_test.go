//go:build linux

package none_test

import (
	"fmt"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/keel-run/keel/sandbox"
	"github.com/keel-run/keel/sandbox/none"
)

// A process killed before Close leaves its private HOME behind; the next
// sandbox removes the homes of processes of this pid namespace that are
// gone, and nothing else.
func TestNewRemovesHomesOfGoneProcesses(t *testing.T) {
	fi, err := os.Stat("/proc/self/ns/pid")
	if err != nil {
		t.Skip("no /proc/self/ns/pid")
	}
	ns := fi.Sys().(*syscall.Stat_t).Ino
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	gone := osexec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	dead := gone.Process.Pid
	names := map[string]bool{ // name: kept
		fmt.Sprintf("keel-none-home-%d-%d-1", ns, dead):        false,
		fmt.Sprintf("keel-none-home-%d-%d-2", ns, os.Getpid()): true, // a live process
		fmt.Sprintf("keel-none-home-%d-%d-3", ns+1, dead):      true, // another pid namespace
		"keel-none-home-123456":                                true, // an older Keel's: not attributable
		fmt.Sprintf("other-%d-%d-4", ns, dead):                 true,
	}
	for name := range names {
		if err := os.MkdirAll(filepath.Join(tmp, name, ".cache"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	sb, err := none.New(&sandbox.Spec{Workspace: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(sb.Home(), filepath.Join(tmp, fmt.Sprintf("keel-none-home-%d-%d-", ns, os.Getpid()))) {
		t.Errorf("Home() = %s, want keel-none-home-NS-PID-* in %s", sb.Home(), tmp)
	}
	home := filepath.Base(sb.Home())
	names[home] = true
	check := func() {
		t.Helper()
		got := map[string]bool{}
		for name := range names {
			_, err := os.Stat(filepath.Join(tmp, name))
			got[name] = err == nil
		}
		if diff := cmp.Diff(names, got); diff != "" {
			t.Errorf("in TMPDIR (-want +got, true: there):\n%s", diff)
		}
	}
	check()
	if err := sb.Close(); err != nil {
		t.Fatal(err)
	}
	names[home] = false
	check()
}
