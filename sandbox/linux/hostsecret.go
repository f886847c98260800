//go:build linux

package linux

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/keel-run/keel/sandbox/egress"
)

// PlaceholderPrefix starts every placeholder a sandbox's environment
// holds in place of a [HostSecret]'s value.
const PlaceholderPrefix = "keel-placeholder-"

// hostSecrets are a sandbox's secrets for hosts: their placeholders, the
// per-sandbox certificate authority the egress proxy intercepts TLS with
// for their hosts, and the CA bundle the sandbox trusts.
type hostSecrets struct {
	list []hostSecret
	// dir holds bundle (the system's roots and the CA's certificate),
	// mounted read-only into the sandbox; removed by close.
	dir, bundle string
	ca          *certAuthority
}

type hostSecret struct {
	HostSecret
	rule        *egress.List
	placeholder string
}

// newHostSecrets checks list, draws a placeholder for each secret, makes
// the CA and writes the bundle to a new directory of the host's temporary
// directory (nothing secret is in it: the CA's key stays in memory).
func newHostSecrets(list []HostSecret) (*hostSecrets, error) {
	hs := &hostSecrets{}
	var names []string
	for _, s := range list {
		if !validEnvName(s.Name) {
			return nil, fmt.Errorf("sandbox/linux: host secret %q: want the name of an environment variable", s.Name)
		}
		if s.Value == "" {
			return nil, fmt.Errorf("sandbox/linux: host secret %s has no value", s.Name)
		}
		rule, err := egress.Parse([]string{s.Host})
		if err != nil || s.Host == "" {
			return nil, fmt.Errorf("sandbox/linux: host secret %s: host %q: want a host as the allowlist writes it (api.example.com, api.example.com:8443, *.example.com, 127.0.0.1:8443)", s.Name, s.Host)
		}
		var b [16]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, err
		}
		hs.list = append(hs.list, hostSecret{HostSecret: s, rule: rule, placeholder: PlaceholderPrefix + hex.EncodeToString(b[:])})
		names = append(names, rule.Rules()[0].Host)
	}
	ca, err := newCertAuthority(names)
	if err != nil {
		return nil, err
	}
	hs.ca = ca
	dir, err := os.MkdirTemp("", "keel-ca-")
	if err != nil {
		return nil, fmt.Errorf("sandbox/linux: CA bundle: %w", err)
	}
	hs.dir = dir
	var bundle []byte
	if roots := systemRoots(); roots != nil {
		bundle = append(bytes.TrimRight(roots, "\n"), '\n')
	}
	bundle = append(bundle, ca.certPEM...)
	hs.bundle = filepath.Join(dir, "ca-bundle.pem")
	err = os.WriteFile(hs.bundle, bundle, 0o644)
	if err == nil {
		err = os.Chmod(dir, 0o755)
	}
	if err != nil {
		hs.close()
		return nil, fmt.Errorf("sandbox/linux: CA bundle: %w", err)
	}
	return hs, nil
}

func (hs *hostSecrets) close() {
	if hs != nil && hs.dir != "" {
		os.RemoveAll(hs.dir)
	}
}

// env is what a command's environment gets: each secret's placeholder
// under its name, and the variables that make common programs trust the
// bundle: OpenSSL and what reads its defaults (Python's ssl, urllib, uv),
// curl, git, Python requests, pip, Node (NODE_EXTRA_CA_CERTS adds to its
// roots), npm and yarn 1 (a cafile in a global npmrc, as Debian's npm
// has, replaces Node's roots, extra ones included: the environment's
// setting wins over every npmrc but the command line), the AWS CLI and
// SDKs, cargo, Deno and Bundler. Each names the whole bundle (the
// system's roots and the sandbox's CA), so other hosts verify as before.
func (hs *hostSecrets) env() []string {
	if hs == nil {
		return nil
	}
	var out []string
	for _, s := range hs.list {
		out = append(out, s.Name+"="+s.placeholder)
	}
	for _, k := range caVariables {
		out = append(out, k+"="+hs.bundle)
	}
	return out
}

