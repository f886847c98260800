//go:build linux

package linux_test

import (
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

// A prestarted init is configured as one New starts: the same contract,
// the same escapes refused.
func TestConformancePrestarted(t *testing.T) {
	sandboxtest.Run(t, newPrestarted(nil))
}

func TestEscapesPrestarted(t *testing.T) {
	sandboxtest.RunEscapes(t, newPrestarted(nil))
}
