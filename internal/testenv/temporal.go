package testenv

import (
	"bytes"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"
)

// TemporalEnv names the temporal CLI (github.com/temporalio/cli, built by
// .ci/deps/40-temporal.sh).
const TemporalEnv = "KEEL_TEST_TEMPORAL"

// Temporal starts a Temporal dev server (temporal server start-dev,
// headless, SQLite in a temporary directory of tb) on 127.0.0.1 and free
// ports, and returns its frontend's HOST:PORT once it accepts connections.
// The server is stopped when tb ends.
func Temporal(tb testing.TB) string {
	tb.Helper()
	bin := Program(tb, TemporalEnv, "temporal")
	for attempt := 0; ; attempt++ {
		var ports [3]int
		for i := range ports {
			p, err := freePort()
			if err != nil {
				tb.Fatal(err)
			}
			ports[i] = p
		}
		addr := "127.0.0.1:" + strconv.Itoa(ports[0])
		cmd := exec.Command(bin, "server", "start-dev", "--headless", "--ip", "127.0.0.1",
			"--port", strconv.Itoa(ports[0]), "--http-port", strconv.Itoa(ports[1]), "--metrics-port", strconv.Itoa(ports[2]),
			"--db-filename", filepath.Join(tb.TempDir(), "temporal.db"), "--log-level", "warn")
		var out syncBuffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			tb.Fatalf("testenv: start temporal: %v", err)
		}
		exited := make(chan struct{})
		go func() { cmd.Wait(); close(exited) }()
		stop := func() {
			cmd.Process.Kill()
			<-exited
		}
		deadline := time.Now().Add(time.Minute)
		for {
			// Listening on every port: a server that took the gRPC port
			// but then lost another one to a process that took it after
			// freePort exits, and its gRPC port refuses connections.
			err := listening(ports[:])
			if err == nil {
				tb.Cleanup(stop)
				return addr
			}
			select {
			case <-exited:
			case <-time.After(50 * time.Millisecond):
				if time.Now().Before(deadline) {
					continue
				}
				stop()
				tb.Fatalf("testenv: temporal did not listen on %s within a minute:\n%s", addr, out.String())
			}
			break
		}
		// It exited: a port was taken meanwhile; try other ports.
		if attempt == 2 {
			tb.Fatalf("testenv: temporal exited:\n%s", out.String())
		}
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// listening returns nil when every port of 127.0.0.1 accepts a connection.
func listening(ports []int) error {
	for _, p := range ports {
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(p), time.Second)
		if err != nil {
			return err
		}
		c.Close()
	}
	return nil
}
