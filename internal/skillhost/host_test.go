package skillhost

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/service"
	"github.com/keel-run/keel/skill"
)

// A lockfile the host pins is trusted as written; any other content of
// it is not, until the person trusts it.
func TestPinTrustsTheLockfileItWrites(t *testing.T) {
	h := &Host{Home: t.TempDir()}
	ws := t.TempDir()
	lib := h.Library(ws)
	if err := h.Pin(ws, skill.Pinned{Name: "fmt", Digest: "sha256:" + strings.Repeat("ab", 32), Source: skill.SourceIndex}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(ws, skill.LockFile))
	if err != nil {
		t.Fatal(err)
	}
	if !lib.LockTrusted(b) {
		t.Error("the pinned lockfile is not trusted")
	}
	if lib.LockTrusted(append(b, ' ')) {
		t.Error("a changed lockfile is trusted")
	}
	if other := (&Host{Home: t.TempDir()}).Library(ws); other.LockTrusted(b) {
		t.Error("another home trusts the lockfile")
	}
}

// What is not an export is the caller's mistake, and names the line.
func TestReadExportRefusesWhatIsNoExport(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct{ name, content, want string }{
		{"missing", "", "no such file"},
		{"bad-skill", `{"skill": 3}` + "\n", "bad-skill:1: not a skill"},
		{"not-json", "{\n", "nothing was stored"},
	} {
		p := filepath.Join(dir, tt.name)
		if tt.name != "missing" {
			if err := os.WriteFile(p, []byte(tt.content), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		_, err := ReadExport(p)
		var se *service.Error
		if !errors.As(err, &se) || se.Code != api.CodeInvalidRequest || !strings.Contains(se.Message, tt.want) {
			t.Errorf("%s: %v, want an invalid request saying %q", tt.name, err, tt.want)
		}
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if x, err := ReadExport(empty); err != nil || len(x.events)+len(x.bundles) != 0 {
		t.Errorf("empty export: %+v, %v", x, err)
	}
}
