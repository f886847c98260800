package linux

import (
	"context"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"sort"
	"strings"
	"time"
)

// Options configures a [Sandbox]. The zero value is valid.
type Options struct {
	// Logger receives diagnostics; nil discards them.
	Logger *slog.Logger
	// OnEgress is called for every connection the egress proxy allows or
	// refuses, so the runtime can journal it. It is called from the
	// proxy's goroutines and must be safe for concurrent use; nil
	// ignores decisions.
	OnEgress func(EgressDecision)
	// OnQuarantine is called for every path the git guard moves out of
	// the way (after a command, at Close, or at New for what a sandbox
	// that died without closing left), so the runtime can journal it.
	// It may be called concurrently; nil ignores them (they are still
	// logged and, after a command, written to its output).
	OnQuarantine func(Quarantine)
	// Secrets are the values the sandbox holds that must never leave it
	// in clear text: the egress proxy refuses a plain-HTTP request whose
	// URL, headers or body carries one of them (in any form
	// redact.Secrets.Scan knows), before connecting. HTTPS tunnels are
	// opaque to it.
	Secrets []Secret
	// HostSecrets are secrets the sandbox never holds: its environment
	// has a placeholder (PlaceholderPrefix and 32 random hex digits,
	// drawn anew by each sandbox) under each one's name, and the egress
	// proxy puts the value in place of the placeholder only in requests
	// to the secret's host: in the path, query and headers, and in the
	// body only for a secret whose Body is set (a request whose body
	// holds a placeholder of another is refused, see [HostSecret]). For
	// HTTPS to such a host the proxy ends TLS itself, with a certificate
	// of a CA the sandbox makes for itself (its key never leaves this
	// process; it may sign only for these hosts), which the sandbox's
	// programs trust through SSL_CERT_FILE and its kin, and connects on
	// with TLS verified against EgressRoots. Plain HTTP gets the value
	// only when the destination is on the machine's loopback. Responses
	// are stripped of the value. Tunnels to other hosts stay opaque.
	HostSecrets []HostSecret
	// EgressRoots verifies the servers of HostSecrets' hosts; nil means
	// the system's roots. Tests use it for a local TLS server.
	EgressRoots *x509.CertPool
	// EgressDial connects the proxy to an allowed destination; nil means
	// a dialer that resolves the name on the host and refuses loopback,
	// private, link-local and other non-public addresses. Tests use it to
	// point allowed names at local servers.
	EgressDial func(ctx context.Context, network, addr string) (net.Conn, error)
	// UID is the host user id the sandbox's root runs as when Keel runs
	// as root; 0 means [DefaultUID]. The workspace is mounted with an
	// ID mapping, so files keep their owner on the host. When Keel is not
	// root, the sandbox's root is the invoking user.
	UID int
	// ReadOnlyPaths are extra host paths (files or directories) visible
	// read-only at the same path inside, beyond the system directories.
	ReadOnlyPaths []string
	// StateDir, if set, is a host directory outside the workspace where
	// the sandbox keeps its own state (the git guard's start state), so
	// that nothing of Keel's is in the workspace; "" keeps it in the
	// workspace's .keel/sandbox.
	StateDir string
	// TmpSize bounds each private tmpfs (/tmp, /var/tmp, /dev/shm, HOME)
	// in bytes; 0 means 1 GiB.
	TmpSize int64
	// Hostname is the sandbox's host name; "" means "keel".
	Hostname string
	// NoCgroups disables cgroups even where the machine has them: limits
	// fall back to rlimits and process trees are tracked by session.
	// For tests of the fallback and for hosts whose cgroups Keel must not
	// touch.
	NoCgroups bool
	// NoLandlock and NoSeccomp disable those layers (reported in
	// [Mechanisms]); for diagnosing a program the filters break.
	NoLandlock bool
	NoSeccomp  bool
	// GuardInterval is how often the git guard checks the workspace while
	// a command runs (a long build, the python tool's kernel), on top of
	// the check after every command and at Close; 0 means
	// [DefaultGuardInterval], a negative value turns the periodic check
	// off. The interval stretches to 20 times the duration of the last
	// check, so the periodic check costs at most 5 % of one CPU however
	// large the workspace. What it finds is journaled through
	// OnQuarantine at once and written to the output of the next
	// command that ends.
	GuardInterval time.Duration
}

// DefaultGuardInterval is [Options].GuardInterval's default.
const DefaultGuardInterval = time.Second

// DefaultUID is the host uid of the sandbox's root when Keel runs as
// root: a high id that owns no file on the host.
const DefaultUID = 2000000000

// Home is HOME inside the sandbox: a private, empty, writable tmpfs.
const Home = "/root"

