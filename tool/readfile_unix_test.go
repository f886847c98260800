//go:build unix

package tool_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/keel-run/keel/tool"
)

// ReadRegular reads regular files inside its root and refuses, without
// blocking, everything a workspace could hold in their place.
func TestReadRegular(t *testing.T) {
	outside := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(outside, []byte("HOST-SECRET"), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(dir, "plain"), []byte("hello"), 0o644))
	must(os.WriteFile(filepath.Join(dir, "long"), []byte(strings.Repeat("x", 100)), 0o644))
	must(os.Symlink("plain", filepath.Join(dir, "inside")))
	must(os.Symlink(outside, filepath.Join(dir, "outside")))
	must(os.Symlink("/dev/zero", filepath.Join(dir, "zero")))
	must(syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644))
	must(os.Mkdir(filepath.Join(dir, "sub"), 0o755))
	root, err := os.OpenRoot(dir)
	must(err)
	defer root.Close()
	for _, tt := range []struct {
		name, want string
		is         error // nil: any error; "" want means an error
	}{
		{"plain", "hello", nil},
		{"inside", "hello", nil},
		{"long", strings.Repeat("x", 11), nil},
		{"missing", "", fs.ErrNotExist},
		{"outside", "", nil},
		{"zero", "", nil},
		{"fifo", "", tool.ErrNotRegular},
		{"sub", "", tool.ErrNotRegular},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b, err := tool.ReadRegular(root, tt.name, 10)
			switch {
			case tt.want != "" && (err != nil || string(b) != tt.want):
				t.Errorf("ReadRegular(%s) = %q, %v; want %q", tt.name, b, err, tt.want)
			case tt.want == "" && err == nil:
				t.Errorf("ReadRegular(%s) = %q, want an error", tt.name, b)
			case tt.want == "" && tt.is != nil && !errors.Is(err, tt.is):
				t.Errorf("ReadRegular(%s) error %v, want %v", tt.name, err, tt.is)
			}
			if strings.Contains(string(b), "SECRET") {
				t.Errorf("ReadRegular(%s) read the file outside the root", tt.name)
			}
		})
	}
}
