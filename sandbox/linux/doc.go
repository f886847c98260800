// Package linux is Keel's Linux sandbox: each run gets one init process in
// new user, mount, PID, network, IPC and UTS namespaces, and every command
// of the run is forked by that init into the sandbox.
//
// # Init hook
//
// The init is this same binary, re-executed from /proc/self/exe in a
// hidden mode (as runc and Docker's reexec do). Every program that
// creates a [Sandbox] must therefore call [Init] first thing in main, and
// every test binary whose tests create one must call it first in
// TestMain:
//
//	func TestMain(m *testing.M) {
//		linux.Init()
//		os.Exit(m.Run())
//	}
//
// # What a command sees
//
//   - the workspace, read-write, at [sandbox.Spec].MountPath (default
//     /workspace), with .keel, Spec.Protected and the control files of the
//     workspace's git repository (config, hooks, commondir, the .git file
//     of a worktree, submodule and worktree git directories) read-only;
//     what a command creates that would make the host's git run a program
//     (a new repository's hook, a config key such as core.fsmonitor, a
//     commondir) is moved to .keel/quarantine after the command by the
//     git guard (see [Quarantine]), and a policy path that did not exist
//     may not be created;
//   - the host's /usr, /bin, /sbin, /lib*, /etc, /opt and /var
//     read-only (so the host's packages work), minus a few secret files;
//   - a private /tmp, /var/tmp, /run, /dev/shm and HOME (/root), a minimal
//     /dev and a fresh /proc; no /sys content, no host home directories;
//   - no network but its own loopback, unless Spec.Network lists hosts,
//     which are then reachable only through Keel's egress proxy;
//   - stdin at EOF (unless the caller gives one, [sandbox.Cmd].Stdin) and
//     only the environment Keel sets;
//   - no capabilities, no_new_privs, a seccomp filter and Landlock rules.
//
// [Sandbox.Mechanisms] reports which of these layers and which limit
// mechanisms (cgroup v1, cgroup v2 or rlimits) apply on this machine;
// docs/sandbox.md describes the threat model.
package linux
