//go:build linux

package linux

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/keel-run/keel/sandbox"
)

// errNonPublic is returned by the default dialer for a name that resolves
// to an address the proxy never connects to.
var errNonPublic = errors.New("resolves to a non-public address")

// allowRule is one parsed allowlist entry.
type allowRule struct {
	text     string
	host     string // lower case, no trailing dot; for wildcards the suffix after "*."
	wildcard bool
	ports    []int
}

// parseAllow parses Network.Allow: "host" (ports 443 and 80), "host:port",
// and "*.example.com" (any subdomain, not example.com itself). IP
// addresses are refused.
func parseAllow(list []string) ([]allowRule, error) {
	var out []allowRule
	for _, entry := range list {
		e := strings.TrimSpace(entry)
		host, ports := e, []int{443, 80}
		if h, p, err := net.SplitHostPort(e); err == nil {
			n, err := strconv.Atoi(p)
			if err != nil || n < 1 || n > 65535 {
				return nil, fmt.Errorf("sandbox/linux: egress allowlist entry %q has a bad port", entry)
			}
			host, ports = h, []int{n}
		}
		host = strings.TrimSuffix(strings.ToLower(host), ".")
		r := allowRule{text: e, ports: ports}
		if rest, ok := strings.CutPrefix(host, "*."); ok {
			r.wildcard, host = true, rest
		}
		if host == "" || strings.ContainsAny(host, "/@ *") {
			return nil, fmt.Errorf("sandbox/linux: egress allowlist entry %q is not a host name", entry)
		}
		if numericHost(host) {
			return nil, fmt.Errorf("sandbox/linux: egress allowlist entry %q is an IP address; list host names (raw IP addresses are never allowed)", entry)
		}
		r.host = host
		out = append(out, r)
	}
	return out, nil
}

// numericHost reports whether h is an IP address in any notation a
// resolver might accept (dotted, decimal, hex, octal, IPv6).
func numericHost(h string) bool {
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

// match returns the rule allowing host:port, or nil.
func match(rules []allowRule, host string, port int) *allowRule {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	for i := range rules {
		r := &rules[i]
		ok := host == r.host
		if r.wildcard {
			ok = strings.HasSuffix(host, "."+r.host)
		}
		if !ok {
			continue
		}
		for _, p := range r.ports {
			if p == port {
				return r
			}
		}
	}
	return nil
}

// proxyEnv is the environment that points programs at the proxy.
func proxyEnv(port int) []string {
	u := "http://127.0.0.1:" + strconv.Itoa(port)
	return []string{
		"HTTP_PROXY=" + u, "HTTPS_PROXY=" + u, "ALL_PROXY=" + u,
		"http_proxy=" + u, "https_proxy=" + u, "all_proxy=" + u,
		"NO_PROXY=localhost,127.0.0.1,::1", "no_proxy=localhost,127.0.0.1,::1",
	}
}

// egressProxy is Keel's HTTP proxy for a sandbox. It runs in the Keel
// process, outside every namespace of the sandbox; its listening socket
// was created by the init in the sandbox's network namespace (so programs
// reach it at 127.0.0.1:port there) and handed out over the control
// socket. Nothing inside the sandbox relays traffic.
type egressProxy struct {
	ln       net.Listener
	port     int
	dial     func(ctx context.Context, network, addr string) (net.Conn, error)
	onEgress func(EgressDecision)
	log      *slog.Logger

	mu     sync.Mutex
	phase  string
	rules  []allowRule
	conns  map[net.Conn]string
	closed bool
	wg     sync.WaitGroup
}

// ensureProxy asks the init for the listener and starts serving it.
func (s *Sandbox) ensureProxy() error {
	s.proxyMu.Lock()
	defer s.proxyMu.Unlock()
	if s.proxy != nil {
		return nil
	}
	id, cl, err := s.register()
	if err != nil {
		return err
	}
	defer s.unregister(id)
	if err := s.ctl.Send(&msg{Op: opListen, ID: id}); err != nil {
		return err
	}
	var lm listenerMsg
	select {
	case lm = <-cl.listener:
	case <-s.dead:
		return s.deadError()
	case <-time.After(10 * time.Second):
		return errors.New("sandbox/linux: egress listener: no answer from init")
	}
	if lm.f == nil {
		return fmt.Errorf("sandbox/linux: egress listener: %s", lm.m.Message)
	}
	ln, err := net.FileListener(lm.f)
	lm.f.Close()
	if err != nil {
		return fmt.Errorf("sandbox/linux: egress listener: %w", err)
	}
	dial := s.opts.EgressDial
	if dial == nil {
		dial = publicDial
	}
	p := &egressProxy{ln: ln, port: lm.m.Port, dial: dial, onEgress: s.opts.OnEgress, log: s.log, conns: map[net.Conn]string{}}
	p.wg.Add(1)
	go p.serve()
	s.proxy = p
	return nil
}

// setPolicy switches the allowlist and closes connections opened under
// another phase's policy.
func (p *egressProxy) setPolicy(phase string, n sandbox.Network) {
	rules, _ := parseAllow(n.Allow)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.phase, p.rules = phase, rules
	for c, ph := range p.conns {
		if ph != phase {
			c.Close()
		}
	}
}

func (p *egressProxy) close() {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.ln.Close()
	p.wg.Wait()
}

func (p *egressProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.Close()
			return
		}
		p.conns[c] = p.phase
		p.wg.Add(1)
		p.mu.Unlock()
		go func() {
			defer p.wg.Done()
			defer func() {
				p.mu.Lock()
				delete(p.conns, c)
				p.mu.Unlock()
				c.Close()
			}()
			p.handle(c)
		}()
	}
}

