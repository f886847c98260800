package credential

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// KeySize is the size of a vault key: AES-256.
const KeySize = 32

// Errors about the vault key.
var (
	// ErrNoKey means the vault holds secrets but no key was given.
	ErrNoKey = errors.New("credential: no vault key")
	// ErrWrongKey means a secret was sealed under a key the vault does not
	// have, or does not open under the key it names (a wrong or damaged
	// key, or a tampered record). Nothing is decrypted.
	ErrWrongKey = errors.New("credential: secret does not open with the vault key")
)

// Key is a vault key: 32 random bytes and their id.
type Key struct {
	id   string
	aead cipher.AEAD
	// mac keys the hashes of static secrets (HKDF-SHA-256 of the key).
	mac []byte
}

// ID identifies the key without revealing it: the first 8 bytes of the
// SHA-256 of "keel vault key" and the key, in hex. Sealed secrets name
// the key that sealed them, so a wrong key is reported as such.
func (k *Key) ID() string { return k.id }

// NewKey returns a key from 32 bytes.
func NewKey(b []byte) (*Key, error) {
	if len(b) != KeySize {
		return nil, fmt.Errorf("credential: a vault key has %d bytes, not %d", KeySize, len(b))
	}
	block, err := aes.NewCipher(b)
	if err != nil {
		return nil, fmt.Errorf("credential: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("credential: %w", err)
	}
	h := sha256.Sum256(append([]byte("keel vault key\x00"), b...))
	mac, err := hkdf.Key(sha256.New, b, nil, "keel vault secret hash", sha256.Size)
	if err != nil {
		return nil, fmt.Errorf("credential: %w", err)
	}
	return &Key{id: hex.EncodeToString(h[:8]), aead: aead, mac: mac}, nil
}

// secretHash is how events and listings name a static secret: "hmac:"
// and the first 16 hex digits of its HMAC-SHA-256 under a key derived
// from the vault key. Unlike [TokenHash] (of high-entropy tokens) it is
// keyed: a static secret can be a short password, which an unkeyed hash
// in the journal would let anyone reading it guess offline.
func (k *Key) secretHash(value string) string {
	m := hmac.New(sha256.New, k.mac)
	m.Write([]byte(value))
	return secretHashPrefix + hex.EncodeToString(m.Sum(nil)[:8])
}

// secretHashPrefix starts a keyed secret hash; a secret stored before
// has an unkeyed "sha256:" one until the next key rotation.
const secretHashPrefix = "hmac:"

// ParseKey reads a key as written by [GenerateKey]: 64 hex digits or
// standard base64 of 32 bytes, surrounding white space ignored.
func ParseKey(text []byte) (*Key, error) {
	s := strings.TrimSpace(string(text))
	if b, err := hex.DecodeString(s); err == nil && len(b) == KeySize {
		return NewKey(b)
	}
	if b, err := base64.StdEncoding.DecodeString(s); err == nil && len(b) == KeySize {
		return NewKey(b)
	}
	return nil, fmt.Errorf("credential: a vault key is 64 hex digits or base64 of %d bytes (make one with keel auth key generate)", KeySize)
}

// GenerateKey returns the text of a new random key (64 hex digits and a
// newline).
func GenerateKey() []byte {
	b := make([]byte, KeySize)
	rand.Read(b)
	return []byte(hex.EncodeToString(b) + "\n")
}

// sealed is an encrypted secret as stored: the key id, the nonce and the
// AES-256-GCM ciphertext with its tag. The additional data binds it to
// its record (kind and key), so a sealed secret copied into another
// record does not open.
type sealed struct {
	KeyID string `json:"kid"`
	Nonce []byte `json:"n"`
	Data  []byte `json:"c"`
}

func aad(kind, key string) []byte { return []byte("keel.vault\x00" + kind + "\x00" + key) }

// seal encrypts the JSON of v for the record kind/key.
func (k *Key) seal(kind, key string, v any) (*sealed, error) {
	plain, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("credential: %w", err)
	}
	nonce := make([]byte, k.aead.NonceSize())
	rand.Read(nonce)
	return &sealed{KeyID: k.id, Nonce: nonce, Data: k.aead.Seal(nil, nonce, plain, aad(kind, key))}, nil
}

// open decrypts s into v with the first of keys whose id it names.
func open(keys []*Key, kind, key string, s *sealed, v any) error {
	if s == nil {
		return nil
	}
	if len(keys) == 0 {
		return fmt.Errorf("%w: %s %s is encrypted under vault key %s", ErrNoKey, kind, key, s.KeyID)
	}
	for _, k := range keys {
		if k.id != s.KeyID {
			continue
		}
		plain, err := k.aead.Open(nil, s.Nonce, s.Data, aad(kind, key))
		if err != nil {
			return fmt.Errorf("%w: %s %s does not decrypt under key %s (tampered or damaged)", ErrWrongKey, kind, key, k.id)
		}
		if err := json.Unmarshal(plain, v); err != nil {
			return fmt.Errorf("credential: %s %s: %w", kind, key, err)
		}
		return nil
	}
	return fmt.Errorf("%w: %s %s is encrypted under vault key %s; this keel has key %s", ErrWrongKey, kind, key, s.KeyID, keys[0].id)
}

// TokenHash is how events and listings name a token: "sha256:" and the
// first 16 hex digits of its SHA-256, enough to match a token one holds
// against the audit trail, too little to be of use to anyone else.
func TokenHash(token string) string {
	if token == "" {
		return ""
	}
	h := sha256.Sum256([]byte(token))
	return "sha256:" + hex.EncodeToString(h[:8])
}
