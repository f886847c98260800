package cli

import (
	"os"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// openPTY opens a pseudo-terminal pair and returns its terminal side.
func openPTY(t *testing.T) *os.File {
	t.Helper()
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	t.Cleanup(func() { ptmx.Close() })
	if err := unix.IoctlSetPointerInt(int(ptmx.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(ptmx.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	pts, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pts.Close() })
	return pts
}

// Only a terminal means a person may answer: /dev/null is a character
// device (what the old test looked at) but not a terminal, nor are pipes
// and files.
func TestWaitingNeedsATerminal(t *testing.T) {
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devnull.Close()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	file, err := os.Create(t.TempDir() + "/f")
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	pty := openPTY(t)
	for _, tt := range []struct {
		name  string
		stdin *os.File
		g     gateFlags
		want  bool
	}{
		{"/dev/null", devnull, gateFlags{}, false},
		{"a pipe", r, gateFlags{}, false},
		{"a file", file, gateFlags{}, false},
		{"a terminal", pty, gateFlags{}, true},
		{"--no-wait on a terminal", pty, gateFlags{noWait: true}, false},
		{"--wait on /dev/null", devnull, gateFlags{wait: true}, true},
	} {
		if got := tt.g.waitingOn(tt.stdin); got != tt.want {
			t.Errorf("%s: waiting = %v, want %v", tt.name, got, tt.want)
		}
	}
}
