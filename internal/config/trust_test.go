package config

import (
	"os"
	"path/filepath"
	"testing"
)

func TestTrustIsForTheExactContent(t *testing.T) {
	home := filepath.Join(t.TempDir(), "home")
	p := "/work/proj/.keel/config.toml"
	if Trusted(home, p, []byte("a")) {
		t.Fatal("trusted before any trust")
	}
	for range 2 { // a second trust of the same content adds no line
		if err := Trust(home, p, []byte("a")); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range []struct {
		path, content string
		want          bool
	}{{p, "a", true}, {p, "b", false}, {"/work/other/.keel/config.toml", "a", false}} {
		if got := Trusted(home, tt.path, []byte(tt.content)); got != tt.want {
			t.Errorf("Trusted(%s, %q) = %v, want %v", tt.path, tt.content, got, tt.want)
		}
	}
	b, err := os.ReadFile(TrustFile(home))
	if err != nil {
		t.Fatal(err)
	}
	if want := "ca978112ca1bbdcafac231b39a23dc4da786eff8147c4e72b9807785afee48bb " + p + "\n"; string(b) != want {
		t.Errorf("trust file %q, want %q", b, want)
	}
	if fi, err := os.Stat(TrustFile(home)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("trust file mode %v (%v), want 0600", fi.Mode(), err)
	}
}
