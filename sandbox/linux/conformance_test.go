//go:build linux

package linux_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/keel-run/keel/sandbox"
	"github.com/keel-run/keel/sandbox/linux"
	"github.com/keel-run/keel/sandbox/sandboxtest"
)

// newLinux returns a NewFunc for the Linux backend with opts.
func newLinux(opts *linux.Options) sandboxtest.NewFunc {
	return func(t *testing.T, spec *sandbox.Spec) sandbox.Sandbox {
		t.Helper()
		sb, err := linux.New(spec, opts)
		if err != nil {
			t.Fatalf("linux.New: %v", err)
		}
		t.Cleanup(func() { sb.Close() })
		return sb
	}
}

func TestConformance(t *testing.T) {
	sandboxtest.Run(t, newLinux(nil))
}

// The contract holds without cgroups too (rlimits, session tracking).
func TestConformanceNoCgroups(t *testing.T) {
	sandboxtest.Run(t, newLinux(&linux.Options{NoCgroups: true}))
}

func TestEscapes(t *testing.T) {
	sandboxtest.RunEscapes(t, newLinux(nil))
}

// newPrestarted is newLinux whose sandboxes take an init that Prestart
// started before New was called.
func newPrestarted(opts *linux.Options) sandboxtest.NewFunc {
	return func(t *testing.T, spec *sandbox.Spec) sandbox.Sandbox {
		t.Helper()
		prestartMu.Lock()
		defer prestartMu.Unlock()
		n := linux.SparesTaken()
		linux.PrestartNow(opts)
		sb, err := linux.New(spec, opts)
		if err != nil {
			t.Fatalf("linux.New: %v", err)
		}
		t.Cleanup(func() { sb.Close() })
		if linux.SparesTaken() != n+1 {
			t.Fatal("New did not take the prestarted init")
		}
		return sb
	}
}

// prestartMu pairs each Prestart with its New across parallel tests.
var prestartMu sync.Mutex

// A prestarted init is placed in its run group while it starts (New
// then only configures it), and a spare nobody takes leaves no group
// behind.
func TestPrestartedInitGroups(t *testing.T) {
	prestartMu.Lock()
	defer prestartMu.Unlock()
	linux.PrestartNow(nil)
	dirs, pid := linux.SpareGroups(), linux.SpareInitPid()
	if len(dirs) == 0 {
		if linux.HasCgroups() {
			t.Fatal("the spare init has no run group")
		}
		t.Skip("no cgroups to place the init in on this machine")
	}
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "init", "cgroup.procs"))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(strings.Fields(string(b)), strconv.Itoa(pid)) {
			t.Errorf("%s/init holds %q, not the spare init %d", d, b, pid)
		}
	}
	linux.DiscardSpare()
	for _, d := range dirs {
		if _, err := os.Stat(d); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("discarded spare's group %s: %v", d, err)
		}
	}
}

// A prestarted init is configured as one New starts: the same contract,
// the same escapes refused.
func TestConformancePrestarted(t *testing.T) {
	sandboxtest.Run(t, newPrestarted(nil))
}

func TestEscapesPrestarted(t *testing.T) {
	sandboxtest.RunEscapes(t, newPrestarted(nil))
}
