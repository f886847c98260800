//go:build unix && !linux

package none

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/keel-run/keel/sandbox"
)

// sysProcAttr starts the command in a new session (so a new process group
// and no controlling terminal).
func sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setsid: true} }

// applyLimits does nothing: prlimit(2) is Linux-only.
func applyLimits(int, sandbox.Limits) {}

// pipeInodes returns nil: without /proc, pipe holders cannot be found.
func pipeInodes([]*os.File) []uint64 { return nil }

// members returns the process group as a kill target (-pid) while it has
// members; without /proc neither the session nor marked processes can be
// listed.
func (t *tree) members() []int {
	if unix.Kill(-t.pid, 0) == nil {
		return []int{-t.pid}
	}
	return nil
}

// killHolders does nothing without /proc.
func (t *tree) killHolders() {}

// pidNamespace is unknown here: homes of processes that were killed are
// not removed.
func pidNamespace() string { return "" }
