package sandboxtest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keel-run/keel/sandbox"
)

// Refusal kinds: how an attempt must fail. A case lists the kinds it
// accepts; each kind is recognised in the command's output.
const (
	kindDenied       = "denied"    // EACCES or EPERM
	kindReadOnly     = "read-only" // EROFS
	kindAbsent       = "absent"    // ENOENT: the thing is not there at all
	kindCrossDevice  = "cross-device"
	kindBusy         = "busy" // EBUSY: a mount point cannot be moved or removed
	kindUnreachable  = "unreachable"
	kindNoDNS        = "no-dns"
	kindProxyDenied  = "proxy-denied"   // the egress proxy answered 403
	kindMasked       = "masked"         // readable but empty
	kindContained    = "contained"      // ran, but the host check shows no effect
	kindLimitHit     = "limit"          // Result.Limit names the limit
	kindDiskFull     = "disk-full"      // ENOSPC
	kindTooManyFiles = "too-many-files" // EMFILE
	kindUnmapped     = "unmapped"       // EINVAL: the id does not exist in the sandbox's user namespace
	kindQuarantined  = "quarantined"    // the backend moved a planted file aside after the command and said so
)

// refusalPatterns recognise each kind in output (C.UTF-8 messages).
var refusalPatterns = map[string]*regexp.Regexp{
	kindDenied:       regexp.MustCompile(`(?i)permission denied|operation not permitted|not permitted|must be superuser|EPERM|EACCES|cannot set groups|authentication failure`),
	kindReadOnly:     regexp.MustCompile(`(?i)read-only file system|EROFS`),
	kindAbsent:       regexp.MustCompile(`(?i)no such file or directory|ENOENT|No such process|ESRCH|not found`),
	kindCrossDevice:  regexp.MustCompile(`(?i)invalid cross-device link|EXDEV`),
	kindBusy:         regexp.MustCompile(`(?i)device or resource busy|EBUSY`),
	kindUnreachable:  regexp.MustCompile(`(?i)network is unreachable|ENETUNREACH|connection refused|ECONNREFUSED|couldn't connect|failed to connect|could not connect|no route to host|cannot assign requested address|EHOSTUNREACH|timed out`),
	kindNoDNS:        regexp.MustCompile(`(?i)could not resolve|name or service not known|temporary failure in name resolution|NODNS|unable to resolve|failed: .*resolv`),
	kindProxyDenied:  regexp.MustCompile(`(?i)\b403\b`),
	kindMasked:       regexp.MustCompile(`MASKED`),
	kindDiskFull:     regexp.MustCompile(`(?i)no space left on device|ENOSPC`),
	kindTooManyFiles: regexp.MustCompile(`(?i)too many open files|EMFILE`),
	kindUnmapped:     regexp.MustCompile(`(?i)invalid argument|EINVAL`),
	kindQuarantined:  regexp.MustCompile(`(?i)\bquarantined\b`),
}

// escapeCase is one escape attempt.
type escapeCase struct {
	name   string
	area   string   // what is attacked, for the summary
	script string   // bash; prints ESCAPED if the attack worked
	want   []string // acceptable refusal kinds
	needs  []string // tools that must exist inside
	limits *sandbox.Limits
	edit   func(*sandbox.Spec, *escapeEnv)
	// prepare runs on the host before the sandbox is created; check after
	// the command (with the sandbox still open).
	prepare func(t *testing.T, e *escapeEnv)
	check   func(t *testing.T, e *escapeEnv, res *sandbox.Result, out string)
	// sibling starts a second sandbox on the same workspace before the
	// case's own and closes it before the script runs (two runs sharing
	// a workspace, the first one ending).
	sibling bool
}

// escapeEnv is what the host side of the suite prepared.
type escapeEnv struct {
	sb        sandbox.Sandbox
	spec      *sandbox.Spec
	ws        string // host workspace
	outside   string // a host directory outside the workspace, with secret.txt
	hostPort  int    // a TCP listener on the host's loopback
	hostLn    net.Listener
	abstract  string // an abstract Unix socket name on the host
	abstLn    net.Listener
	canary    string // command line of a host process
	tmpCanary string // a file in the host's /tmp
	shmCanary string // a file in the host's /dev/shm
	tools     map[string]bool
}

