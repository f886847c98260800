package python

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/keel-run/keel/sandbox"
)

//go:embed kernel.py
var kernelSource string

// frame is one line the kernel writes on its protocol stream.
type frame struct {
	T         string  `json:"t"`
	ID        int64   `json:"id"`
	D         string  `json:"d"`
	Status    string  `json:"status"`
	Ename     string  `json:"ename"`
	Evalue    string  `json:"evalue"`
	Traceback string  `json:"traceback"`
	Duration  float64 `json:"duration"`
	Version   string  `json:"version"`
}

// maxLine bounds one protocol line; the kernel sends output in chunks of
// 16 KiB, which JSON escaping grows at most six-fold.
const maxLine = 1 << 20

// cell is the execution in progress: where its output goes and where its
// final frame is delivered.
type cell struct {
	id     int64
	stdout io.Writer
	stderr io.Writer
	done   chan frame
}

// kernel is one interpreter process inside a run's sandbox. Cells run
// one at a time (mu). The process ends when its stdin closes, when its
// context is canceled (kill), or with the sandbox.
type kernel struct {
	mu      sync.Mutex // serialises cells
	stdin   *os.File   // write end of the kernel's stdin
	cancel  context.CancelFunc
	exited  chan struct{} // closed when the process has ended
	ready   chan frame
	version string
	nextID  int64

	smu      sync.Mutex // guards cur, line, diag, res, err
	cur      *cell
	line     []byte
	skipping bool // dropping the rest of an over-long line
	diag     []byte
	res      *sandbox.Result
	err      error
}

// startKernel starts the interpreter python in sb, with the workspace
// mount dir as its working directory, and waits for it to be ready (at
// most wait). It returns an error naming what the kernel printed when it
// cannot start.
func startKernel(sb sandbox.Sandbox, python, dir string, wait time.Duration) (*kernel, error) {
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("python: kernel stdin: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	k := &kernel{stdin: inW, cancel: cancel, exited: make(chan struct{}), ready: make(chan frame, 1)}
	cmd := &sandbox.Cmd{
		Args:    []string{python, "-u", "-c", kernelSource},
		Dir:     dir,
		Env:     []string{"PYTHONUNBUFFERED=1", "PYTHONDONTWRITEBYTECODE=1", "PYTHONIOENCODING=utf-8"},
		Stdin:   inR,
		Stdout:  k,
		Timeout: -1, // the kernel lives as long as the run; cells have their own limit
	}
	go func() {
		res, err := sb.Exec(ctx, cmd)
		inR.Close()
		k.smu.Lock()
		k.res, k.err = res, err
		k.smu.Unlock()
		close(k.exited)
	}()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case f := <-k.ready:
		k.version = f.Version
		return k, nil
	case <-k.exited:
		k.close()
		return nil, fmt.Errorf("the Python kernel (%s) could not start: %s", python, k.deathNote())
	case <-t.C:
		k.close()
		<-k.exited
		return nil, fmt.Errorf("the Python kernel (%s) did not start within %s: %s", python, wait, k.deathNote())
	}
}

// alive reports whether the process still runs.
func (k *kernel) alive() bool {
	select {
	case <-k.exited:
		return false
	default:
		return true
	}
}

// close ends the process: stdin closes (the kernel exits at EOF) and the
// sandbox kills what remains. It does not wait.
func (k *kernel) close() {
	k.stdin.Close()
	k.cancel()
}

// deathNote describes how the process ended, with the last lines it
// printed outside the protocol.
func (k *kernel) deathNote() string {
	k.smu.Lock()
	defer k.smu.Unlock()
	var b strings.Builder
	switch {
	case k.err != nil:
		b.WriteString(k.err.Error())
	case k.res != nil && k.res.Signal != "":
		fmt.Fprintf(&b, "it was killed by %s", k.res.Signal)
		if k.res.Limit != "" {
			fmt.Fprintf(&b, " (%s limit)", k.res.Limit)
		}
	case k.res != nil:
		fmt.Fprintf(&b, "it exited with code %d", k.res.ExitCode)
		if k.res.Limit != "" {
			fmt.Fprintf(&b, " (%s limit)", k.res.Limit)
		}
	default:
		b.WriteString("it is not running")
	}
	if d := strings.TrimSpace(string(k.diag)); d != "" {
		b.WriteString("; it printed: ")
		b.WriteString(d)
	}
	return b.String()
}

