// Package egresstest runs a real DNS server in tests: a UDP listener on
// loopback that answers A queries for the names a test gives and refuses
// the rest, and a [net.Resolver] that asks it. Tests point an
// [egress.Dialer] (or a sandbox's egress proxy) at it to check what a
// name that resolves to a loopback or private address reaches.
//
// It is for tests only; the keel binary never imports it.
package egresstest

import (
	"context"
	"net"
	"strings"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// Resolver serves names (lower case, without the final dot) mapped to
// IPv4 addresses until the test ends, and returns a resolver that asks
// only that server.
func Resolver(tb testing.TB, names map[string]string) *net.Resolver {
	tb.Helper()
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { pc.Close() })
	go serve(pc, names)
	addr := pc.LocalAddr().String()
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp4", addr)
	}}
}

func serve(pc net.PacketConn, names map[string]string) {
	buf := make([]byte, 1500)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		var p dnsmessage.Parser
		h, err := p.Start(buf[:n])
		if err != nil {
			continue
		}
		q, err := p.Question()
		if err != nil {
			continue
		}
		name := strings.TrimSuffix(strings.ToLower(q.Name.String()), ".")
		ip, known := names[name]
		rh := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RCode: dnsmessage.RCodeSuccess}
		if !known {
			rh.RCode = dnsmessage.RCodeNameError
		}
		b := dnsmessage.NewBuilder(nil, rh)
		b.EnableCompression()
		_ = b.StartQuestions()
		_ = b.Question(q)
		_ = b.StartAnswers()
		if a := net.ParseIP(ip).To4(); known && q.Type == dnsmessage.TypeA && a != nil {
			_ = b.AResource(dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 60}, dnsmessage.AResource{A: [4]byte(a)})
		}
		out, err := b.Finish()
		if err != nil {
			continue
		}
		_, _ = pc.WriteTo(out, from)
	}
}
