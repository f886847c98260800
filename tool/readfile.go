package tool

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// ErrNotRegular is wrapped by [ReadRegular]'s error for a path that is
// not a regular file: a FIFO (whose open would block until a writer
// comes), a device (/dev/zero never ends), a socket or a directory.
var ErrNotRegular = errors.New("not a regular file")

// ReadRegular reads the file name in root for Keel itself (memory files,
// the notes file, artifacts, a kernel's state, .gitignore files): files
// in a workspace are the agent's to make, so Keel reads only regular
// files, never a FIFO or device put in their place, and at most max
// bytes of them. The path is resolved inside root ([os.Root]: symbolic
// links are followed only while they stay inside it), the file is opened
// without blocking (O_NONBLOCK, so a FIFO swapped in after the check
// cannot hang the open), and its type is checked again on the open file.
//
// It returns at most max+1 bytes, so a caller can tell a file longer
// than max (len > max) and cut it; an error wrapping [fs.ErrNotExist]
// when the file is missing, one wrapping [ErrNotRegular] for anything
// else than a regular file, and an error wrapping the cause (a link
// leading out of root, a permission error) otherwise. max must be
// positive.
func ReadRegular(root *os.Root, name string, max int64) ([]byte, error) {
	if fi, err := root.Stat(name); err == nil && !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("tool: read %s: %w (%s)", name, ErrNotRegular, fileKind(fi.Mode()))
	}
	f, err := root.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("tool: read %s: %w", name, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("tool: read %s: %w", name, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("tool: read %s: %w (%s)", name, ErrNotRegular, fileKind(fi.Mode()))
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, fmt.Errorf("tool: read %s: %w", name, err)
	}
	return b, nil
}

// fileKind names a non-regular file type for an error message.
func fileKind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a device"
	case m&fs.ModeSocket != 0:
		return "a socket"
	}
	return "a special file"
}

// Digest is "sha256:HEX", the SHA-256 of what r reads: how a file's
// content is named in the state of a call waiting for approval (a file
// tool's [Tool.State], the files a command writes), so that a change
// made meanwhile is seen when the call is approved.
func Digest(r io.Reader) (string, error) {
	h := sha256.New()
	if _, err := io.Copy(h, r); err != nil {
		return "", err
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}
