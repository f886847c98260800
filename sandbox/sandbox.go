// Package sandbox defines the isolated place where Keel runs commands: the
// [Sandbox] interface, its [Spec] and [Limits].
//
// The contract (docs/architecture.md, "Contract — sandbox"): commands run with no
// network, no host secrets, stdin at EOF, a non-interactive environment
// (PAGER=cat, GIT_PAGER=cat, TERM=dumb, CI=1), limits on wall time, memory,
// processes and output size, and the whole process tree killed at the
// limit. The workspace is a host directory mounted read-write at
// [Spec.MountPath]; the rest of the file system is read-only or absent;
// protected paths inside the workspace are read-only.
//
// Backends: [github.com/keel-run/keel/sandbox/linux] (namespaces; the
// default on Linux) and [github.com/keel-run/keel/sandbox/none] (no
// isolation; explicit opt-in only). Every backend must pass
// [github.com/keel-run/keel/sandbox/sandboxtest].
package sandbox

import (
	"context"
	"errors"
	"io"
	"time"
)

// Sandbox runs commands in isolation for one run.
//
// Exec is safe for concurrent use. Close ends every process the sandbox
// still holds and releases its resources; it is idempotent.
type Sandbox interface {
	// Exec runs cmd to completion (or until a limit or ctx ends it) and
	// returns how it ended. A command that fails, times out or hits a
	// limit is a Result, not an error: the error return is for a sandbox
	// that could not run anything (it names the cause, for example
	// missing user namespaces).
	Exec(ctx context.Context, cmd *Cmd) (*Result, error)
	Close() error
}

// Cmd is one command to run inside a [Sandbox].
type Cmd struct {
	// Args is the argv; Args[0] is looked up in the sandbox's PATH.
	Args []string
	// Dir is the working directory inside the sandbox; "" means
	// [Spec.MountPath].
	Dir string
	// Env adds KEY=VALUE entries on top of the sandbox environment.
	Env []string
	// Unset names variables of the sandbox environment ([Spec].Env)
	// this command does not get, such as the run's secrets for a
	// stdio MCP server the operator did not give them.
	Unset []string
	// Stdin, when non-nil, is the command's standard input instead of
	// EOF, for interactive processes such as a language kernel. An
	// *os.File is handed to the command as it is; any other reader is
	// copied into a pipe by a goroutine that ends when the reader
	// returns an error or EOF (Exec does not wait for it). Backends
	// implement it with [StdinFile].
	Stdin io.Reader
	// Stdout receives the command's standard output. If Stderr is nil,
	// standard error goes to Stdout too, interleaved in the order the
	// command wrote it (one pipe). Nil discards.
	Stdout io.Writer
	Stderr io.Writer
	// Timeout is the wall-time limit; 0 means [Spec.Limits].WallTime, and
	// if that is 0 too, no limit beyond ctx. A negative Timeout means no
	// wall-time limit (a long-lived process such as a kernel). At the limit the whole process
	// tree receives SIGTERM, then SIGKILL after [Limits].KillGrace.
	Timeout time.Duration
	// IdleTimeout kills the process tree when the command writes no
	// output for this long (a command stuck on input it can never get);
	// 0 disables the watchdog.
	IdleTimeout time.Duration
	// Limits, when non-nil, replaces Spec.Limits for this command
	// (zero fields fall back to the spec's).
	Limits *Limits
}

// Result is how a command ended.
type Result struct {
	// ExitCode is the process's exit status, or 128+signal when a signal
	// ended it (as a shell reports it).
	ExitCode int `json:"exit_code"`
	// Signal names the signal that ended the command ("SIGKILL"), if any.
	Signal string `json:"signal,omitempty"`
	// TimedOut is true when Timeout ended the command.
	TimedOut bool `json:"timed_out,omitempty"`
	// Idle is true when IdleTimeout ended the command.
	Idle bool `json:"idle,omitempty"`
	// Limit names the resource limit the command hit ("memory",
	// "processes", "file_size", "cpu_time", "output"), if any. Hitting a
	// limit does not always end the command (only forks fail at the
	// process limit; the memory limit may kill a child the command
	// survives); Signal says how the command's own process ended.
	Limit string `json:"limit,omitempty"`
	// Duration is the wall time from start to exit.
	Duration time.Duration `json:"duration"`
}

// Limits bounds a command's resources. Zero fields mean "no limit from
// Keel" (the host's own limits still apply).
type Limits struct {
	// WallTime bounds each command's duration.
	WallTime time.Duration `json:"wall_time,omitempty"`
	// KillGrace is how long a process tree has between SIGTERM and
	// SIGKILL; 0 means 2 seconds.
	KillGrace time.Duration `json:"kill_grace,omitempty"`
	// Memory is the memory limit in bytes.
	Memory int64 `json:"memory,omitempty"`
	// Processes is the maximum number of processes (tasks).
	Processes int `json:"processes,omitempty"`
	// CPUTime bounds CPU seconds per command (RLIMIT_CPU).
	CPUTime time.Duration `json:"cpu_time,omitempty"`
	// CPUShare bounds CPU bandwidth as a fraction of one core (1.5 = one
	// and a half cores).
	CPUShare float64 `json:"cpu_share,omitempty"`
	// FileSize is the largest file a command may write, in bytes.
	FileSize int64 `json:"file_size,omitempty"`
	// OpenFiles is the maximum number of open file descriptors.
	OpenFiles int `json:"open_files,omitempty"`
	// OutputBytes bounds the bytes a command may write to Stdout and
	// Stderr together; beyond it the command is killed and Result.Limit
	// is "output".
	OutputBytes int64 `json:"output_bytes,omitempty"`
}

