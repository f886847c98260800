package sandboxtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keel-run/keel/sandbox"
)

// pySyscall makes one raw system call (x86_64 numbers) and prints ERRNO
// and its name, or ESCAPED when the call got through.
const pySyscall = `python3 - "$@" <<'PY'
import ctypes, errno, sys, platform
if platform.machine() != "x86_64":
    print("not x86_64: cannot run this probe"); sys.exit(0)
libc = ctypes.CDLL(None, use_errno=True)
nr = %d
args = [ctypes.c_long(a) for a in %s]
r = libc.syscall(nr, *args)
if r == -1:
    e = ctypes.get_errno()
    print("ERRNO", errno.errorcode.get(e), e)
else:
    print("ESCAPED: syscall", nr, "returned", r)
PY`

func pysys(nr int, args ...int64) string {
	var s []string
	for _, a := range args {
		s = append(s, fmt.Sprint(a))
	}
	return fmt.Sprintf(pySyscall, nr, "["+strings.Join(s, ", ")+"]")
}

// proxyConnect asks the sandbox's egress proxy (from HTTPS_PROXY) for a
// tunnel to dest with plain bash; without a proxy it connects directly.
func proxyConnect(dest string) string {
	return "DEST=" + dest + "\n" + `if [ -z "$HTTPS_PROXY" ]; then exec 3<>/dev/tcp/${DEST%:*}/${DEST##*:} && echo ESCAPED; exit 0; fi
p=${HTTPS_PROXY##*:}; p=${p%/}
exec 3<>/dev/tcp/127.0.0.1/$p || exit 1
printf 'CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n' "$DEST" "$DEST" >&3
l=$(head -n1 <&3); echo "$l"; case "$l" in *" 200 "*) echo ESCAPED;; esac`
}

// pySocket tries to open a socket and prints ERRNO or ESCAPED.
func pySocket(family, typ, proto string) string {
	return `python3 - <<'PY'
import socket, errno
try:
    s = socket.socket(` + family + `, ` + typ + `, ` + proto + `)
    print("ESCAPED: socket opened")
except OSError as e:
    print("ERRNO", errno.errorcode.get(e.errno), e)
PY`
}