func (p *egressProxy) report(d EgressDecision) {
	p.log.Info("sandbox egress", "host", d.Host, "port", d.Port, "allowed", d.Allowed, "reason", d.Reason)
	if p.onEgress != nil {
		p.onEgress(d)
	}
}

func refuse(c net.Conn, code int, why string) {
	body := "keel egress proxy: " + why + "\n"
	fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		code, http.StatusText(code), len(body), body)
}

// handle serves one client connection: one CONNECT tunnel, or one
// plain-HTTP request forwarded with "Connection: close".
func (p *egressProxy) handle(c net.Conn) {
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	br := bufio.NewReader(c)
	req, err := http.ReadRequest(br)
	if err != nil {
		refuse(c, http.StatusBadRequest, "malformed request")
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	p.mu.Lock()
	phase, rules := p.conns[c], p.rules
	if phase != p.phase {
		rules = nil // the policy changed since this connection arrived
	}
	p.mu.Unlock()

	d := EgressDecision{Phase: phase, Method: req.Method}
	var hostport string
	if req.Method == http.MethodConnect {
		hostport = req.Host
	} else {
		if !req.URL.IsAbs() || req.URL.Scheme != "http" {
			d.Host, d.Reason = req.Host, "not a proxy request (absolute http:// URL or CONNECT expected)"
			p.report(d)
			refuse(c, http.StatusBadRequest, d.Reason)
			return
		}
		hostport = req.URL.Host
		if req.URL.Port() == "" {
			hostport = net.JoinHostPort(req.URL.Hostname(), "80")
		}
	}
	host, portStr, err := net.SplitHostPort(hostport)
	port, perr := strconv.Atoi(portStr)
	if err != nil || perr != nil {
		d.Host, d.Reason = hostport, "destination must be host:port"
		p.report(d)
		refuse(c, http.StatusBadRequest, d.Reason)
		return
	}
	d.Host, d.Port = host, port
	switch rule := match(rules, host, port); {
	case numericHost(host):
		d.Reason = "raw IP addresses are not allowed"
	case rule == nil && len(rules) == 0:
		d.Reason = "no network access in phase " + phase
	case rule == nil:
		d.Reason = "not in the allowlist"
	default:
		d.Allowed, d.Reason = true, "allowed by "+rule.text
	}
	if !d.Allowed {
		p.report(d)
		refuse(c, http.StatusForbidden, fmt.Sprintf("%s:%d refused: %s", host, port, d.Reason))
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	up, err := p.dial(ctx, "tcp", net.JoinHostPort(host, portStr))
	cancel()
	if err != nil {
		if errors.Is(err, errNonPublic) {
			d.Allowed, d.Reason = false, err.Error()
			p.report(d)
			refuse(c, http.StatusForbidden, fmt.Sprintf("%s:%d refused: %s", host, port, d.Reason))
			return
		}
		d.Reason += "; connect failed: " + err.Error()
		p.report(d)
		refuse(c, http.StatusBadGateway, fmt.Sprintf("%s:%d: connect failed", host, port))
		return
	}
	defer up.Close()
	d.Addr = up.RemoteAddr().String()
	p.report(d)
	p.mu.Lock()
	if _, ok := p.conns[c]; ok {
		p.conns[up] = phase
	}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.conns, up)
		p.mu.Unlock()
	}()

	if req.Method == http.MethodConnect {
		if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
			return
		}
		if n := br.Buffered(); n > 0 {
			b, _ := br.Peek(n)
			if _, err := up.Write(b); err != nil {
				return
			}
			_, _ = br.Discard(n)
		}
		splice(c, up)
		return
	}
	req.RequestURI = ""
	req.Header.Del("Proxy-Connection")
	req.Header.Del("Proxy-Authorization")
	req.Close = true
	if err := req.Write(up); err != nil {
		return
	}
	_, _ = io.Copy(c, up)
}

// splice copies both ways until either side ends.
func splice(a, b net.Conn) {
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if tc, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go cp(a, b)
	go cp(b, a)
	<-done
	<-done
}

// publicDial resolves addr's host on the host and connects to the first
// address, refusing names that resolve to loopback, private, link-local,
// shared (CGNAT) or otherwise non-public addresses, so an allowed name
// cannot be pointed (by DNS) at the host or its network.
func publicDial(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	ips, err := net.DefaultResolver.LookupIPAddr(ctx, host)
	if err != nil {
		return nil, err
	}
	for _, ip := range ips {
		if !publicIP(ip.IP) {
			return nil, fmt.Errorf("%w (%s)", errNonPublic, ip.IP)
		}
	}
	var d net.Dialer
	var last error
	for _, ip := range ips {
		c, err := d.DialContext(ctx, network, net.JoinHostPort(ip.IP.String(), port))
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

var cgnat = &net.IPNet{IP: net.IPv4(100, 64, 0, 0), Mask: net.CIDRMask(10, 32)}

func publicIP(ip net.IP) bool {
	if ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() ||
		ip.IsUnspecified() || ip.IsMulticast() || ip.IsInterfaceLocalMulticast() {
		return false
	}
	if v4 := ip.To4(); v4 != nil {
		return v4[0] != 0 && !cgnat.Contains(v4) && !v4.Equal(net.IPv4bcast)
	}
	return true
}
