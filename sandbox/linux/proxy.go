//go:build linux

package linux

import (
	"bufio"
	"bytes"
	"context"
	"crypto/x509"
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

	"github.com/keel-run/keel/redact"
	"github.com/keel-run/keel/sandbox"
	"github.com/keel-run/keel/sandbox/egress"
)

// proxyEnv is the environment that points programs at the proxy.
// Loopback traffic stays in the sandbox (NO_PROXY) unless the allowlist
// names a loopback destination of the host: then it goes to the proxy
// too, which reaches only what the allowlist names.
func proxyEnv(port int, loopback bool) []string {
	u := "http://127.0.0.1:" + strconv.Itoa(port)
	noProxy := "localhost,127.0.0.1,::1"
	if loopback {
		noProxy = ""
	}
	return []string{
		"HTTP_PROXY=" + u, "HTTPS_PROXY=" + u, "ALL_PROXY=" + u,
		"http_proxy=" + u, "https_proxy=" + u, "all_proxy=" + u,
		"NO_PROXY=" + noProxy, "no_proxy=" + noProxy,
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
	// secrets are the values a plain-HTTP request may not carry
	// (names[i] names value i); nil: none.
	secrets *redact.Secrets
	names   []string
	// hostSecrets are the secrets the proxy puts in requests to their
	// hosts (nil: none); roots verifies those hosts (nil: the system's).
	hostSecrets *hostSecrets
	roots       *x509.CertPool
	log         *slog.Logger

	mu     sync.Mutex
	phase  string
	rules  *egress.List
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
		dial = egress.Dial
	}
	p := &egressProxy{ln: ln, port: lm.m.Port, dial: dial, onEgress: s.opts.OnEgress, log: s.log, conns: map[net.Conn]string{},
		hostSecrets: s.hostSecrets, roots: s.opts.EgressRoots}
	if len(s.opts.Secrets) > 0 {
		values := make([]string, len(s.opts.Secrets))
		for i, sec := range s.opts.Secrets {
			values[i] = sec.Value
			p.names = append(p.names, sec.Name)
		}
		p.secrets = redact.NewSecrets(values...)
	}
	p.wg.Add(1)
	go p.serve()
	s.proxy = p
	return nil
}

