package serve

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/telemetry"
)

// Metrics are the /metrics of a server or worker: the events this
// process appends (its runtime's metrics), gauges of the journal's runs
// (read incrementally at each scrape) and the runs this process executes
// (once Run or Worker.Run knows them).
type Metrics struct {
	*telemetry.Metrics
	active atomic.Pointer[func() int]
}

// NewMetrics returns the metrics of a process on store; ctx bounds the
// journal reads of scrapes.
func NewMetrics(ctx context.Context, store journal.Store) *Metrics {
	m := &Metrics{}
	gauges := telemetry.NewRunGauges(store)
	m.Metrics = telemetry.NewMetrics(func() telemetry.Snapshot {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		s, _ := gauges.Snapshot(ctx)
		if f := m.active.Load(); f != nil {
			s.Active = (*f)()
		}
		return s
	}, nil)
	return m
}

// setActive makes f the count of runs this process executes.
func (m *Metrics) setActive(f func() int) {
	if m != nil {
		m.active.Store(&f)
	}
}

// Listen serves /metrics, without a token, on a listener of its own at
// addr (keel serve's and keel worker's --metrics-addr) until the returned
// function is called; it tells out where.
func (m *Metrics) Listen(ctx context.Context, addr string, logger *slog.Logger, out io.Writer) (func(), error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", m.Handler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}
	go func() { _ = srv.Serve(ln) }()
	where := ln.Addr().String()
	if _, exposed := URLs(ln.Addr()); exposed {
		fmt.Fprintf(out, "keel: metrics at http://%s/metrics without a token, reachable from other machines (agent and user names, counts; never content): keep it on a private network\n", where)
	} else {
		fmt.Fprintf(out, "keel: metrics at http://%s/metrics (no token)\n", where)
	}
	return func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}, nil
}

// URLs returns the URLs this machine reaches a listener at, the one to
// print first, and whether other machines can reach it too. A listener
// on every interface (0.0.0.0, ::) is reached locally at 127.0.0.1
// (never printed as http://[::]:PORT, which browsers refuse).
func URLs(addr net.Addr) (urls []string, exposed bool) {
	tcp, ok := addr.(*net.TCPAddr)
	if !ok {
		return []string{"http://" + addr.String()}, false
	}
	port := strconv.Itoa(tcp.Port)
	switch {
	case tcp.IP.IsUnspecified():
		return []string{"http://127.0.0.1:" + port, "http://localhost:" + port, "http://[::1]:" + port}, true
	case tcp.IP.IsLoopback():
		urls = []string{"http://" + net.JoinHostPort(tcp.IP.String(), port), "http://localhost:" + port}
		return urls, false
	}
	return []string{"http://" + net.JoinHostPort(tcp.IP.String(), port)}, true
}