// RunEscapes runs the escape suite against an isolating backend. Each
// case gets a fresh sandbox and workspace; the sandbox must keep the
// attempt in, failing with one of the refusal kinds the case accepts and
// leaving no trace on the host. The suite prints a summary of cases per
// area.
func RunEscapes(t *testing.T, newFn NewFunc) {
	host := prepareHost(t)
	probe, _ := newSandbox(t, newFn, nil)
	host.tools = map[string]bool{}
	for _, tool := range []string{"python3", "curl", "wget", "nc", "git", "setpriv", "unshare", "nsenter", "mount", "chroot", "getent", "mknod", "hostname", "date"} {
		res, _ := run(t, probe, sandbox.Cmd{Args: bash("command -v " + tool)})
		host.tools[tool] = res.ExitCode == 0
	}
	cases := escapeCases()
	var mu sync.Mutex
	areas := map[string]int{}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			for _, tool := range c.needs {
				if !host.tools[tool] {
					t.Skipf("SKIPPED ESCAPE CASE %s: %s is not installed in the sandbox; install it (see docs/sandbox.md) so this case runs", c.name, tool)
				}
			}
			e := *host
			var sibling sandbox.Sandbox
			sb, spec := newSandbox(t, newFn, func(s *sandbox.Spec) {
				e.spec, e.ws = s, s.Workspace
				if c.edit != nil {
					c.edit(s, &e)
				}
				if c.prepare != nil {
					c.prepare(t, &e)
				}
				if c.sibling {
					sib := *s
					sib.Protected = append([]string(nil), s.Protected...)
					sibling = newFn(t, &sib)
				}
			})
			if sibling != nil {
				if err := sibling.Close(); err != nil {
					t.Fatalf("closing the sibling sandbox: %v", err)
				}
			}
			e.sb = sb
			script := strings.ReplaceAll(c.script, "$HOSTPORT", fmt.Sprint(e.hostPort))
			script = strings.NewReplacer("$OUTSIDE", e.outside, "$ABSTRACT", e.abstract, "$CANARY", e.canary,
				"$TMPCANARY", e.tmpCanary, "$SHMCANARY", e.shmCanary, "$MOUNT", spec.MountPath).Replace(script)
			res, out := run(t, sb, sandbox.Cmd{Args: bash(script), Timeout: time.Minute, Limits: c.limits})
			t.Logf("result %+v, output:\n%s", res, out)
			if strings.Contains(out, "ESCAPED") {
				t.Fatalf("ESCAPE: %s (%s) succeeded:\n%s", c.name, c.area, out)
			}
			if !refused(c.want, res, out) {
				t.Errorf("%s: no accepted refusal (%v) in the result %+v, output:\n%s", c.name, c.want, res, out)
			}
			if c.check != nil {
				c.check(t, &e, res, out)
			}
			mu.Lock()
			areas[c.area]++
			mu.Unlock()
		})
	}
	t.Cleanup(func() {
		var b strings.Builder
		total := 0
		for _, a := range escapeAreas {
			fmt.Fprintf(&b, "  %-28s %d\n", a, areas[a])
			total += areas[a]
		}
		t.Logf("escape suite: %d of %d cases held (0 escapes), by area:\n%s", total, len(cases), b.String())
	})
}

// refused reports whether the result shows one of the accepted refusals.
func refused(want []string, res *sandbox.Result, out string) bool {
	for _, k := range want {
		switch k {
		case kindContained:
			return true
		case kindLimitHit:
			if res.Limit != "" {
				return true
			}
		default:
			if p := refusalPatterns[k]; p != nil && p.MatchString(out) {
				return true
			}
		}
	}
	return false
}

// prepareHost creates the host-side bait: a secret outside the workspace,
// a loopback listener, an abstract socket, a canary process, canary files
// in /tmp and /dev/shm, and secret environment variables.
func prepareHost(t *testing.T) *escapeEnv {
	t.Helper()
	e := &escapeEnv{outside: t.TempDir()}
	if err := os.WriteFile(filepath.Join(e.outside, "secret.txt"), []byte("HOST-SECRET-7788\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	e.hostPort, e.hostLn = ln.Addr().(*net.TCPAddr).Port, ln

	e.abstract = uniq(t, "keel-escape-abstract")
	al, err := net.Listen("unix", "@"+e.abstract)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { al.Close() })
	e.abstLn = al

	e.canary = uniq(t, "keel-host-canary")
	cmd := exec.Command("bash", "-c", "exec -a "+e.canary+" sleep 3600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })

	e.tmpCanary = filepath.Join(os.TempDir(), uniq(t, "keel-tmp-canary"))
	if err := os.WriteFile(e.tmpCanary, []byte("HOST-TMP\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(e.tmpCanary) })
	e.shmCanary = "/dev/shm/" + uniq(t, "keel-shm-canary")
	if err := os.WriteFile(e.shmCanary, []byte("HOST-SHM\n"), 0o644); err == nil {
		t.Cleanup(func() { os.Remove(e.shmCanary) })
	}
	t.Setenv("KEEL_ESCAPE_CANARY_SECRET", "HOST-ENV-SECRET-9911")
	return e
}

// noConnection fails if the bait listener has a connection waiting.
func noConnection(t *testing.T, ln net.Listener) {
	t.Helper()
	type deadliner interface{ SetDeadline(time.Time) error }
	if d, ok := ln.(deadliner); ok {
		d.SetDeadline(time.Now())
		defer d.SetDeadline(time.Time{})
	}
	if c, err := ln.Accept(); err == nil {
		c.Close()
		t.Errorf("ESCAPE: a connection from the sandbox reached the host listener %v", ln.Addr())
	}
}

// escapeAreas orders the summary.
var escapeAreas = []string{
	"host files", "host environment", "write outside", "links", "/proc and /sys",
	"devices", "ptrace", "mounts", "namespaces", "privileges", "kernel interfaces",
	"network", "protected paths", "host git", "resources", "orphans", "init",
}