// setPolicy switches the allowlist and closes connections opened under
// another phase's policy.
func (p *egressProxy) setPolicy(phase string, n sandbox.Network) {
	rules := egress.MustParse(n.Allow)
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
	switch rule := rules.Match(host, port); {
	case rule == nil && egress.NumericHost(host):
		d.Reason = "raw IP addresses are allowed only when the allowlist names them"
	case rule == nil && rules.Empty():
		d.Reason = "no network access in phase " + phase
	case rule == nil:
		d.Reason = "not in the allowlist"
	default:
		d.Allowed, d.Reason = true, "allowed by "+rule.Text
	}
	if !d.Allowed {
		p.report(d)
		refuse(c, http.StatusForbidden, fmt.Sprintf("%s:%d refused: %s", host, port, d.Reason))
		return
	}
	secrets := p.hostSecrets.forHost(host, port)
	if req.Method == http.MethodConnect && len(secrets) > 0 {
		p.intercept(c, br, d, secrets)
		return
	}
	if req.Method != http.MethodConnect && p.secrets != nil {
		if code, why := p.clearText(req); why != "" {
			d.Allowed, d.Reason, d.Path = false, why, req.URL.RequestURI()
			p.report(d)
			refuse(c, code, fmt.Sprintf("%s:%d refused: %s", host, port, why))
			return
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	up, err := p.dial(ctx, "tcp", net.JoinHostPort(host, portStr))
	cancel()
	if err != nil {
		if errors.Is(err, egress.ErrNonPublic) || errors.Is(err, egress.ErrNotAllowed) {
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
	if req.Method == http.MethodConnect {
		p.report(d)
	}
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
		if p.secrets != nil && !p.tlsFirst(c, br, d) {
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
	// What left, for the journal: method, path and query, and the bytes
	// of the body and of the response, reported when the request ended.
	d.Path = req.URL.RequestURI()
	body := &countReader{r: req.Body}
	if req.Body != nil {
		req.Body = body
	}
	if len(secrets) > 0 {
		if a, ok := up.RemoteAddr().(*net.TCPAddr); ok && a.IP.IsLoopback() {
			defer func() { p.report(d) }()
			p.substitutePlain(c, up, req, &d, secrets)
			return
		}
		// A secret never crosses a network in clear text: the
		// placeholders go out as they are.
		var head strings.Builder
		_ = req.Header.Write(&head)
		if strings.Contains(req.URL.String()+head.String(), PlaceholderPrefix) {
			d.Reason += "; plain HTTP off this machine: placeholders left in place (use HTTPS)"
		}
	}
	defer func() { d.BytesOut = body.n; p.report(d) }()
	if err := req.Write(up); err != nil {
		return
	}
	d.BytesIn, _ = io.Copy(c, up)
}

// tlsFirst reports whether the client of a CONNECT tunnel starts it with
// a TLS ClientHello. A sandbox that holds secrets tunnels only TLS: a
// tunnel is otherwise a way around clearText (curl -p sends a plain-HTTP
// request through one), so one that starts otherwise, or says nothing
// for tunnelHello, is closed and reported.
func (p *egressProxy) tlsFirst(c net.Conn, br *bufio.Reader, d EgressDecision) bool {
	_ = c.SetReadDeadline(time.Now().Add(tunnelHello))
	b, err := br.Peek(6)
	_ = c.SetReadDeadline(time.Time{})
	// A handshake record (22) of TLS 1.x whose first message is a
	// ClientHello (1).
	if err == nil && b[0] == 22 && b[1] == 3 && b[2] <= 4 && b[5] == 1 {
		return true
	}
	d.Allowed = false
	d.Reason = "the sandbox holds secrets, and this tunnel does not start with TLS: only HTTPS may cross it (a plain HTTP request through a tunnel would carry them in clear text)"
	p.report(d)
	return false
}

// tunnelHello bounds the wait for a tunnel's first bytes when the
// sandbox holds secrets.
const tunnelHello = 10 * time.Second

// maxClearBody bounds the body of a plain-HTTP request the proxy reads
// to look for the sandbox's secrets in it; a larger one is refused.
const maxClearBody = 8 << 20

// clearText looks for the sandbox's secrets in a plain-HTTP request (its
// URL, headers and body, which it reads and puts back): a request that
// carries one is refused with code and a reason, for nothing sent in
// clear text may hold a secret.
func (p *egressProxy) clearText(req *http.Request) (code int, why string) {
	var b strings.Builder
	b.WriteString(req.URL.String())
	b.WriteByte('\n')
	_ = req.Header.Write(&b)
	if req.Body != nil && req.Body != http.NoBody {
		body, err := io.ReadAll(io.LimitReader(req.Body, maxClearBody+1))
		if err != nil {
			return http.StatusBadRequest, "cannot read the request's body: " + err.Error()
		}
		if len(body) > maxClearBody {
			return http.StatusRequestEntityTooLarge, fmt.Sprintf("a plain-HTTP body over %d MiB cannot be checked for the sandbox's secrets (use HTTPS)", maxClearBody>>20)
		}
		b.Write(body)
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	ms := p.secrets.Scan(b.String())
	if len(ms) == 0 {
		return 0, ""
	}
	var names []string
	for _, m := range ms {
		names = append(names, p.names[m.Value]+" ("+m.Form+")")
	}
	return http.StatusForbidden, "the request carries secret " + strings.Join(names, ", ") + " in clear text (plain HTTP); send it over HTTPS"
}

// countReader counts the bytes read through it.
type countReader struct {
	r io.ReadCloser
	n int64
}

func (c *countReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n += int64(n)
	return n, err
}

func (c *countReader) Close() error { return c.r.Close() }

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
