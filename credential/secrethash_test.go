package credential_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keel-run/keel/credential"
	"github.com/keel-run/keel/journal"
)

// A static secret is named in events and listings by a hash keyed with
// the vault key: the journal's files never hold the secret, nor its
// unkeyed SHA-256 (a short password could be guessed from it offline),
// and the hash of the same secret differs under another vault key. The
// stored and used events name it alike, and a key rotation keeps that.
func TestSecretHashIsKeyed(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	const secret = "hunter2" // low entropy: the kind a hash would give away
	sum := sha256.Sum256([]byte(secret))
	unkeyed := hex.EncodeToString(sum[:])
	s, err := e.vault.PutSecret(ctx, "sql:shop", "helper", "ann", secret, "ann")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(s.Hash, "hmac:") || len(s.Hash) != len("hmac:")+16 {
		t.Errorf("hash %q, want hmac: and 16 hex digits", s.Hash)
	}
	if _, err := e.vault.SecretValue(ctx, "sql:shop", "helper", "ann", "run-1", "call-1"); err != nil {
		t.Fatal(err)
	}
	other, err := credential.ParseKey(credential.GenerateKey())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.vault.Rekey(ctx, other); err != nil {
		t.Fatal(err)
	}
	rotated, err := credential.New(e.store, &credential.Options{Keys: []*credential.Key{other}, Clock: e.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rotated.SecretValue(ctx, "sql:shop", "helper", "ann", "run-2", "call-1"); err != nil {
		t.Fatal(err)
	}
	// The same secret under another vault key has another hash.
	again, err := rotated.PutSecret(ctx, "sql:other", "helper", "ann", secret, "ann")
	if err != nil {
		t.Fatal(err)
	}
	if again.Hash == s.Hash {
		t.Errorf("the same secret has hash %s under two vault keys: the hash is not keyed", s.Hash)
	}
	evs, err := e.store.Read(ctx, credential.StreamID, 1)
	if err != nil {
		t.Fatal(err)
	}
	var hashes []string
	for _, ev := range evs {
		if ev.Type != credential.EventSecretStored && ev.Type != credential.EventSecretUsed {
			continue
		}
		var p struct {
			Name string `json:"name"`
			Hash string `json:"hash"`
		}
		if err := json.Unmarshal(ev.Payload, &p); err != nil {
			t.Fatal(err)
		}
		if p.Name == "sql:shop" {
			hashes = append(hashes, string(ev.Type)+" "+p.Hash)
		}
	}
	want := []string{"credential.secret_stored " + s.Hash, "credential.secret_used " + s.Hash, "credential.secret_used " + s.Hash}
	if strings.Join(hashes, "\n") != strings.Join(want, "\n") {
		t.Errorf("events of the secret:\n%s\nwant:\n%s", strings.Join(hashes, "\n"), strings.Join(want, "\n"))
	}
	e.store.Close()
	// Every file of the journal (database, WAL, leases), raw.
	files, _ := filepath.Glob(e.path + "*")
	if len(files) == 0 {
		t.Fatal("no journal files")
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // a directory (the leases)
		}
		for _, canary := range []string{secret, unkeyed[:16], unkeyed} {
			if strings.Contains(string(b), canary) {
				t.Errorf("%s holds %q (the secret or its unkeyed SHA-256)", filepath.Base(f), canary)
			}
		}
	}
}

// A secret stored before hashes were keyed (its record names an unkeyed
// "sha256:" hash) is used under a keyed hash, and a key rotation gives
// its record one.
func TestLegacySecretHashReplaced(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	if _, err := e.vault.PutSecret(ctx, "old", "helper", "", "s3cret", "ann"); err != nil {
		t.Fatal(err)
	}
	recs := e.store.(journal.Records)
	rec, err := recs.GetRecord(ctx, "vault.secret", "old/helper/")
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(rec.Value, &m); err != nil {
		t.Fatal(err)
	}
	legacy := credential.TokenHash("s3cret")
	m["hash"] = legacy
	b, _ := json.Marshal(m)
	if _, err := recs.PutRecord(ctx, "vault.secret", "old/helper/", b, rec.Version); err != nil {
		t.Fatal(err)
	}
	if _, err := e.vault.SecretValue(ctx, "old", "helper", "", "run-1", "call-1"); err != nil {
		t.Fatal(err)
	}
	evs, err := e.store.Read(ctx, credential.StreamID, 1)
	if err != nil {
		t.Fatal(err)
	}
	last := evs[len(evs)-1]
	if last.Type != credential.EventSecretUsed || strings.Contains(string(last.Payload), legacy) || !strings.Contains(string(last.Payload), `"hash":"hmac:`) {
		t.Errorf("use of a legacy secret journaled %s %s", last.Type, last.Payload)
	}
	other, _ := credential.ParseKey(credential.GenerateKey())
	if _, err := e.vault.Rekey(ctx, other); err != nil {
		t.Fatal(err)
	}
	list, err := e.vault.Secrets(ctx)
	if err != nil || len(list) != 1 || !strings.HasPrefix(list[0].Hash, "hmac:") {
		t.Errorf("after a rotation: %+v %v, want a keyed hash", list, err)
	}
}
