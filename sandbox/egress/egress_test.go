package egress_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/keel-run/keel/sandbox/egress"
	"github.com/keel-run/keel/sandbox/egress/egresstest"
)

func TestParse(t *testing.T) {
	for _, tt := range []struct {
		in      []string
		want    []egress.Rule
		wantErr string
	}{
		{in: []string{"pypi.org"}, want: []egress.Rule{{Text: "pypi.org", Host: "pypi.org", Ports: []int{443, 80}}}},
		{in: []string{"Files.PythonHosted.org.:443"}, want: []egress.Rule{{Text: "Files.PythonHosted.org.:443", Host: "files.pythonhosted.org", Ports: []int{443}}}},
		{in: []string{"*.github.com"}, want: []egress.Rule{{Text: "*.github.com", Host: "github.com", Wildcard: true, Ports: []int{443, 80}}}},
		{in: []string{"localhost:8080"}, want: []egress.Rule{{Text: "localhost:8080", Host: "localhost", Ports: []int{8080}}}},
		{in: []string{"127.0.0.1:8080"}, want: []egress.Rule{{Text: "127.0.0.1:8080", Host: "127.0.0.1", Ports: []int{8080}, Addr: netip.MustParseAddr("127.0.0.1")}}},
		{in: []string{"[::1]:443"}, want: []egress.Rule{{Text: "[::1]:443", Host: "::1", Ports: []int{443}, Addr: netip.MustParseAddr("::1")}}},
		{in: []string{"10.0.0.7"}, want: []egress.Rule{{Text: "10.0.0.7", Host: "10.0.0.7", Ports: []int{443, 80}, Addr: netip.MustParseAddr("10.0.0.7")}}},
		{in: []string{"2130706433"}, wantErr: "notation"},
		{in: []string{"0x7f.1"}, wantErr: "notation"},
		{in: []string{"127.1"}, wantErr: "notation"},
		{in: []string{"host:0"}, wantErr: "bad port"},
		{in: []string{"host:http"}, wantErr: "bad port"},
		{in: []string{"user@host"}, wantErr: "not a host name"},
		{in: []string{""}, wantErr: "not a host name"},
	} {
		got, err := egress.Parse(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Parse(%q) error = %v, want %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("Parse(%q) error = %v", tt.in, err)
			continue
		}
		if diff := cmp.Diff(tt.want, got.Rules(), cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
			t.Errorf("Parse(%q) mismatch (-want +got):\n%s", tt.in, diff)
		}
	}
}