// hostFileUnchanged returns a prepare/check pair asserting that a host
// file keeps its content.
func writeHost(rel, content string) func(t *testing.T, e *escapeEnv) {
	return func(t *testing.T, e *escapeEnv) {
		p := filepath.Join(e.ws, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func hostHas(rel, content string) func(t *testing.T, e *escapeEnv, _ *sandbox.Result, _ string) {
	return func(t *testing.T, e *escapeEnv, _ *sandbox.Result, _ string) {
		b, err := os.ReadFile(filepath.Join(e.ws, rel))
		if err != nil || string(b) != content {
			t.Errorf("ESCAPE: host %s is %q (%v), want %q unchanged", rel, b, err, content)
		}
	}
}

func hostLacks(path func(e *escapeEnv) string) func(t *testing.T, e *escapeEnv, _ *sandbox.Result, _ string) {
	return func(t *testing.T, e *escapeEnv, _ *sandbox.Result, _ string) {
		p := path(e)
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("ESCAPE: %s exists on the host", p)
		}
	}
}

func prepareGit(t *testing.T, e *escapeEnv) {
	writeHost(".git/config", "[core]\n\trepositoryformatversion = 0\n")(t, e)
	writeHost(".git/hooks/pre-commit.sample", "#!/bin/sh\n")(t, e)
	writeHost(".git/HEAD", "ref: refs/heads/main\n")(t, e)
}

// stillWorks checks that the sandbox runs a command after the case.
func stillWorks(t *testing.T, e *escapeEnv, _ *sandbox.Result, _ string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	var out syncBuffer
	res, err := e.sb.Exec(ctx, &sandbox.Cmd{Args: []string{"echo", "alive"}, Stdout: &out})
	if err != nil || res.ExitCode != 0 || out.String() != "alive\n" {
		t.Errorf("the sandbox no longer runs commands after the case: %v %+v %q", err, res, out.String())
	}
}

func limitIs(name string) func(t *testing.T, e *escapeEnv, res *sandbox.Result, out string) {
	return func(t *testing.T, e *escapeEnv, res *sandbox.Result, out string) {
		t.Helper()
		if res.Limit != name {
			t.Errorf("Result.Limit = %q, want %q (%+v)", res.Limit, name, res)
		}
		stillWorks(t, e, res, out)
	}
}

func noLeftovers(marker string) func(t *testing.T, e *escapeEnv, res *sandbox.Result, out string) {
	return func(t *testing.T, e *escapeEnv, _ *sandbox.Result, _ string) {
		if l := leftovers(t, e.sb, marker); l != "" {
			t.Errorf("ESCAPE: processes outlived their call:\n%s", l)
		}
	}
}

// escapeCases is the suite: at least 40 attempts, each with the refusal
// it must meet.
func escapeCases() []escapeCase {
	hostName, _ := os.Hostname()
	home, _ := os.UserHomeDir()
	var homeProbe []string
	if entries, err := os.ReadDir(home); err == nil && home != "" {
		for i, en := range entries {
			if i == 8 {
				break
			}
			homeProbe = append(homeProbe, filepath.Join(home, en.Name()))
		}
	}
	if entries, err := os.ReadDir("/home"); err == nil {
		for i, en := range entries {
			if i == 4 {
				break
			}
			homeProbe = append(homeProbe, filepath.Join("/home", en.Name()))
		}
	}
	homeScript := "for f in"
	for _, p := range homeProbe {
		homeScript += fmt.Sprintf(" %q", p)
	}
	homeScript += `; do [ -e "$f" ] && echo "ESCAPED: host home entry $f is visible"; done; echo checked`
	orphan := fmt.Sprintf("keel-escape-orphan-%d", os.Getpid())

	cases := []escapeCase{
		// Host files.
		{name: "read_etc_shadow", area: "host files", want: []string{kindDenied, kindMasked, kindAbsent},
			script: `grep -q '^root:' /etc/shadow && echo ESCAPED; cat /etc/shadow | head -c 200; [ -s /etc/shadow ] || echo MASKED`},
		{name: "read_host_secret_outside_workspace", area: "host files", want: []string{kindAbsent},
			script: `cat $OUTSIDE/secret.txt && echo ESCAPED`,
			check: func(t *testing.T, e *escapeEnv, _ *sandbox.Result, out string) {
				if strings.Contains(out, "HOST-SECRET") {
					t.Errorf("ESCAPE: the host secret was read")
				}
			}},
		{name: "host_home_hidden", area: "host files", want: []string{kindContained}, script: homeScript},
		{name: "ssh_host_keys", area: "host files", want: []string{kindMasked, kindDenied, kindAbsent},
			script: `cat /etc/ssh/ssh_host_*_key 2>&1 | grep -q 'PRIVATE KEY' && echo ESCAPED; echo MASKED`},
		{name: "read_init_environ", area: "host files", want: []string{kindDenied},
			script: `cat /proc/1/environ && echo ESCAPED`},
		{name: "read_init_binary", area: "host files", want: []string{kindDenied},
			script: `readlink /proc/1/exe && echo ESCAPED; head -c 4 /proc/1/exe && echo ESCAPED`},

		// Host environment and processes.
		{name: "host_env_not_inherited", area: "host environment", want: []string{kindContained},
			script: `env | grep HOST-ENV-SECRET && echo ESCAPED; grep -a HOST-ENV-SECRET /proc/[0-9]*/environ && echo ESCAPED; true`},
		{name: "host_processes_invisible", area: "host environment", want: []string{kindContained},
			script: `for p in /proc/[0-9]*; do case "$(tr '\0' ' ' < $p/cmdline 2>/dev/null)" in "$CANARY "*) echo "ESCAPED: host process $p visible";; esac; done; echo scanned`},
		{name: "hostname_private", area: "host environment", want: []string{kindReadOnly, kindDenied},
			script: `[ "$(cat /proc/sys/kernel/hostname)" = "` + hostName + `" ] && echo "ESCAPED: host name visible"; echo keel-evil > /proc/sys/kernel/hostname && echo ESCAPED`},

		// Writing outside the workspace.
		{name: "write_etc", area: "write outside", want: []string{kindReadOnly, kindDenied},
			script: `echo x > /etc/keel-escape && echo ESCAPED`},
		{name: "write_usr_bin", area: "write outside", want: []string{kindReadOnly, kindDenied},
			script: `cp /bin/true /usr/bin/keel-escape && echo ESCAPED`},
		{name: "write_root_dir", area: "write outside", want: []string{kindReadOnly, kindDenied},
			script: `touch /keel-escape && echo ESCAPED`},
		{name: "write_var", area: "write outside", want: []string{kindReadOnly, kindDenied},
			script: `echo x > /var/lib/keel-escape && echo ESCAPED`},
		{name: "write_host_path", area: "write outside", want: []string{kindAbsent},
			script: `echo x > $OUTSIDE/new.txt && echo ESCAPED`,
			check:  hostLacks(func(e *escapeEnv) string { return filepath.Join(e.outside, "new.txt") })},
		{name: "tmp_is_private", area: "write outside", want: []string{kindAbsent},
			script: `cat $TMPCANARY && echo ESCAPED; echo x > $TMPCANARY.new`,
			check:  hostLacks(func(e *escapeEnv) string { return e.tmpCanary + ".new" })},
		{name: "shm_is_private", area: "write outside", want: []string{kindAbsent},
			script: `cat $SHMCANARY && echo ESCAPED; echo x > $SHMCANARY.new`,
			check:  hostLacks(func(e *escapeEnv) string { return e.shmCanary + ".new" })},
		{name: "dotdot_from_workspace", area: "write outside", want: []string{kindReadOnly, kindDenied},
			script: `cd $MOUNT/.. && touch keel-escape-dotdot && echo ESCAPED`},
		{name: "proc_self_root", area: "write outside", want: []string{kindReadOnly, kindDenied},
			script: `echo x > /proc/self/root/etc/keel-escape && echo ESCAPED`},

		// Symbolic and hard links.
		{name: "symlink_to_system_file", area: "links", want: []string{kindReadOnly, kindDenied},
			script: `ln -s /etc/passwd p && echo x >> p && echo ESCAPED`},
		{name: "symlink_to_host_dir", area: "links", want: []string{kindAbsent},
			script: `ln -s $OUTSIDE out; cat out/secret.txt && echo ESCAPED; echo x > out/new.txt && echo ESCAPED`,
			check:  hostLacks(func(e *escapeEnv) string { return filepath.Join(e.outside, "new.txt") })},
		{name: "hardlink_system_file", area: "links", want: []string{kindCrossDevice, kindDenied},
			script: `ln /etc/passwd hard && echo ESCAPED`},
		{name: "hardlink_out_of_workspace", area: "links", want: []string{kindCrossDevice, kindDenied},
			script: `echo x > f && ln f /tmp/f2 && echo ESCAPED`},
		{name: "rename_out_of_workspace", area: "links", want: []string{kindReadOnly, kindCrossDevice, kindDenied},
			script: `echo x > f && mv f /keel-moved && echo ESCAPED`},

		// /proc and /sys.
		{name: "sysctl_write", area: "/proc and /sys", want: []string{kindReadOnly, kindDenied},
			script: `v=$(cat /proc/sys/kernel/core_pattern); echo "$v" > /proc/sys/kernel/core_pattern && echo ESCAPED`},
		{name: "sysrq_trigger", area: "/proc and /sys", want: []string{kindReadOnly, kindDenied, kindAbsent},
			script: `echo h > /proc/sysrq-trigger && echo ESCAPED`},
		{name: "proc_kcore", area: "/proc and /sys", want: []string{kindMasked, kindDenied, kindAbsent},
			script: `n=$(head -c 64 /proc/kcore | wc -c); [ "$n" -gt 0 ] && echo ESCAPED; echo MASKED`},
		{name: "proc_keys_timer_list", area: "/proc and /sys", want: []string{kindMasked, kindDenied},
			script: `[ -s /proc/keys ] && echo ESCAPED; head -c 100 /proc/timer_list | grep -q . && echo ESCAPED; echo MASKED`},
		{name: "sys_cgroup_and_net", area: "/proc and /sys", want: []string{kindAbsent},
			script: `ls /sys/fs/cgroup /sys/class/net; [ -e /sys/fs/cgroup/cgroup.procs ] && echo ESCAPED; [ -e /sys/kernel ] && echo ESCAPED; true`},
		{name: "write_init_memory", area: "/proc and /sys", want: []string{kindDenied},
			script: `echo x > /proc/1/mem && echo ESCAPED`},
		{name: "init_root_link", area: "/proc and /sys", want: []string{kindDenied},
			script: `ls /proc/1/root/ && echo ESCAPED`},
		{name: "inherited_descriptors", area: "/proc and /sys", want: []string{kindContained},
			script: `fds=$(ls /proc/self/fd | tr '\n' ' '); [ "$fds" = "0 1 2 3 " ] || { echo "ESCAPED: inherited descriptors: $fds"; ls -l /proc/self/fd; }; echo checked`},

		// Devices.
		{name: "block_and_memory_devices", area: "devices", want: []string{kindAbsent},
			script: `ls /dev/vda /dev/sda /dev/mem /dev/kmsg; for d in /dev/vda /dev/sda /dev/nvme0n1 /dev/mem /dev/kmem /dev/port /dev/kmsg; do [ -e $d ] && echo ESCAPED $d; done; true`},
		{name: "mknod", area: "devices", needs: []string{"mknod"}, want: []string{kindDenied},
			script: `mknod /tmp/sda b 8 0 && echo ESCAPED`},
		{name: "write_dev", area: "devices", want: []string{kindReadOnly, kindDenied},
			script: `touch /dev/keel-evil && echo ESCAPED`},

		// ptrace.
		{name: "ptrace_init", area: "ptrace", needs: []string{"python3"}, want: []string{kindDenied}, script: pysys(101, 16, 1, 0, 0)},
		{name: "ptrace_host_pid", area: "ptrace", needs: []string{"python3"}, want: []string{kindDenied, kindAbsent}, script: pysys(101, 16, int64(os.Getpid()), 0, 0)},
		{name: "ptrace_own_child", area: "ptrace", needs: []string{"python3"}, want: []string{kindDenied},
			script: `python3 - <<'PY'
import ctypes, errno, os, time
libc = ctypes.CDLL(None, use_errno=True)
pid = os.fork()
if pid == 0:
    time.sleep(30); os._exit(0)
r = libc.ptrace(16, pid, None, None)
print("ESCAPED" if r == 0 else "ERRNO %s" % errno.errorcode.get(ctypes.get_errno()))
os.kill(pid, 9)
PY`},
		{name: "ptrace_traceme", area: "ptrace", needs: []string{"python3"}, want: []string{kindDenied}, script: pysys(101, 0, 0, 0, 0)},
		{name: "process_vm_readv", area: "ptrace", needs: []string{"python3"}, want: []string{kindDenied}, script: pysys(310, 1, 0, 0, 0, 0, 0)},

		// Mounts.
		{name: "mount_tmpfs", area: "mounts", needs: []string{"mount"}, want: []string{kindDenied},
			script: `mount -t tmpfs none /mnt && echo ESCAPED`},
		{name: "unmount_workspace", area: "mounts", needs: []string{"mount"}, want: []string{kindDenied},
			script: `umount -l $MOUNT && echo ESCAPED`},
		{name: "bind_mount", area: "mounts", needs: []string{"mount"}, want: []string{kindDenied},
			script: `mkdir -p /tmp/b && mount --bind / /tmp/b && echo ESCAPED`},
		{name: "mount_syscall", area: "mounts", needs: []string{"python3"}, want: []string{kindDenied},
			script: `python3 - <<'PY'
import ctypes, errno
libc = ctypes.CDLL(None, use_errno=True)
r = libc.mount(b"none", b"/mnt", b"tmpfs", 0, None)
print("ESCAPED" if r == 0 else "ERRNO %s" % errno.errorcode.get(ctypes.get_errno()))
PY`},
		{name: "chroot", area: "mounts", needs: []string{"chroot"}, want: []string{kindDenied},
			script: `chroot / /bin/true && echo ESCAPED`},

		// New namespaces.
		{name: "unshare_user", area: "namespaces", needs: []string{"unshare"}, want: []string{kindDenied, kindDiskFull},
			script: `unshare -U -r true && echo ESCAPED`},
		{name: "unshare_net", area: "namespaces", needs: []string{"unshare"}, want: []string{kindDenied},
			script: `unshare -n true && echo ESCAPED`},
		{name: "unshare_mount", area: "namespaces", needs: []string{"unshare"}, want: []string{kindDenied},
			script: `unshare -m true && echo ESCAPED`},
		{name: "nsenter_init", area: "namespaces", needs: []string{"nsenter"}, want: []string{kindDenied},
			script: `nsenter -t 1 -m -u true && echo ESCAPED`},
		{name: "clone_newuser", area: "namespaces", needs: []string{"python3"}, want: []string{kindDenied}, script: pysys(56, 0x10000000|17, 0, 0, 0, 0)},

		// Privileges.
		{name: "no_capabilities", area: "privileges", want: []string{kindMasked},
			script: `grep -E '^(CapInh|CapEff|CapPrm|CapBnd|CapAmb):' /proc/self/status | grep -v '0000000000000000' && echo ESCAPED; grep -q '^NoNewPrivs:.1' /proc/self/status || echo "ESCAPED: no_new_privs is off"; echo MASKED`},
		{name: "setuid_other_user", area: "privileges", needs: []string{"setpriv"}, want: []string{kindDenied},
			script: `setpriv --reuid=1000 --regid=1000 --clear-groups id && echo ESCAPED`},
		{name: "chown_file", area: "privileges", want: []string{kindDenied, kindUnmapped},
			script: `echo x > f && chown 1000:1000 f && echo ESCAPED`},
		{name: "setuid_binary", area: "privileges", want: []string{kindDenied, kindContained},
			script: `cp /usr/bin/env ./suid-env && chmod u+s ./suid-env; ./suid-env grep CapEff /proc/self/status | grep -v 0000000000000000 && echo ESCAPED; su -s /bin/true nobody && echo ESCAPED; true`},

		// Kernel interfaces.
		{name: "keyctl", area: "kernel interfaces", needs: []string{"python3"}, want: []string{kindDenied}, script: pysys(250, 0, -3, 0)},
		{name: "bpf", area: "kernel interfaces", needs: []string{"python3"}, want: []string{kindDenied}, script: pysys(321, 0, 0, 0)},
		{name: "perf_event_open", area: "kernel interfaces", needs: []string{"python3"}, want: []string{kindDenied}, script: pysys(298, 0, 0, -1, -1, 0)},
		{name: "io_uring_setup", area: "kernel interfaces", needs: []string{"python3"}, want: []string{kindDenied}, script: pysys(425, 1, 0)},
		{name: "userfaultfd", area: "kernel interfaces", needs: []string{"python3"}, want: []string{kindDenied}, script: pysys(323, 0)},
		{name: "kexec_load", area: "kernel interfaces", needs: []string{"python3"}, want: []string{kindDenied}, script: pysys(246, 0, 0, 0, 0)},
		{name: "init_module", area: "kernel interfaces", needs: []string{"python3"}, want: []string{kindDenied}, script: pysys(175, 0, 0, 0)},

		// Network.
		{name: "bash_dev_tcp_raw_ip", area: "network", want: []string{kindUnreachable},
			script: `exec 3<>/dev/tcp/1.1.1.1/80 && echo ESCAPED`},
		{name: "bash_dev_tcp_ipv6", area: "network", want: []string{kindUnreachable},
			script: `exec 3<>/dev/tcp/2606:4700:4700::1111/80 && echo ESCAPED`},
		{name: "bash_dev_udp_dns", area: "network", want: []string{kindUnreachable},
			script: `echo x > /dev/udp/8.8.8.8/53 && echo ESCAPED`},
		{name: "dns_lookup", area: "network", needs: []string{"getent"}, want: []string{kindNoDNS},
			script: `getent hosts example.com && echo ESCAPED; echo NODNS`},
		{name: "host_loopback", area: "network", want: []string{kindUnreachable},
			script: `exec 3<>/dev/tcp/127.0.0.1/$HOSTPORT && echo ESCAPED`,
			check:  func(t *testing.T, e *escapeEnv, _ *sandbox.Result, _ string) { noConnection(t, e.hostLn) }},
		{name: "host_abstract_socket", area: "network", needs: []string{"python3"}, want: []string{kindUnreachable},
			script: `python3 - <<'PY'
import socket, errno
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    s.connect("\0$ABSTRACT"); print("ESCAPED")
except OSError as e:
    print("ERRNO", errno.errorcode.get(e.errno), e)
PY`,
			check: func(t *testing.T, e *escapeEnv, _ *sandbox.Result, _ string) { noConnection(t, e.abstLn) }},
		{name: "raw_socket", area: "network", needs: []string{"python3"}, want: []string{kindDenied}, script: pySocket("socket.AF_INET", "socket.SOCK_RAW", "socket.IPPROTO_ICMP")},
		{name: "packet_socket", area: "network", needs: []string{"python3"}, want: []string{kindDenied}, script: pySocket("17", "socket.SOCK_RAW", "0")},
		{name: "vsock_socket", area: "network", needs: []string{"python3"}, want: []string{kindDenied}, script: pySocket("40", "socket.SOCK_STREAM", "0")},
		{name: "curl_raw_ip", area: "network", needs: []string{"curl"}, want: []string{kindUnreachable},
			script: `curl -sS -m 10 http://1.1.1.1/ && echo ESCAPED`},
		{name: "curl_name", area: "network", needs: []string{"curl"}, want: []string{kindNoDNS, kindUnreachable},
			script: `curl -sS -m 10 https://example.com/ && echo ESCAPED`},
		{name: "wget_raw_ip", area: "network", needs: []string{"wget"}, want: []string{kindUnreachable},
			script: `wget -T 10 -t 1 -O- http://1.1.1.1/ && echo ESCAPED`},
		{name: "nc_raw_ip", area: "network", needs: []string{"nc"}, want: []string{kindUnreachable},
			script: `nc -v -z -w 5 1.1.1.1 80 && echo ESCAPED`},
		{name: "proxy_refuses_raw_ip", area: "network", want: []string{kindProxyDenied, kindUnreachable},
			edit:   func(s *sandbox.Spec, _ *escapeEnv) { s.Network.Allow = []string{"allowed.keel.invalid"} },
			script: proxyConnect("1.1.1.1:443")},
		{name: "proxy_refuses_unlisted_host", area: "network", want: []string{kindProxyDenied, kindUnreachable},
			edit:   func(s *sandbox.Spec, _ *escapeEnv) { s.Network.Allow = []string{"allowed.keel.invalid"} },
			script: proxyConnect("example.com:443")},
		{name: "proxy_bypass_direct", area: "network", want: []string{kindUnreachable},
			edit:   func(s *sandbox.Spec, _ *escapeEnv) { s.Network.Allow = []string{"example.com"} },
			script: `exec 3<>/dev/tcp/93.184.215.14/443 && echo ESCAPED`},
		{name: "curl_through_proxy_unlisted", area: "network", needs: []string{"curl"}, want: []string{kindProxyDenied},
			edit:   func(s *sandbox.Spec, _ *escapeEnv) { s.Network.Allow = []string{"allowed.keel.invalid"} },
			script: `curl -sS -m 10 https://example.com/ && echo ESCAPED`},

		// Protected paths.
		{name: "write_git_hook", area: "protected paths", want: []string{kindReadOnly, kindDenied}, prepare: prepareGit,
			script: `echo 'echo pwned' > .git/hooks/pre-commit && echo ESCAPED; chmod +x .git/hooks/pre-commit.sample && echo ESCAPED`,
			check:  hostLacks(func(e *escapeEnv) string { return filepath.Join(e.ws, ".git/hooks/pre-commit") })},
		{name: "write_git_config", area: "protected paths", want: []string{kindReadOnly, kindDenied}, prepare: prepareGit,
			script: `printf '[core]\n\tfsmonitor = /tmp/evil\n' >> .git/config && echo ESCAPED`,
			check:  hostHas(".git/config", "[core]\n\trepositoryformatversion = 0\n")},
		{name: "write_keel_dir", area: "protected paths", want: []string{kindReadOnly, kindDenied},
			script: `mkdir -p .keel/x && echo ESCAPED; echo y > .keel/state && echo ESCAPED`,
			check:  hostLacks(func(e *escapeEnv) string { return filepath.Join(e.ws, ".keel/state") })},
		{name: "rename_hooks_dir", area: "protected paths", want: []string{kindBusy, kindReadOnly, kindDenied}, prepare: prepareGit,
			script: `mv .git/hooks .git/hooks-old && mkdir .git/hooks && echo x > .git/hooks/pre-commit && echo ESCAPED`,
			check:  hostLacks(func(e *escapeEnv) string { return filepath.Join(e.ws, ".git/hooks/pre-commit") })},
		{name: "rename_git_dir", area: "protected paths", want: []string{kindBusy, kindReadOnly, kindDenied}, prepare: prepareGit,
			script: `mv .git .git-old && mkdir -p .git/hooks && echo x > .git/hooks/post-checkout && echo ESCAPED`,
			check:  hostLacks(func(e *escapeEnv) string { return filepath.Join(e.ws, ".git/hooks/post-checkout") })},
		{name: "remove_git_dir", area: "protected paths", want: []string{kindBusy, kindReadOnly, kindDenied}, prepare: prepareGit,
			script: `rm -rf .git; [ -f .git/config ] || echo ESCAPED`,
			check:  hostHas(".git/config", "[core]\n\trepositoryformatversion = 0\n")},
		{name: "hooks_symlink_swap", area: "protected paths", want: []string{kindBusy, kindReadOnly, kindDenied}, prepare: prepareGit,
			script: `rm -rf .git/hooks && ln -s /tmp .git/hooks && echo ESCAPED`},
		{name: "policy_protected_path", area: "protected paths", want: []string{kindReadOnly, kindDenied},
			edit:    func(s *sandbox.Spec, _ *escapeEnv) { s.Protected = []string{"deploy/secrets.env"} },
			prepare: writeHost("deploy/secrets.env", "TOKEN=keep\n"),
			script:  `echo 'TOKEN=stolen' >> deploy/secrets.env && echo ESCAPED; rm -f deploy/secrets.env && echo ESCAPED`,
			check:   hostHas("deploy/secrets.env", "TOKEN=keep\n")},

		// Resources.
		{name: "fork_bomb", area: "resources", want: []string{kindLimitHit},
			limits: &sandbox.Limits{Processes: 64, WallTime: 5 * time.Second, KillGrace: time.Second},
			script: `bomb() { bomb | bomb & }; bomb 2>/dev/null; sleep 2; echo done`, check: limitIs("processes")},
		{name: "memory_bomb", area: "resources", want: []string{kindLimitHit},
			limits: &sandbox.Limits{Memory: 64 << 20},
			script: `head -c 400000000 /dev/zero | tail -n1 | wc -c`, check: limitIs("memory")},
		{name: "disk_fill_file_size", area: "resources", want: []string{kindLimitHit},
			limits: &sandbox.Limits{FileSize: 1 << 20},
			script: `yes 0123456789 > big.txt`,
			check: func(t *testing.T, e *escapeEnv, res *sandbox.Result, out string) {
				limitIs("file_size")(t, e, res, out)
				if fi, err := os.Stat(filepath.Join(e.ws, "big.txt")); err == nil && fi.Size() > 1<<20 {
					t.Errorf("ESCAPE: big.txt is %d bytes, over the 1 MiB limit", fi.Size())
				}
			}},
		{name: "tmp_fill", area: "resources", want: []string{kindDiskFull, kindLimitHit},
			limits: &sandbox.Limits{Memory: 256 << 20},
			script: `head -c 3000000000 /dev/zero > /tmp/fill; echo rc=$?`, check: stillWorks},
		{name: "cpu_spin", area: "resources", want: []string{kindLimitHit},
			limits: &sandbox.Limits{CPUTime: time.Second},
			script: `while :; do :; done`, check: limitIs("cpu_time")},
		{name: "open_files", area: "resources", want: []string{kindTooManyFiles},
			limits: &sandbox.Limits{OpenFiles: 32},
			script: `for i in $(seq 1 64); do exec {fd}</dev/null || break; done; echo opened`},

		// Orphans.
		{name: "setsid_daemon", area: "orphans", want: []string{kindContained},
			script: `setsid bash -c 'exec -a ` + orphan + `-a sleep 600' </dev/null >/dev/null 2>&1 & echo started`,
			check:  noLeftovers(orphan + "-a")},
		{name: "double_fork", area: "orphans", want: []string{kindContained},
			script: `( ( exec -a ` + orphan + `-b sleep 600 </dev/null >/dev/null 2>&1 ) & ) & echo started`,
			check:  noLeftovers(orphan + "-b")},

		// The init process.
		{name: "signal_init", area: "init", want: []string{kindContained},
			script: `kill -KILL 1; kill -TERM 1; kill -STOP 1; kill -INT 1; echo sent`, check: stillWorks},
		// Commands run as the init's uid: lowering its limits would starve
		// it (every later command failed) or have it killed (CPU).
		{name: "limit_init", area: "init", want: []string{kindDenied},
			script: `prlimit --pid 1 --nofile=8:8; prlimit --pid 1 --cpu=1:1; python3 -c 'import resource; resource.prlimit(1, resource.RLIMIT_NOFILE, (8, 8))'; echo done`,
			check: func(t *testing.T, e *escapeEnv, res *sandbox.Result, out string) {
				for range 3 {
					stillWorks(t, e, res, out)
				}
			}},
	}
	return append(cases, gitCases()...)
}
