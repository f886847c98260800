//go:build unix

package none

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// homePrefix starts the name of every private HOME directory, which New
// makes in the temporary directory (os.TempDir) and Close removes.
const homePrefix = "keel-none-home-"

// newHome makes the private HOME directory of a sandbox of this process:
// keel-none-home-<pid namespace>-<pid>-<random>. A process that ends
// without Close (kill -9) leaves its homes behind; newHome then removes
// those of processes of this pid namespace that are gone (they can no
// longer be in use: each belongs to one process).
func newHome() (string, error) {
	ns := pidNamespace()
	home, err := os.MkdirTemp("", fmt.Sprintf("%s%s-%d-", homePrefix, ns, os.Getpid()))
	if err != nil {
		return "", err
	}
	if ns != "" {
		removeStaleHomes(os.TempDir(), ns)
	}
	return home, nil
}

// removeStaleHomes removes, in dir, the homes this user made in pid
// namespace ns for processes that no longer exist. Anything it cannot
// attribute surely (another namespace, another owner, a link, a name of
// another shape, a live pid) stays.
func removeStaleHomes(dir, ns string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), homePrefix+ns+"-")
		if !ok || !e.IsDir() {
			continue
		}
		pidText, _, ok := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if !ok || err != nil || pid <= 0 || alive(pid) {
			continue
		}
		p := filepath.Join(dir, e.Name())
		fi, err := os.Lstat(p)
		if err != nil || !fi.IsDir() {
			continue
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != os.Getuid() {
			continue
		}
		os.RemoveAll(p)
	}
}

// alive reports whether process pid exists (EPERM: it does, as another
// user's).
func alive(pid int) bool {
	err := unix.Kill(pid, 0)
	return err == nil || errors.Is(err, unix.EPERM)
}
