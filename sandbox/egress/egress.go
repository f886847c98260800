// Package egress decides where a run's network traffic may go. It parses
// a run's allowlist ([sandbox.Network].Allow) and answers, for the egress
// proxy of the Linux sandbox and for the tools that reach the network from
// Keel's own process (fetch_url, http_request, MCP servers over HTTP,
// OpenAPI connectors), whether a destination is allowed, and it connects
// only to the addresses an allowed destination may have.
//
// An entry is a host name ("pypi.org", ports 443 and 80), a name with a
// port ("pypi.org:8443"), a wildcard ("*.example.com": any subdomain, not
// the domain itself), "localhost", or an IP address ("127.0.0.1:8080",
// "[::1]:5432", "10.0.0.7"). A name is reached only at public addresses:
// one that resolves to a loopback, private, link-local, shared (CGNAT) or
// otherwise non-public address is refused, so no allowed name can be
// pointed by its DNS at the host or its network. A person who wants a
// service of their own on such an address names it explicitly: as
// "localhost" (always the loopback interface, never resolved) or as the
// address itself. A request to a raw IP address is allowed only when an
// entry names that very address; other numeric spellings ("127.1",
// "2130706433", "0x7f.1") are never allowed.
package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// ErrNotAllowed is wrapped by the errors of [List.CheckURL] and of a
// dialer that refuses a destination.
var ErrNotAllowed = errors.New("egress: destination not allowed")

// ErrNonPublic is wrapped by a dialer's error for a name that resolves to
// an address Keel never connects to by name.
var ErrNonPublic = errors.New("resolves to a non-public address")

// Rule is one parsed allowlist entry.
type Rule struct {
	// Text is the entry as written.
	Text string
	// Host is the name in lower case without a trailing dot (for a
	// wildcard, the domain after "*."), or an address's canonical form.
	Host     string
	Wildcard bool
	// Ports are the ports the entry allows (443 and 80 when it names
	// none).
	Ports []int
	// Addr is set when the entry is an IP address.
	Addr netip.Addr
}

// Explicit reports whether r names a destination that no name may
// resolve to: "localhost", or an IP address.
func (r *Rule) Explicit() bool { return r.Addr.IsValid() || r.Host == "localhost" }

// List is a parsed allowlist. The zero value (and nil) allows nothing.
type List struct {
	rules []Rule
}

// Parse parses allowlist entries (see the package documentation). It
// returns an error naming the first bad entry.
func Parse(entries []string) (*List, error) {
	l := &List{}
	for _, entry := range entries {
		e := strings.TrimSpace(entry)
		host, ports := e, []int{443, 80}
		if h, p, err := net.SplitHostPort(e); err == nil {
			n, err := strconv.Atoi(p)
			if err != nil || n < 1 || n > 65535 {
				return nil, fmt.Errorf("egress allowlist entry %q has a bad port", entry)
			}
			host, ports = h, []int{n}
		}
		r := Rule{Text: e, Ports: ports}
		if a, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
			if a.Zone() != "" {
				return nil, fmt.Errorf("egress allowlist entry %q names an address with a zone", entry)
			}
			r.Addr = a.Unmap()
			r.Host = r.Addr.String()
			l.rules = append(l.rules, r)
			continue
		}
		host = strings.TrimSuffix(strings.ToLower(host), ".")
		if rest, ok := strings.CutPrefix(host, "*."); ok {
			r.Wildcard, host = true, rest
		}
		if host == "" || strings.ContainsAny(host, "/@ *[]") {
			return nil, fmt.Errorf("egress allowlist entry %q is not a host name", entry)
		}
		if NumericHost(host) {
			return nil, fmt.Errorf("egress allowlist entry %q is an IP address in a notation other than the usual one (write 127.0.0.1 or [::1])", entry)
		}
		r.Host = host
		l.rules = append(l.rules, r)
	}
	return l, nil
}

// MustParse is [Parse] for entries already checked; a bad entry allows
// nothing.
func MustParse(entries []string) *List {
	l, err := Parse(entries)
	if err != nil {
		return &List{}
	}
	return l
}

// Empty reports whether l allows nothing.
func (l *List) Empty() bool { return l == nil || len(l.rules) == 0 }

// Rules returns the parsed entries, in order.
func (l *List) Rules() []Rule {
	if l == nil {
		return nil
	}
	return l.rules
}

// Loopback reports whether l names a loopback destination explicitly
// ("localhost", 127.0.0.1, ::1): programs in a sandbox must then send
// loopback traffic to the proxy to reach it.
func (l *List) Loopback() bool {
	for i := range l.Rules() {
		r := &l.rules[i]
		if r.Host == "localhost" || r.Addr.IsLoopback() {
			return true
		}
	}
	return false
}

// Match returns the rule allowing host:port, or nil. A numeric host
// matches only a rule naming the same address, written the usual way.
func (l *List) Match(host string, port int) *Rule {
	if l == nil {
		return nil
	}
	host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	addr, addrErr := netip.ParseAddr(host)
	numeric := NumericHost(host)
	for i := range l.rules {
		r := &l.rules[i]
		switch {
		case r.Addr.IsValid():
			if addrErr != nil || addr.Zone() != "" || addr.Unmap() != r.Addr {
				continue
			}
		case numeric:
			continue
		case r.Wildcard:
			if !strings.HasSuffix(host, "."+r.Host) {
				continue
			}
		case host != r.Host:
			continue
		}
		for _, p := range r.Ports {
			if p == port {
				return r
			}
		}
	}
	return nil
}

