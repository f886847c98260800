package cli_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keel-run/keel/internal/cli"
)

// A second keel serve on a SQLite journal another server holds refuses
// to start (exit 2) naming the holder's pid and address, and leaves the
// saved CLI token alone; once the first server is gone (kill -9: the
// kernel releases the lease), a server starts on it again.
func TestSecondServeOnSQLiteRefused(t *testing.T) {
	setup(t)
	first := startServe(t)
	tokenFile := filepath.Join(os.Getenv("KEEL_HOME"), "server-token")
	before, err := os.ReadFile(tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	second := func() (int, string) {
		// The timeout only bounds a second server that wrongly starts.
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		var o, e bytes.Buffer
		code := cli.Main(ctx, []string{"serve", "--addr", "127.0.0.1:0", "--workspace-root", os.TempDir()}, &o, &e)
		return code, e.String()
	}
	code, errOut := second()
	pid := "pid " + strconv.Itoa(first.cmd.Process.Pid)
	if code != 2 || !strings.Contains(errOut, "already has a server") || !strings.Contains(errOut, pid) || !strings.Contains(errOut, first.url) {
		t.Fatalf("second keel serve = %d, want 2 naming %s at %s\n%s", code, pid, first.url, errOut)
	}
	after, err := os.ReadFile(tokenFile)
	if err != nil || !bytes.Equal(before, after) {
		t.Errorf("the refused server changed the saved token:\n%s\n%s", before, after)
	}
	if err := first.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-first.done
	startServe(t)
}