// Mechanisms says how a [Sandbox] isolates on this machine, so the CLI
// can print it and tests can check it. Every field is a short phrase;
// nothing here is silent: a layer that could not be applied says why.
type Mechanisms struct {
	// Namespaces lists the namespaces every command runs in.
	Namespaces []string `json:"namespaces"`
	// Identity says which host user the sandbox's root is.
	Identity string `json:"identity"`
	// Limits maps each limit ("memory", "processes", "cpu_share",
	// "cpu_time", "file_size", "open_files", "output") to what enforces
	// it: "cgroup v1", "cgroup v2", "rlimit", "keel" (counted by Keel) or
	// "none: <reason>".
	Limits map[string]string `json:"limits"`
	// Tracking is how a command's process tree is found and killed:
	// "cgroup v2", "cgroup v1 freezer", "cgroup v1 pids", or "session"
	// (the init kills the command's session; a process that starts its
	// own session escapes until the sandbox closes).
	Tracking string `json:"tracking"`
	// Seccomp is "on" with the count of refused system calls, or why not.
	Seccomp string `json:"seccomp"`
	// Landlock is "ABI n" or why it is missing.
	Landlock string `json:"landlock"`
	// NoNewPrivs is true when commands run with no_new_privs.
	NoNewPrivs bool `json:"no_new_privs"`
	// NestedNamespaces is "blocked" when nothing inside can create a
	// namespace, or why not.
	NestedNamespaces string `json:"nested_namespaces"`
	// Network is "none" or the egress allowlist served by the proxy.
	Network string `json:"network"`
	// Warnings lists anything weaker than the defaults.
	Warnings []string `json:"warnings,omitempty"`
}

// String renders m on a few lines, for `keel` to print at the start of a
// run.
func (m Mechanisms) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "namespaces: %s\n", strings.Join(m.Namespaces, ", "))
	fmt.Fprintf(&b, "identity: %s\n", m.Identity)
	keys := make([]string, 0, len(m.Limits))
	for k := range m.Limits {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var lims []string
	for _, k := range keys {
		lims = append(lims, k+"="+m.Limits[k])
	}
	fmt.Fprintf(&b, "limits: %s\n", strings.Join(lims, ", "))
	fmt.Fprintf(&b, "process tracking: %s\n", m.Tracking)
	fmt.Fprintf(&b, "seccomp: %s; landlock: %s; no_new_privs: %v; nested namespaces: %s\n", m.Seccomp, m.Landlock, m.NoNewPrivs, m.NestedNamespaces)
	fmt.Fprintf(&b, "network: %s", m.Network)
	for _, w := range m.Warnings {
		fmt.Fprintf(&b, "\nwarning: %s", w)
	}
	return b.String()
}

// Secret is a named secret value of the sandbox (see Options.Secrets).
type Secret struct{ Name, Value string }

// HostSecret is a secret for one host (see Options.HostSecrets): Name is
// the variable of the sandbox's environment that holds its placeholder,
// Host the destination it is for, written as an allowlist entry
// ("api.example.com", "api.example.com:8443", "*.example.com",
// "127.0.0.1:8443"). The run's allowlist must allow the host too.
//
// Body lets the proxy put the value in request bodies too: text bodies
// (JSON, forms, multipart forms, XML, text/*, or none named and valid
// UTF-8) of at most [MaxSubstitutedBody] bytes, not compressed. A body
// could store the value at the host where others read it (a comment, a
// file), so it is a choice of the person who gives the secret. Without
// it, and for a body Keel cannot put the value in, a request to the
// host whose body holds the placeholder is refused with a reason the
// sandbox's program receives (never sent with the placeholder left in).
type HostSecret struct {
	Name, Value, Host string
	Body              bool
}

// EgressDecision is one decision of the egress proxy, for the journal.
type EgressDecision struct {
	// Phase is "agent" or "setup" (see [Sandbox.Setup]).
	Phase string `json:"phase"`
	// Method is "CONNECT" for a tunnel (HTTPS and anything else), or the
	// method of a plain-HTTP request.
	Method string `json:"method"`
	// Host and Port are the destination the sandboxed program asked for.
	Host string `json:"host"`
	Port int    `json:"port"`
	// Allowed says whether the proxy connected it.
	Allowed bool `json:"allowed"`
	// Reason says which rule allowed it, or why it was refused.
	Reason string `json:"reason"`
	// Addr is the address connected to, when allowed.
	Addr string `json:"addr,omitempty"`
	// Path is the path and query of a plain-HTTP request (as sent: the
	// receiver of OnEgress redacts it before keeping it); BytesOut and
	// BytesIn count its body and the response's bytes. A plain-HTTP
	// request that was forwarded is reported once it ended, with these
	// set; a CONNECT tunnel is reported when it is opened (its bytes are
	// opaque).
	Path     string `json:"path,omitempty"`
	BytesOut int64  `json:"bytes_out,omitempty"`
	BytesIn  int64  `json:"bytes_in,omitempty"`
	// Substituted names (", " between) the host secrets whose values the proxy put in
	// the request in place of their placeholders (never the values). A
	// request inside a tunnel the proxy opened for host secrets is
	// reported like a plain-HTTP one (method, path, bytes).
	Substituted string `json:"substituted,omitempty"`
}