func TestMatch(t *testing.T) {
	l, err := egress.Parse([]string{"pypi.org", "*.example.com:8443", "files.pythonhosted.org:443", "127.0.0.1:8080", "[::1]:9090", "localhost:7070"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		host string
		port int
		want bool
	}{
		{"pypi.org", 443, true},
		{"PYPI.org.", 80, true},
		{"pypi.org", 22, false},
		{"evil-pypi.org", 443, false},
		{"pypi.org.evil.com", 443, false},
		{"a.example.com", 8443, true},
		{"a.b.example.com", 8443, true},
		{"example.com", 8443, false},
		{"a.example.com", 443, false},
		{"files.pythonhosted.org", 80, false},
		{"127.0.0.1", 8080, true},
		{"::ffff:127.0.0.1", 8080, true},
		{"127.0.0.1", 8081, false},
		{"127.1", 8080, false},
		{"2130706433", 8080, false},
		{"0x7f000001", 8080, false},
		{"127.0.0.2", 8080, false},
		{"localhost", 8080, false},
		{"[::1]", 9090, true},
		{"::1", 9090, true},
		{"localhost", 7070, true},
		{"127.0.0.1", 7070, false},
	} {
		if got := l.Match(tt.host, tt.port) != nil; got != tt.want {
			t.Errorf("Match(%s:%d) = %v, want %v", tt.host, tt.port, got, tt.want)
		}
	}
	if !l.Loopback() {
		t.Error("Loopback() = false")
	}
	if egress.MustParse([]string{"pypi.org", "10.0.0.1"}).Loopback() {
		t.Error("Loopback() = true for a list without a loopback entry")
	}
}

func TestNumericHost(t *testing.T) {
	for _, tt := range []struct {
		host string
		want bool
	}{
		{"1.1.1.1", true}, {"2130706433", true}, {"0x7f000001", true}, {"127.1", true},
		{"[::1]", true}, {"::ffff:127.0.0.1", true}, {"017700000001", true},
		{"example.com", false}, {"1password.com", false}, {"a1.b2", false}, {"localhost", false},
	} {
		if got := egress.NumericHost(tt.host); got != tt.want {
			t.Errorf("NumericHost(%q) = %v, want %v", tt.host, got, tt.want)
		}
	}
}

func TestPublic(t *testing.T) {
	for _, tt := range []struct {
		ip   string
		want bool
	}{
		{"1.1.1.1", true}, {"93.184.215.14", true}, {"2606:4700::1111", true},
		{"127.0.0.1", false}, {"10.1.2.3", false}, {"172.16.0.1", false}, {"192.168.1.1", false},
		{"169.254.169.254", false}, {"100.64.0.1", false}, {"0.0.0.0", false}, {"0.1.2.3", false},
		{"::1", false}, {"fe80::1", false}, {"fd00::1", false}, {"224.0.0.1", false}, {"255.255.255.255", false},
	} {
		if got := egress.Public(net.ParseIP(tt.ip)); got != tt.want {
			t.Errorf("Public(%s) = %v, want %v", tt.ip, got, tt.want)
		}
	}
}

func TestCheckURL(t *testing.T) {
	l := egress.MustParse([]string{"example.com", "api.test:8443", "127.0.0.1:8080", "*.pages.test"})
	for _, tt := range []struct {
		url string
		ok  bool
	}{
		{"https://example.com/x", true},
		{"http://EXAMPLE.com./x", true},
		{"https://example.com:8443/", false},
		{"https://api.test:8443/v1", true},
		{"https://api.test/v1", false},
		{"http://127.0.0.1:8080/", true},
		{"http://127.0.0.1:8081/", false},
		{"http://127.1:8080/", false},
		{"http://a.pages.test/", true},
		{"http://pages.test/", false},
		{"ftp://example.com/", false},
		{"http:///x", false},
	} {
		u, _ := url.Parse(tt.url)
		err := l.CheckURL(u)
		if (err == nil) != tt.ok || err != nil && !errors.Is(err, egress.ErrNotAllowed) {
			t.Errorf("CheckURL(%s) = %v, want ok=%v", tt.url, err, tt.ok)
		}
	}
	if err := (&egress.List{}).CheckURL(&url.URL{Scheme: "https", Host: "example.com"}); err == nil || !strings.Contains(err.Error(), "off") {
		t.Errorf("empty list: %v", err)
	}
}

// A name is reached only at public addresses: one that resolves to
// loopback or a private address is refused; "localhost" (never resolved)
// and an address named as such are reached.
func TestDial(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) }))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
	ctx := t.Context()
	d := &egress.Dialer{Resolver: egresstest.Resolver(t, map[string]string{"evil.test": "127.0.0.1", "lan.test": "10.9.8.7", "pub.test": "192.0.2.1"})}
	for _, host := range []string{"127.0.0.1", "localhost"} {
		c, err := d.Dial(ctx, "tcp", net.JoinHostPort(host, port))
		if err != nil {
			t.Errorf("Dial(%s) = %v", host, err)
			continue
		}
		c.Close()
	}
	for _, host := range []string{"evil.test", "lan.test", "EVIL.test."} {
		if _, err := d.Dial(ctx, "tcp", net.JoinHostPort(host, port)); !errors.Is(err, egress.ErrNonPublic) {
			t.Errorf("Dial(%s) = %v, want %v", host, err, egress.ErrNonPublic)
		}
	}
	if _, err := d.Dial(ctx, "tcp", net.JoinHostPort("127.1", port)); !errors.Is(err, egress.ErrNotAllowed) {
		t.Errorf("Dial(127.1) = %v", err)
	}
	// A public answer is dialed (192.0.2.1 is TEST-NET-1: nothing
	// answers, so the dial fails, but not as non-public).
	dctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := d.Dial(dctx, "tcp", net.JoinHostPort("pub.test", port)); errors.Is(err, egress.ErrNonPublic) || err == nil {
		t.Errorf("Dial(pub.test) = %v", err)
	}
}
