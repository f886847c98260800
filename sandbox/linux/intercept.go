//go:build linux

package linux

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/keel-run/keel/sandbox/egress"
)

// intercept serves a CONNECT tunnel to a host some of the sandbox's
// host secrets are for: the proxy ends the sandbox's TLS with a
// certificate of the sandbox's own CA, puts the secrets' values in place
// of their placeholders in each request, sends it on over a TLS
// connection it verifies against the system's roots (or
// Options.EgressRoots), and strips the values from the response. Each
// request is reported, with the names of the secrets it carried.
func (p *egressProxy) intercept(c net.Conn, br *bufio.Reader, d EgressDecision, secrets []hostSecret) {
	hostport := net.JoinHostPort(d.Host, strconv.Itoa(d.Port))
	var names []string
	for _, s := range secrets {
		names = append(names, s.Name)
	}
	allowedBy := d.Reason
	d.Reason += "; TLS opened by the proxy for secret " + strings.Join(names, ", ")
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	p.report(d)
	leaf, err := p.hostSecrets.ca.leaf(d.Host)
	if err != nil {
		p.log.Warn("sandbox egress: certificate", "host", d.Host, "err", err)
		return
	}
	tc := tls.Server(&bufConn{Conn: c, r: br}, &tls.Config{
		Certificates: []tls.Certificate{*leaf},
		NextProtos:   []string{"http/1.1"},
		MinVersion:   tls.VersionTLS12,
	})
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if err := tc.Handshake(); err != nil {
		return
	}
	_ = c.SetDeadline(time.Time{})

	phase := d.Phase
	var upMu sync.Mutex
	ups := map[net.Conn]bool{}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			up, err := p.dial(ctx, "tcp", hostport)
			if err != nil {
				return nil, err
			}
			p.mu.Lock()
			if _, ok := p.conns[c]; ok {
				p.conns[up] = phase
			}
			p.mu.Unlock()
			upMu.Lock()
			ups[up] = true
			upMu.Unlock()
			return up, nil
		},
		TLSClientConfig:     &tls.Config{ServerName: d.Host, RootCAs: p.roots, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout: 30 * time.Second,
		MaxIdleConnsPerHost: 1,
	}
	defer func() {
		tr.CloseIdleConnections()
		upMu.Lock()
		defer upMu.Unlock()
		p.mu.Lock()
		defer p.mu.Unlock()
		for up := range ups {
			up.Close()
			delete(p.conns, up)
		}
	}()
	type subKey struct{}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host = "https", hostport
			pr.Out.Host = pr.In.Host
			// Responses are read in clear (the transport asks for gzip and
			// decompresses it itself), whole, so the values can be
			// stripped.
			prepareSecretRequest(pr.Out.Header)
		},
		Transport: no1xxHeaders{tr},
		ModifyResponse: func(resp *http.Response) error {
			if sub, ok := resp.Request.Context().Value(subKey{}).(*substitution); ok {
				return sub.strip(resp)
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			code := http.StatusBadGateway
			if errors.Is(err, egress.ErrNonPublic) || errors.Is(err, egress.ErrNotAllowed) {
				code = http.StatusForbidden
			}
			if br, ok := asBodyRefusal(err); ok {
				// A placeholder beyond MaxSubstitutedBody: the host got
				// an incomplete body.
				if rd, ok := r.Context().Value(decisionKey{}).(*EgressDecision); ok {
					rd.Allowed, rd.Reason = false, "refused (body cut off): "+br.why
				}
				http.Error(w, "keel egress proxy: "+br.why, br.code)
				return
			}
			// The error may quote the host's answer: the sandbox gets what
			// failed in the proxy's words, the record the details with
			// the values hidden.
			if rd, ok := r.Context().Value(decisionKey{}).(*EgressDecision); ok {
				rd.Allowed = code != http.StatusForbidden
				rd.Reason += "; " + hideSecrets(err.Error(), secrets)
			}
			http.Error(w, "keel egress proxy: "+hostport+": "+upstreamFailure(err), code)
		},
		ErrorLog: log.New(io.Discard, "", 0),
	}
	srv := &http.Server{
		ReadHeaderTimeout: 30 * time.Second,
		ErrorLog:          log.New(io.Discard, "", 0),
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			rd := d
			rd.Method, rd.Path, rd.Reason = r.Method, r.URL.RequestURI(), allowedBy
			if h := hostOnly(r.Host); !strings.EqualFold(h, d.Host) {
				rd.Allowed, rd.Reason = false, fmt.Sprintf("%s (%s, tunnel to %s)", errMisdirected, r.Host, d.Host)
				p.report(rd)
				http.Error(w, "keel egress proxy: "+rd.Reason, http.StatusMisdirectedRequest)
				return
			}
			sub := substitute(r, secrets)
			if err := substituteBody(r, secrets, sub); err != nil {
				br, _ := asBodyRefusal(err)
				rd.Allowed, rd.Reason = false, "refused: "+br.why
				p.report(rd)
				http.Error(w, "keel egress proxy: "+br.why, br.code)
				return
			}
			rd.Substituted = strings.Join(sub.names, ", ")
			body := &countReader{r: r.Body}
			r.Body = body
			cw := &countWriter{ResponseWriter: w}
			ctx := context.WithValue(context.WithValue(r.Context(), subKey{}, sub), decisionKey{}, &rd)
			rp.ServeHTTP(cw, r.WithContext(ctx))
			rd.BytesOut, rd.BytesIn = body.n, cw.n
			p.report(rd)
		}),
	}
	ln := &oneConnListener{c: &closeNotifyConn{Conn: tc, done: make(chan struct{})}}
	_ = srv.Serve(ln)
}

