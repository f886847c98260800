//go:build linux

package linux_test

import (
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
