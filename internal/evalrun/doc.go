// Package evalrun runs evaluations and re-executions of journaled runs
// on this machine: the executor of an evaluation's trials ([Exec]: each
// prepared and journaled by the service like keel run's runs, wired by
// the run builder, executed unattended, then checked in its sandbox),
// the evaluations kept under Keel's home ([Host]), the re-execution of a
// run from its journal ([Replay]) and the freezing of a run into an
// evaluation case ([Freeze]). The command line reads the flags and
// prints; this package does the work (docs/eval.md).
package evalrun

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// ErrRefused marks an error that is the caller's input's fault (a run
// that has not ended, a directory that is not empty, a result that
// cannot be read): the command line exits 2 with its message.
var ErrRefused = errors.New("evalrun: refused")

type refused struct{ msg string }

func (e *refused) Error() string        { return e.msg }
func (e *refused) Is(target error) bool { return target == ErrRefused }

func refusef(format string, args ...any) error { return &refused{fmt.Sprintf(format, args...)} }

// EmptyDir accepts a directory that does not exist or is empty (what
// flag names it, for the message).
func EmptyDir(dir, flag string) error {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if len(ents) > 0 {
		return refusef("%s %s is not empty: name a new or empty directory", flag, dir)
	}
	return nil
}
