package connect

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/keel-run/keel/credential"
)

func TestGenerateKey(t *testing.T) {
	p := filepath.Join(t.TempDir(), "home", "vault.key")
	if err := GenerateKey(p, false); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", fi.Mode().Perm())
	}
	first, err := ReadKeyFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := GenerateKey(p, false); !errors.Is(err, ErrKeyExists) {
		t.Fatalf("second key without force: %v, want ErrKeyExists", err)
	}
	if k, _ := ReadKeyFile(p); k.ID() != first.ID() {
		t.Fatal("a refused generate changed the key")
	}
	if err := GenerateKey(p, true); err != nil {
		t.Fatal(err)
	}
	if k, _ := ReadKeyFile(p); k.ID() == first.ID() {
		t.Fatal("--force kept the old key")
	}
}

func TestExplain(t *testing.T) {
	for _, err := range []error{credential.ErrNoKey, credential.ErrWrongKey} {
		got := Explain(err, "/k/vault.key")
		if !errors.Is(got, err) {
			t.Errorf("%v: lost the error", err)
		}
		if got.Error() == err.Error() {
			t.Errorf("%v: no advice added", err)
		}
	}
	other := errors.New("x")
	if Explain(other, "p") != other {
		t.Error("other errors are returned as they are")
	}
}
