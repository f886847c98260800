package tui

import (
	"io"
	"os"

	"golang.org/x/sys/unix"

	"github.com/keel-run/keel/visible"
)

// escWriter escapes control characters of everything written through it
// (visible.String), so that text from a model, a tool or a task file
// cannot move the cursor, erase a line, retitle the terminal, reorder
// what a person reads or fake Keel's own status lines. Keel's own output uses none, so it only ever changes
// text that came from a model or a tool.
type escWriter struct{ w io.Writer }

func (e escWriter) Write(p []byte) (int, error) {
	if _, err := io.WriteString(e.w, visible.String(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}

// IsTerminal reports whether w is a terminal: a file that answers the
// TCGETS ioctl. /dev/null is a character device too, but not a terminal.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// sameTerminal reports whether a and b are one terminal (keel run's
// stdout and stderr, neither redirected), seen through an escWriter (the
// command line's stderr).
func sameTerminal(a, b io.Writer) bool {
	unwrap := func(w io.Writer) io.Writer {
		if e, ok := w.(escWriter); ok {
			return e.w
		}
		return w
	}
	fa, ok := unwrap(a).(*os.File)
	fb, ok2 := unwrap(b).(*os.File)
	if !ok || !ok2 || !IsTerminal(fa) || !IsTerminal(fb) {
		return false
	}
	sa, err := fa.Stat()
	sb, err2 := fb.Stat()
	return err == nil && err2 == nil && os.SameFile(sa, sb)
}

// Esc returns w escaping everything written through it (see escWriter).
func Esc(w io.Writer) io.Writer { return escWriter{w} }
