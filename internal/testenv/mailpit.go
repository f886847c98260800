package testenv

import (
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// MailpitEnv names the mailpit program (github.com/axllent/mailpit, a
// real SMTP server whose HTTP API shows what arrived; built by
// .ci/deps/45-mailpit.sh).
const MailpitEnv = "KEEL_TEST_MAILPIT"

// Mailpit starts a Mailpit server on 127.0.0.1 and free ports, with its
// database in a temporary directory of tb, and returns its SMTP address
// (HOST:PORT, no TLS, no authentication) and the base URL of its HTTP API
// (GET BASE/api/v1/messages lists what arrived). It is stopped when tb
// ends.
func Mailpit(tb testing.TB) (smtpAddr, apiURL string) {
	tb.Helper()
	bin := Program(tb, MailpitEnv, "mailpit")
	for attempt := 0; ; attempt++ {
		var ports [2]int
		for i := range ports {
			p, err := freePort()
			if err != nil {
				tb.Fatal(err)
			}
			ports[i] = p
		}
		smtpAddr = "127.0.0.1:" + strconv.Itoa(ports[0])
		httpAddr := "127.0.0.1:" + strconv.Itoa(ports[1])
		cmd := exec.Command(bin, "--smtp", smtpAddr, "--listen", httpAddr, "--database", filepath.Join(tb.TempDir(), "mailpit.db"), "--quiet")
		var out syncBuffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			tb.Fatalf("testenv: start mailpit: %v", err)
		}
		exited := make(chan struct{})
		go func() { cmd.Wait(); close(exited) }()
		stop := func() {
			cmd.Process.Kill()
			<-exited
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			c1, err1 := net.DialTimeout("tcp", smtpAddr, time.Second)
			c2, err2 := net.DialTimeout("tcp", httpAddr, time.Second)
			for _, c := range []net.Conn{c1, c2} {
				if c != nil {
					c.Close()
				}
			}
			if err1 == nil && err2 == nil {
				tb.Cleanup(stop)
				return smtpAddr, "http://" + httpAddr
			}
			select {
			case <-exited:
			case <-time.After(50 * time.Millisecond):
				if time.Now().Before(deadline) {
					continue
				}
				stop()
				tb.Fatalf("testenv: mailpit did not listen within 30 s:\n%s", out.String())
			}
			break
		}
		if attempt == 2 {
			tb.Fatalf("testenv: mailpit exited:\n%s", out.String())
		}
	}
}