// Merge returns l with every zero field taken from def.
func (l Limits) Merge(def Limits) Limits {
	if l.WallTime == 0 {
		l.WallTime = def.WallTime
	}
	if l.KillGrace == 0 {
		l.KillGrace = def.KillGrace
	}
	if l.Memory == 0 {
		l.Memory = def.Memory
	}
	if l.Processes == 0 {
		l.Processes = def.Processes
	}
	if l.CPUTime == 0 {
		l.CPUTime = def.CPUTime
	}
	if l.CPUShare == 0 {
		l.CPUShare = def.CPUShare
	}
	if l.FileSize == 0 {
		l.FileSize = def.FileSize
	}
	if l.OpenFiles == 0 {
		l.OpenFiles = def.OpenFiles
	}
	if l.OutputBytes == 0 {
		l.OutputBytes = def.OutputBytes
	}
	return l
}

// Network is a sandbox's network policy. The zero value is no network at
// all.
type Network struct {
	// Allow lists the destinations reachable through Keel's egress proxy,
	// as "host", "host:port" (port 443 and 80 when omitted),
	// "*.domain", "localhost" or an IP address (see package
	// [github.com/keel-run/keel/sandbox/egress]): a name is reached only at
	// public addresses; a loopback or private service only when its
	// address (or localhost) is listed.
	Allow []string `json:"allow,omitempty"`
}

// Spec describes a sandbox for one run.
type Spec struct {
	// Workspace is the host directory mounted read-write; it must exist.
	Workspace string `json:"workspace"`
	// MountPath is where the workspace appears inside the sandbox;
	// default "/workspace".
	MountPath string `json:"mount_path"`
	// Env is the environment, as KEY=VALUE, on top of the non-interactive
	// base (see [BaseEnv]). Nothing of the host environment passes
	// unless listed here.
	Env []string `json:"env,omitempty"`
	// Protected lists workspace-relative paths that stay read-only inside
	// the sandbox even if they do not exist yet. [DefaultProtected] is
	// always added.
	Protected []string `json:"protected,omitempty"`
	// Hidden lists paths commands must not read or write at all (the run
	// policy's [paths] deny): workspace-relative, or absolute host paths.
	// The Linux sandbox masks each one that exists (an unreadable
	// read-only directory, or an unopenable file); the none backend
	// cannot.
	Hidden []string `json:"hidden,omitempty"`
	// Limits apply to every command unless the command overrides them.
	Limits Limits `json:"limits"`
	// Network is the egress policy; the zero value is no network.
	Network Network `json:"network"`
}

// DefaultMountPath is the default [Spec.MountPath].
const DefaultMountPath = "/workspace"

// DefaultProtected are the workspace paths every sandbox keeps read-only:
// git hooks and config (a planted hook or alias would run on the host the
// next time a person uses git) and Keel's own state directory.
var DefaultProtected = []string{".git/hooks", ".git/config", ".keel"}

// BaseEnv returns the non-interactive base environment every backend sets
// before Spec.Env: a fixed PATH, C.UTF-8 locale, pagers disabled, no
// terminal, no prompts. home is the HOME directory inside the sandbox.
func BaseEnv(home string) []string {
	return []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=" + home,
		"LANG=C.UTF-8",
		"LC_ALL=C.UTF-8",
		"TERM=dumb",
		"CI=1",
		"PAGER=cat",
		"GIT_PAGER=cat",
		"MANPAGER=cat",
		"LESS=-R",
		"GIT_TERMINAL_PROMPT=0",
		"GIT_EDITOR=true",
		"EDITOR=true",
		"DEBIAN_FRONTEND=noninteractive",
		"npm_config_yes=true",
		"PIP_PROGRESS_BAR=off",
		"PIP_NO_INPUT=1",
		"TQDM_DISABLE=1",
		"NO_COLOR=1",
	}
}

// ErrInvalidSpec is matched (errors.Is) by a backend's error about the
// Spec itself: a mount path or a network allowlist entry it refuses. It is
// a configuration error: nothing was started.
var ErrInvalidSpec = errors.New("sandbox: invalid spec")

// ErrUnavailable is wrapped by a backend that cannot isolate on this
// machine; its message says why and what to change. Keel never falls back
// to no isolation on this error.
var ErrUnavailable = errors.New("sandbox: isolation unavailable")
