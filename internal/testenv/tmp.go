package testenv

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// Main runs the tests of m (call it from TestMain: os.Exit(testenv.Main(m)))
// with TMPDIR set to a new directory of their own, in the system's
// temporary directory, and returns their exit code. Whatever the tests
// and the processes they start make with os.MkdirTemp or os.CreateTemp
// and do not remove (a demo's workspace, a command's scratch file) lands
// there: Main then names it, fails the tests (exit code 1) and removes
// the directory, so nothing a test forgot is left in /tmp. Each test
// binary checks only its own directory, so packages tested in parallel
// do not see each other's files.
func Main(m *testing.M) int {
	orig, had := os.LookupEnv("TMPDIR")
	dir, err := os.MkdirTemp("", "kt")
	if err != nil {
		fmt.Fprintf(os.Stderr, "testenv: %v\n", err)
		return 1
	}
	os.Setenv("TMPDIR", dir)
	code := m.Run()
	if had {
		os.Setenv("TMPDIR", orig)
	} else {
		os.Unsetenv("TMPDIR")
	}
	if left := leftIn(dir); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "FAIL: the tests left %d file(s) in their temporary directory (TMPDIR), which they must remove (use t.TempDir): %s\n", len(left), strings.Join(left, ", "))
		code = 1
	}
	os.RemoveAll(dir)
	return code
}

// leftIn lists the entries of dir.
func leftIn(dir string) []string {
	ents, _ := os.ReadDir(dir)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}