type decisionKey struct{}

// hostOnly is the host of a Host header, without its port.
func hostOnly(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		return strings.Trim(host, "[]")
	}
	return strings.Trim(h, "[]")
}

// substitutePlain serves a plain-HTTP request to a host secrets are for,
// on up: the values replace the placeholders in the request, and the
// response is stripped of them. Only a destination on the machine's
// loopback gets the values (a secret never crosses a network in clear
// text); the caller checked that.
func (p *egressProxy) substitutePlain(c net.Conn, up net.Conn, req *http.Request, d *EgressDecision, secrets []hostSecret) {
	if h := hostOnly(req.Host); req.Host != "" && !strings.EqualFold(h, d.Host) {
		d.Allowed, d.Reason = false, fmt.Sprintf("%s (%s, request to %s)", errMisdirected, req.Host, d.Host)
		refuse(c, http.StatusMisdirectedRequest, d.Reason)
		return
	}
	prepareSecretRequest(req.Header)
	if strings.EqualFold(req.Header.Get("Expect"), "100-continue") {
		// The body is read here, whole when it is short: ask for it now
		// rather than after the client's wait.
		req.Header.Del("Expect")
		if _, err := io.WriteString(c, "HTTP/1.1 100 Continue\r\n\r\n"); err != nil {
			return
		}
	}
	sub := substitute(req, secrets)
	if err := substituteBody(req, secrets, sub); err != nil {
		br, _ := asBodyRefusal(err)
		d.Allowed, d.Reason = false, "refused: "+br.why
		refuse(c, br.code, br.why)
		return
	}
	d.Substituted = strings.Join(sub.names, ", ")
	body := &countReader{r: req.Body}
	if req.Body != nil {
		req.Body = body
	}
	defer func() { d.BytesOut = body.n }()
	if err := req.Write(up); err != nil {
		if br, ok := asBodyRefusal(err); ok {
			d.Allowed, d.Reason = false, "refused (body cut off): "+br.why
			refuse(c, br.code, br.why)
		}
		return
	}
	ur := bufio.NewReader(up)
	var resp *http.Response
	for n := 0; ; n++ {
		r, err := http.ReadResponse(ur, req)
		if err != nil {
			// The error may quote the host's answer (see upstreamFailure).
			d.Reason += "; bad response: " + hideSecrets(err.Error(), secrets)
			refuse(c, http.StatusBadGateway, "bad response: "+upstreamFailure(err))
			return
		}
		// 1xx answers (103 Early Hints) stay here, headers and all, as
		// on the intercepted path they reach the sandbox without them.
		if r.StatusCode < 100 || r.StatusCode > 199 || r.StatusCode == http.StatusSwitchingProtocols {
			resp = r
			break
		}
		if n == 5 {
			refuse(c, http.StatusBadGateway, "bad response: too many 1xx answers")
			return
		}
	}
	if err := sub.strip(resp); err != nil {
		d.Reason += "; " + err.Error()
		refuse(c, http.StatusBadGateway, err.Error())
		return
	}
	defer resp.Body.Close()
	resp.Close = true
	cw := &countConnWriter{w: c}
	_ = resp.Write(cw)
	d.BytesIn = cw.n
}

// bufConn is a connection whose first bytes were read into r.
type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (b *bufConn) Read(p []byte) (int, error) { return b.r.Read(p) }

// oneConnListener hands out one connection, then waits for it to close.
type oneConnListener struct {
	c    *closeNotifyConn
	once sync.Once
}

func (l *oneConnListener) Accept() (net.Conn, error) {
	var first bool
	l.once.Do(func() { first = true })
	if first {
		return l.c, nil
	}
	<-l.c.done
	return nil, net.ErrClosed
}

func (l *oneConnListener) Close() error   { return nil }
func (l *oneConnListener) Addr() net.Addr { return l.c.LocalAddr() }

type closeNotifyConn struct {
	net.Conn
	once sync.Once
	done chan struct{}
}

func (c *closeNotifyConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { close(c.done) })
	return err
}

// countWriter counts the bytes of a response's body.
type countWriter struct {
	http.ResponseWriter
	n int64
}

func (w *countWriter) Write(b []byte) (int, error) {
	n, err := w.ResponseWriter.Write(b)
	w.n += int64(n)
	return n, err
}

// Flush lets a streamed response through as it comes.
func (w *countWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap gives http.ResponseController the writer underneath (for a
// protocol upgrade).
func (w *countWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

type countConnWriter struct {
	w io.Writer
	n int64
}

func (w *countConnWriter) Write(b []byte) (int, error) {
	n, err := w.w.Write(b)
	w.n += int64(n)
	return n, err
}
