package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/keel-run/keel/tool"
)

// maxPolicyBytes bounds a policy file.
const maxPolicyBytes = 4 << 20

// readPolicyFile reads the policy file p the way Keel reads any file a
// run's workspace may hold (a policy often lives in the repository):
// only a regular file (a FIFO put in its place would block the open
// forever, /dev/zero would never end), opened without blocking, at most
// maxPolicyBytes.
//
// Its errors name p as given (the path the user typed), not the
// directory or base name it opens.
func readPolicyFile(p string) ([]byte, error) {
	named := p
	// The user named this path: symbolic links in it may lead anywhere,
	// as the user chose.
	if real, err := filepath.EvalSymlinks(p); err == nil {
		p = real
	}
	root, err := os.OpenRoot(filepath.Dir(p))
	if err != nil {
		return nil, policyFileError(named, err)
	}
	defer root.Close()
	b, err := tool.ReadRegular(root, filepath.Base(p), maxPolicyBytes)
	if err != nil {
		return nil, policyFileError(named, err)
	}
	if len(b) > maxPolicyBytes {
		return nil, fmt.Errorf("%s is larger than %d bytes", named, maxPolicyBytes)
	}
	return b, nil
}

// policyFileError is err, from reading the policy file named, as an
// error that names it.
func policyFileError(named string, err error) error {
	if errors.Is(err, tool.ErrNotRegular) {
		// "tool: read NAME: not a regular file (a FIFO)": keep what
		// follows NAME.
		_, why, _ := strings.Cut(err.Error(), ": ")
		_, why, _ = strings.Cut(why, ": ")
		return fmt.Errorf("read %s: %s", named, why)
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		if errors.Is(pe.Err, fs.ErrNotExist) && !strings.ContainsRune(named, '/') {
			return fmt.Errorf("read %s: %w (a policy file; the built-in policies are default and demo)", named, pe.Err)
		}
		return fmt.Errorf("read %s: %w", named, pe.Err)
	}
	return fmt.Errorf("read %s: %w", named, err)
}