// Write receives the kernel's protocol stream (the sandbox's stdout
// pipe). It never fails, so the pipe is always drained.
func (k *kernel) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		chunk := p
		if i >= 0 {
			chunk = p[:i]
		}
		k.smu.Lock()
		if !k.skipping {
			if len(k.line)+len(chunk) > maxLine {
				k.skipping = true
				k.line = k.line[:0]
			} else {
				k.line = append(k.line, chunk...)
			}
		}
		var line []byte
		if i >= 0 {
			if !k.skipping {
				line = append([]byte(nil), k.line...)
			}
			k.line, k.skipping = k.line[:0], false
		}
		k.smu.Unlock()
		if line != nil {
			k.handle(line)
		}
		if i < 0 {
			break
		}
		p = p[i+1:]
	}
	return n, nil
}

// handle dispatches one protocol line.
func (k *kernel) handle(line []byte) {
	var f frame
	if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &f) != nil || f.T == "" {
		k.smu.Lock()
		k.diag = append(k.diag, line...)
		k.diag = append(k.diag, '\n')
		if len(k.diag) > 4096 {
			k.diag = k.diag[len(k.diag)-4096:]
		}
		k.smu.Unlock()
		return
	}
	k.smu.Lock()
	c := k.cur
	k.smu.Unlock()
	switch f.T {
	case "ready":
		select {
		case k.ready <- f:
		default:
		}
	case "out", "err":
		if c == nil || f.ID != c.id {
			return // output of a background thread between cells
		}
		w := c.stdout
		if f.T == "err" {
			w = c.stderr
		}
		_, _ = w.Write(latin1(f.D))
	case "done":
		if c != nil && f.ID == c.id {
			select {
			case c.done <- f:
			default:
			}
		}
	}
}

// latin1 turns the kernel's latin-1 decoded text back into the bytes the
// cell wrote.
func latin1(s string) []byte {
	b := make([]byte, 0, len(s))
	for _, r := range s {
		b = append(b, byte(r))
	}
	return b
}

// errKernelDied is returned by run when the process ended during a cell.
var errKernelDied = errors.New("the Python kernel died")

// errHardTimeout is returned by run when the cell ignored its time limit
// and the kernel had to be killed.
var errHardTimeout = errors.New("the cell did not stop at its time limit")

// run executes code as the next cell, writing its output to stdout and
// stderr, and returns the kernel's final frame. If the cell does not
// finish within timeout plus grace, or ctx ends, the kernel is killed and
// run returns errHardTimeout or ctx's error; if the process dies, it
// returns errKernelDied.
func (k *kernel) run(ctx context.Context, code string, timeout, grace time.Duration, stdout, stderr io.Writer) (frame, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.nextID++
	c := &cell{id: k.nextID, stdout: stdout, stderr: stderr, done: make(chan frame, 1)}
	k.smu.Lock()
	k.cur = c
	k.smu.Unlock()
	defer func() {
		k.smu.Lock()
		k.cur = nil
		k.smu.Unlock()
	}()
	req, _ := json.Marshal(map[string]any{"id": c.id, "code": code, "timeout": timeout.Seconds()})
	if _, err := k.stdin.Write(append(req, '\n')); err != nil {
		k.close()
		<-k.exited
		return frame{}, errKernelDied
	}
	t := time.NewTimer(timeout + grace)
	defer t.Stop()
	select {
	case f := <-c.done:
		return f, nil
	case <-k.exited:
		// The process may have finished the cell just before it died.
		select {
		case f := <-c.done:
			return f, nil
		default:
		}
		return frame{}, errKernelDied
	case <-t.C:
		k.close()
		<-k.exited
		return frame{}, errHardTimeout
	case <-ctx.Done():
		k.close()
		<-k.exited
		return frame{}, context.Cause(ctx)
	}
}
