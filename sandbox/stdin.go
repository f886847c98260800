package sandbox

import (
	"fmt"
	"io"
	"os"
)

// StdinFile returns a file to hand to a command as its standard input
// for [Cmd].Stdin r, and a function the backend calls once the command
// holds its own copy (it closes what StdinFile created; calling it again
// does nothing harmful). An
// *os.File is returned as it is (the caller keeps owning it); any other
// reader gets a pipe whose write end a goroutine fills from r and closes
// at r's EOF or error, or when the command stops reading. It returns an
// error only when the pipe cannot be created.
func StdinFile(r io.Reader) (*os.File, func(), error) {
	if f, ok := r.(*os.File); ok {
		return f, func() {}, nil
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, nil, fmt.Errorf("sandbox: stdin pipe: %w", err)
	}
	go func() {
		defer pw.Close()
		_, _ = io.Copy(pw, r)
	}()
	return pr, func() { pr.Close() }, nil
}
