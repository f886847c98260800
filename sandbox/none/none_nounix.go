//go:build !unix

// Package none is the sandbox backend that offers NO ISOLATION AT ALL; it
// runs only on Unix systems.
package none

import (
	"context"
	"errors"

	"github.com/keel-run/keel/sandbox"
)

// Sandbox is unavailable on this system.
type Sandbox struct{}

// ErrClosed is returned by Exec after Close.
var ErrClosed = errors.New("sandbox/none: sandbox closed")

// New returns an error: this backend needs Unix process groups.
func New(*sandbox.Spec) (*Sandbox, error) {
	return nil, errors.New("sandbox/none: not supported on this system")
}

// Exec returns an error.
func (*Sandbox) Exec(context.Context, *sandbox.Cmd) (*sandbox.Result, error) {
	return nil, ErrClosed
}

// Close does nothing.
func (*Sandbox) Close() error { return nil }