// caVariables name the sandbox's CA bundle for the programs that read
// them (see env).
var caVariables = []string{"SSL_CERT_FILE", "CURL_CA_BUNDLE", "REQUESTS_CA_BUNDLE", "GIT_SSL_CAINFO", "NODE_EXTRA_CA_CERTS", "PIP_CERT",
	"NPM_CONFIG_CAFILE", "AWS_CA_BUNDLE", "CARGO_HTTP_CAINFO", "DENO_CERT", "BUNDLE_SSL_CA_CERT"}

// forHost returns the secrets whose host is host:port.
func (hs *hostSecrets) forHost(host string, port int) []hostSecret {
	if hs == nil {
		return nil
	}
	var out []hostSecret
	for _, s := range hs.list {
		if s.rule.Match(host, port) != nil {
			out = append(out, s)
		}
	}
	return out
}

// systemRoots returns the PEM bundle of the host's trusted roots, nil if
// none of the usual files exists.
func systemRoots() []byte {
	for _, f := range []string{
		"/etc/ssl/certs/ca-certificates.crt",
		"/etc/pki/tls/certs/ca-bundle.crt",
		"/etc/ssl/ca-bundle.pem",
		"/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
		"/etc/ssl/cert.pem",
	} {
		if b, err := os.ReadFile(f); err == nil && len(b) > 0 {
			return b
		}
	}
	return nil
}

