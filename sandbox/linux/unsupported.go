//go:build !linux

package linux

import (
	"context"
	"fmt"
	"runtime"

	"github.com/keel-run/keel/sandbox"
)

// Init does nothing on this operating system.
func Init() {}

// Sandbox is unavailable on this operating system; [New] always fails.
type Sandbox struct{}

// New returns an error wrapping [sandbox.ErrUnavailable]: the Linux
// sandbox needs Linux.
func New(spec *sandbox.Spec, opts *Options) (*Sandbox, error) {
	return nil, Available()
}

// Available returns an error wrapping [sandbox.ErrUnavailable].
func Available() error {
	return fmt.Errorf("%w: the linux sandbox needs Linux, not %s", sandbox.ErrUnavailable, runtime.GOOS)
}

// Exec always fails with the error of [Available].
func (s *Sandbox) Exec(ctx context.Context, cmd *sandbox.Cmd) (*sandbox.Result, error) {
	return nil, Available()
}

// Setup always fails with the error of [Available].
func (s *Sandbox) Setup(ctx context.Context, cmd *sandbox.Cmd, network sandbox.Network) (*sandbox.Result, error) {
	return nil, Available()
}

// Mechanisms returns the zero Mechanisms.
func (s *Sandbox) Mechanisms() Mechanisms { return Mechanisms{} }

// Close does nothing.
func (s *Sandbox) Close() error { return nil }
