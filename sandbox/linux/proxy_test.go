//go:build linux

package linux

import (
	"net"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseAllow(t *testing.T) {
	for _, tt := range []struct {
		in      []string
		want    []allowRule
		wantErr string
	}{
		{in: []string{"pypi.org"}, want: []allowRule{{text: "pypi.org", host: "pypi.org", ports: []int{443, 80}}}},
		{in: []string{"Files.PythonHosted.org.:443"}, want: []allowRule{{text: "Files.PythonHosted.org.:443", host: "files.pythonhosted.org", ports: []int{443}}}},
		{in: []string{"*.github.com"}, want: []allowRule{{text: "*.github.com", host: "github.com", wildcard: true, ports: []int{443, 80}}}},
		{in: []string{"1.2.3.4"}, wantErr: "IP address"},
		{in: []string{"[::1]:443"}, wantErr: "IP address"},
		{in: []string{"2130706433"}, wantErr: "IP address"},
		{in: []string{"0x7f.1"}, wantErr: "IP address"},
		{in: []string{"host:0"}, wantErr: "bad port"},
		{in: []string{"host:http"}, wantErr: "bad port"},
		{in: []string{"user@host"}, wantErr: "not a host name"},
		{in: []string{""}, wantErr: "not a host name"},
	} {
		got, err := parseAllow(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("parseAllow(%q) error = %v, want %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("parseAllow(%q) error = %v", tt.in, err)
			continue
		}
		if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(allowRule{})); diff != "" {
			t.Errorf("parseAllow(%q) mismatch (-want +got):\n%s", tt.in, diff)
		}
	}
}

func TestMatch(t *testing.T) {
	rules, err := parseAllow([]string{"pypi.org", "*.example.com:8443", "files.pythonhosted.org:443"})
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
	} {
		if got := match(rules, tt.host, tt.port) != nil; got != tt.want {
			t.Errorf("match(%s:%d) = %v, want %v", tt.host, tt.port, got, tt.want)
		}
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
		if got := numericHost(tt.host); got != tt.want {
			t.Errorf("numericHost(%q) = %v, want %v", tt.host, got, tt.want)
		}
	}
}

func TestPublicIP(t *testing.T) {
	for _, tt := range []struct {
		ip   string
		want bool
	}{
		{"1.1.1.1", true}, {"93.184.215.14", true}, {"2606:4700::1111", true},
		{"127.0.0.1", false}, {"10.1.2.3", false}, {"172.16.0.1", false}, {"192.168.1.1", false},
		{"169.254.169.254", false}, {"100.64.0.1", false}, {"0.0.0.0", false}, {"0.1.2.3", false},
		{"::1", false}, {"fe80::1", false}, {"fd00::1", false}, {"224.0.0.1", false}, {"255.255.255.255", false},
	} {
		if got := publicIP(net.ParseIP(tt.ip)); got != tt.want {
			t.Errorf("publicIP(%s) = %v, want %v", tt.ip, got, tt.want)
		}
	}
}