func validEnvName(n string) bool {
	if n == "" || n[0] >= '0' && n[0] <= '9' {
		return false
	}
	for _, r := range n {
		if !(r == '_' || r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

// certAuthority is a sandbox's own CA: its key lives only in this
// process's memory, its name constraints let it sign only for the hosts
// of the sandbox's secrets, and it mints one leaf per host on demand.
type certAuthority struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte

	mu     sync.Mutex
	leaves map[string]*tls.Certificate
}

func newCertAuthority(hosts []string) (*certAuthority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "Keel sandbox egress CA (one sandbox only)", Organization: []string{"Keel"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(caLifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
		// The CA may sign only for the secrets' hosts.
		PermittedDNSDomainsCritical: true,
	}
	for _, h := range hosts {
		if a, err := netip.ParseAddr(h); err == nil {
			bits := 32
			if a.Is6() {
				bits = 128
			}
			tmpl.PermittedIPRanges = append(tmpl.PermittedIPRanges, &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(bits, bits)})
		} else {
			tmpl.PermittedDNSDomains = append(tmpl.PermittedDNSDomains, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("sandbox/linux: egress CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &certAuthority{cert: cert, key: key, leaves: map[string]*tls.Certificate{},
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// caLifetime bounds a sandbox's CA (a run may wait days for a person).
const caLifetime = 90 * 24 * time.Hour

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}

// leaf returns the certificate for host, minting it on first use.
func (ca *certAuthority) leaf(host string) (*tls.Certificate, error) {
	ca.mu.Lock()
	defer ca.mu.Unlock()
	if c := ca.leaves[host]; c != nil {
		return c, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: host},
		NotBefore:    ca.cert.NotBefore,
		NotAfter:     ca.cert.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if a, err := netip.ParseAddr(host); err == nil {
		tmpl.IPAddresses = []net.IP{a.AsSlice()}
	} else {
		tmpl.DNSNames = []string{host}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, fmt.Errorf("sandbox/linux: certificate for %s: %w", host, err)
	}
	c := &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	ca.leaves[host] = c
	return c, nil
}

// substitution is what the proxy put into one request: the names of the
// secrets, and the pairs (as sent, as the sandbox wrote it) a response
// is stripped of, so that a server echoing the value gives the sandbox
// only the placeholder back.
type substitution struct {
	names []string
	back  [][2]string
}

// substitute puts the values of secrets in place of their placeholders
// in r's path, query and headers (also inside a Basic credential); its
// body is [substituteBody]'s.
func substitute(r *http.Request, secrets []hostSecret) *substitution {
	sub := &substitution{}
	used := map[string]bool{}
	rep := func(s string) string {
		for _, hs := range secrets {
			if strings.Contains(s, hs.placeholder) {
				s = strings.ReplaceAll(s, hs.placeholder, hs.Value)
				used[hs.Name] = true
			}
		}
		return s
	}
	r.URL.Path = rep(r.URL.Path)
	r.URL.RawPath = rep(r.URL.RawPath)
	r.URL.RawQuery = rep(r.URL.RawQuery)
	for k, vs := range r.Header {
		for i, v := range vs {
			if scheme, cred, ok := strings.Cut(v, " "); ok && strings.EqualFold(scheme, "basic") {
				if b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(cred)); err == nil {
					if n := rep(string(b)); n != string(b) {
						enc := base64.StdEncoding.EncodeToString([]byte(n))
						sub.back = append(sub.back, [2]string{enc, strings.TrimSpace(cred)})
						vs[i] = scheme + " " + enc
						continue
					}
				}
			}
			vs[i] = rep(v)
		}
		r.Header[k] = vs
	}
	for _, hs := range secrets {
		if used[hs.Name] {
			sub.names = append(sub.names, hs.Name)
		}
		// The value as is and escaped, whether this request carried it
		// or not: a response never brings it into the sandbox.
		sub.back = append(sub.back, [2]string{hs.Value, hs.placeholder})
		for _, esc := range []string{url.QueryEscape(hs.Value), url.PathEscape(hs.Value)} {
			if esc != hs.Value {
				sub.back = append(sub.back, [2]string{esc, hs.placeholder})
			}
		}
	}
	return sub
}

// add names secret name as put in the request (once).
func (sub *substitution) add(name string) {
	for _, n := range sub.names {
		if n == name {
			return
		}
	}
	sub.names = append(sub.names, name)
}

func (sub *substitution) replace(s string) string {
	for _, p := range sub.back {
		s = strings.ReplaceAll(s, p[0], p[1])
	}
	return s
}

// replaceReader replaces each pair's first string by its second in a
// stream, also across reads: it holds back the bytes that may start a
// match until the next read shows whether they do.
type replaceReader struct {
	r       io.ReadCloser
	pairs   [][2]string
	pending []byte // read, not yet looked at in full
	out     []byte // ready to return
	eof     error
}

func (rr *replaceReader) Read(b []byte) (int, error) {
	for len(rr.out) == 0 {
		if rr.eof != nil {
			if len(rr.pending) == 0 {
				return 0, rr.eof
			}
			rr.process(true)
			continue
		}
		buf := make([]byte, 32<<10)
		n, err := rr.r.Read(buf)
		rr.pending = append(rr.pending, buf[:n]...)
		if err != nil {
			rr.eof = err
			continue
		}
		rr.process(false)
	}
	n := copy(b, rr.out)
	rr.out = rr.out[n:]
	return n, nil
}

func (rr *replaceReader) process(final bool) {
	buf, i, longest := rr.pending, 0, 0
	for _, p := range rr.pairs {
		longest = max(longest, len(p[0]))
	}
	for {
		at, which := -1, -1
		for k, p := range rr.pairs {
			if j := bytes.Index(buf[i:], []byte(p[0])); j >= 0 && (at < 0 || j < at || j == at && len(p[0]) > len(rr.pairs[which][0])) {
				at, which = j, k
			}
		}
		// A match whose bytes after it are not all read yet may be the
		// start of a longer one: it waits for the next read.
		if at < 0 || !final && i+at > len(buf)-longest {
			break
		}
		rr.out = append(rr.out, buf[i:i+at]...)
		rr.out = append(rr.out, rr.pairs[which][1]...)
		i += at + len(rr.pairs[which][0])
	}
	keep := 0
	if !final {
		keep = min(len(buf)-i, longest-1)
	}
	rr.out = append(rr.out, buf[i:len(buf)-keep]...)
	rr.pending = append([]byte(nil), buf[len(buf)-keep:]...)
}

func (rr *replaceReader) Close() error { return rr.r.Close() }

// errMisdirected is a request inside an intercepted tunnel whose Host
// names another host than the tunnel's.
var errMisdirected = errors.New("the request's Host is not the host of its tunnel")