// CheckURL checks u against l: the scheme must be http or https and
// host:port match an entry (the port 80 or 443 by scheme when u names
// none). It returns nil or an error wrapping [ErrNotAllowed] that says
// why.
func (l *List) CheckURL(u *url.URL) error {
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("%w: scheme %q (only http and https)", ErrNotAllowed, u.Scheme)
	}
	host := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	if host == "" {
		return fmt.Errorf("%w: the URL has no host", ErrNotAllowed)
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	if l.Empty() {
		return fmt.Errorf("%w: network access is off for this run", ErrNotAllowed)
	}
	n, err := strconv.Atoi(port)
	if err == nil && l.Match(host, n) != nil {
		return nil
	}
	if NumericHost(host) {
		return fmt.Errorf("%w: %s is a raw IP address that this run's network allowlist does not name (%s); use a host name from the allowlist", ErrNotAllowed, host, l.text())
	}
	return fmt.Errorf("%w: %s is not in this run's network allowlist (%s)", ErrNotAllowed, net.JoinHostPort(host, port), l.text())
}

func (l *List) text() string {
	var s []string
	for _, r := range l.Rules() {
		s = append(s, r.Text)
	}
	return strings.Join(s, ", ")
}

// NumericHost reports whether h is an IP address in any notation a
// resolver might accept (dotted, decimal, hex, octal, IPv6).
func NumericHost(h string) bool {
	h = strings.Trim(h, "[]")
	if net.ParseIP(h) != nil || strings.Contains(h, ":") {
		return true
	}
	labels := strings.Split(h, ".")
	last := labels[len(labels)-1]
	if last == "" {
		return false
	}
	// A name whose last label is numeric (or 0x...) is an address to
	// inet_aton, never a DNS name (top-level domains are alphabetic).
	if strings.HasPrefix(last, "0x") || strings.HasPrefix(last, "0X") {
		return true
	}
	for _, c := range last {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

var cgnat = netip.MustParsePrefix("100.64.0.0/10")

// Public reports whether ip is a public unicast address: not loopback,
// private, link-local, shared (CGNAT), unspecified, multicast or
// broadcast.
func Public(ip net.IP) bool {
	if ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() ||
		ip.IsUnspecified() || ip.IsMulticast() || ip.IsInterfaceLocalMulticast() {
		return false
	}
	if v4 := ip.To4(); v4 != nil {
		a, _ := netip.AddrFromSlice(v4)
		return v4[0] != 0 && !cgnat.Contains(a) && !v4.Equal(net.IPv4bcast)
	}
	return true
}

// Dialer connects to destinations an allowlist allowed. The zero value
// uses the host's resolver.
type Dialer struct {
	// Resolver resolves names; nil means [net.DefaultResolver].
	Resolver *net.Resolver
}

// Dial connects with the zero [Dialer].
func Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	return (&Dialer{}).Dial(ctx, network, addr)
}

// Transport returns the zero [Dialer]'s transport.
func Transport() *http.Transport { return (&Dialer{}).Transport() }

// Dial connects to host:port, which the caller's allowlist allowed: an IP
// address as it is, "localhost" on the loopback interface (never
// resolved), and any other name at its addresses, all of which must be
// public (else an error wrapping [ErrNonPublic]).
func (d *Dialer) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	var nd net.Dialer
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if a, err := netip.ParseAddr(host); err == nil {
		return nd.DialContext(ctx, network, net.JoinHostPort(a.String(), port))
	}
	var ips []net.IP
	if host == "localhost" {
		ips = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	} else {
		if NumericHost(host) {
			return nil, fmt.Errorf("%w: %s is not an address in the usual notation", ErrNotAllowed, host)
		}
		r := d.Resolver
		if r == nil {
			r = net.DefaultResolver
		}
		res, err := r.LookupIPAddr(ctx, host)
		if err != nil {
			return nil, err
		}
		for _, ip := range res {
			if !Public(ip.IP) {
				return nil, fmt.Errorf("%s %w (%s); name the address in the allowlist to reach it", host, ErrNonPublic, ip.IP)
			}
			ips = append(ips, ip.IP)
		}
	}
	var last error
	for _, ip := range ips {
		c, err := nd.DialContext(ctx, network, net.JoinHostPort(ip.String(), port))
		if err == nil {
			return c, nil
		}
		last = err
	}
	if last == nil {
		last = fmt.Errorf("no address for %s", host)
	}
	return nil, last
}

// Transport returns an HTTP transport for a run's requests from Keel's
// own process: no proxy from the environment, d's Dial as its dialer
// (check the URL against the allowlist with [List.CheckURL] first, and
// every redirect), and dial, TLS and header timeouts.
func (d *Dialer) Transport() *http.Transport {
	return &http.Transport{
		Proxy: nil, // never from the environment
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			return d.Dial(ctx, network, addr)
		},
		ForceAttemptHTTP2:     true,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: 20 * time.Second,
		MaxIdleConns:          8,
		IdleConnTimeout:       30 * time.Second,
	}
}
