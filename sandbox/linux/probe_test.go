//go:build linux

package linux

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"

	"github.com/keel-run/keel/sandbox"
)

func TestProbeWith(t *testing.T) {
	for _, tt := range []struct {
		name    string
		sysctl  map[string]int
		euid    int
		wantErr string // substring; "" means available
	}{
		{"all enabled root", map[string]int{"user/max_user_namespaces": 1000}, 0, ""},
		{"all enabled user", map[string]int{"user/max_user_namespaces": 1000, "kernel/unprivileged_userns_clone": 1}, 1000, ""},
		{"no sysctls at all", nil, 1000, ""},
		{"max zero", map[string]int{"user/max_user_namespaces": 0}, 0, "sysctl -w user.max_user_namespaces="},
		{"debian unprivileged off", map[string]int{"kernel/unprivileged_userns_clone": 0}, 1000, "kernel.unprivileged_userns_clone=1"},
		{"debian unprivileged off but root", map[string]int{"kernel/unprivileged_userns_clone": 0}, 0, ""},
		{"ubuntu apparmor", map[string]int{"kernel/apparmor_restrict_unprivileged_userns": 1}, 1000, "kernel.apparmor_restrict_unprivileged_userns=0"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			read := func(p string) (int, bool) {
				v, ok := tt.sysctl[strings.TrimPrefix(p, "/proc/sys/")]
				return v, ok
			}
			err := probeWith(read, tt.euid)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("probeWith() = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, sandbox.ErrUnavailable) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("probeWith() = %v, want ErrUnavailable mentioning %q", err, tt.wantErr)
			}
		})
	}
}

func TestStartError(t *testing.T) {
	for _, tt := range []struct {
		err         error
		unavailable bool
		mention     string
	}{
		{fmt.Errorf("fork/exec: %w", syscall.EPERM), true, "user.max_user_namespaces"},
		{fmt.Errorf("fork/exec: %w", syscall.ENOSPC), true, "raise user.max_user_namespaces"},
		{fmt.Errorf("fork/exec: %w", syscall.EINVAL), true, "CONFIG_USER_NS"},
		{fmt.Errorf("fork/exec: %w", syscall.ENOMEM), false, "start init"},
		{errors.New("odd"), false, "start init"},
	} {
		err := startError(tt.err)
		if errors.Is(err, sandbox.ErrUnavailable) != tt.unavailable || !strings.Contains(err.Error(), tt.mention) {
			t.Errorf("startError(%v) = %v; want unavailable=%v mentioning %q", tt.err, err, tt.unavailable, tt.mention)
		}
	}
	if err := setupError("sandbox/linux: mount /proc: operation not permitted"); !errors.Is(err, sandbox.ErrUnavailable) {
		t.Errorf("setupError(mount EPERM) = %v, want ErrUnavailable", err)
	}
	if err := setupError("sandbox/linux: protected path .git/hooks: .git is a symbolic link"); errors.Is(err, sandbox.ErrUnavailable) {
		t.Errorf("setupError(bad spec) = %v, want a plain error", err)
	}
}

func TestSeccompPolicyAssembles(t *testing.T) {
	pol, err := seccompPolicy()
	if err != nil {
		t.Fatal(err)
	}
	prog, err := pol.Assemble()
	if err != nil {
		t.Fatalf("Assemble: %v", err)
	}
	if len(prog) < len(deniedSyscalls) {
		t.Errorf("filter has %d instructions for %d denied system calls", len(prog), len(deniedSyscalls))
	}
}
