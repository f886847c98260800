package connect

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/credential"
	"github.com/keel-run/keel/identity"
)

// ErrKeyExists is GenerateKey's refusal to replace a key without force.
var ErrKeyExists = errors.New("a vault key exists")

// ErrNoWait is returned by [Connect] and [FillFromWait] when the run
// named does not wait for an authorization (of the call named).
var ErrNoWait = errors.New("waits for no authorization")

// ErrNoProvider is returned by [Connect] when no provider is named and
// no run's wait names one.
var ErrNoProvider = errors.New("name the provider (or --run RUN of a run that waits for one)")

// GenerateKey writes a new vault key to the file p (mode 0600, its
// directory made 0700). An existing file is replaced only with force:
// a new key cannot open what the old one sealed ([ErrKeyExists]).
func GenerateKey(p string, force bool) error {
	flags := os.O_WRONLY | os.O_CREATE | os.O_EXCL
	if force {
		flags = os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(p, flags, 0o600)
	if errors.Is(err, os.ErrExist) {
		return fmt.Errorf("%s exists: %w", p, ErrKeyExists)
	}
	if err != nil {
		return err
	}
	if _, err := f.Write(credential.GenerateKey()); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Explain adds to the vault's key errors what to do about them; keyPath
// is the key file in use ([KeyPath]).
func Explain(err error, keyPath string) error {
	switch {
	case errors.Is(err, credential.ErrNoKey):
		return fmt.Errorf("%w\nmake a vault key with 'keel auth key generate' (%s), or point KEEL_VAULT_KEY_FILE at yours", err, keyPath)
	case errors.Is(err, credential.ErrWrongKey):
		return fmt.Errorf("%w\nthe vault key in use (%s or KEEL_VAULT_KEY) is not the one that sealed it: nothing was decrypted or changed", err, keyPath)
	}
	return err
}

// Flow says how [Connect] obtains the grant.
type Flow struct {
	// Device runs the device flow (RFC 8628) instead of authorization
	// code with a loopback redirect.
	Device bool
	// Port is the loopback redirect's port (0: any free port).
	Port int
	// Out is where the URL (or the device code) to open is printed.
	Out io.Writer
	// By is who connects, recorded in the waits it ends.
	By string
}

// Connected is what [Connect] did: the grant stored, and how many
// waiting calls it let go on.
type Connected struct {
	Grant   *credential.Grant
	Resumed int
}

// Connect authorizes Keel at a provider for an agent (acting for a
// user) and stores the grant in v: with cp.RunID, the provider, agent,
// user and scopes are those the run's call waits for ([FillFromWait]);
// the agent defaults to identity.LocalAgent. Afterwards every call that
// waits for this (agent, user, provider) may run ([ResolveWaits]).
func Connect(ctx context.Context, rt *agent.Runtime, v *credential.Vault, cp *credential.ConnectParams, f *Flow) (*Connected, error) {
	if cp.RunID != "" {
		if err := FillFromWait(ctx, rt, cp); err != nil {
			return nil, err
		}
	}
	if cp.Provider == "" {
		return nil, ErrNoProvider
	}
	if cp.Agent == "" {
		cp.Agent = identity.LocalAgent
	}
	var g *credential.Grant
	var err error
	if f.Device {
		g, err = v.ConnectDevice(ctx, cp, func(uri, code string) {
			fmt.Fprintf(f.Out, "open %s and enter the code %s\n", uri, code)
		})
	} else {
		g, err = Loopback(ctx, f.Out, v, cp, f.Port)
	}
	if err != nil {
		return nil, err
	}
	n, err := ResolveWaits(ctx, rt, g, f.By)
	return &Connected{Grant: g, Resumed: n}, err
}

// FillFromWait takes provider, agent, user and scopes from the waiting
// call cp.CallID of run cp.RunID (the first waiting one when CallID is
// ""); a provider or scopes given stay.
func FillFromWait(ctx context.Context, rt *agent.Runtime, cp *credential.ConnectParams) error {
	st, _, err := rt.Load(ctx, cp.RunID)
	if err != nil {
		return err
	}
	for _, w := range st.PendingAuths() {
		if cp.CallID == "" || w.CallID == cp.CallID {
			cp.CallID = w.CallID
			if cp.Provider == "" {
				cp.Provider = w.Provider
			}
			cp.Agent, cp.User = w.Agent, w.User
			if len(cp.Scopes) == 0 {
				cp.Scopes = w.Scopes
			}
			return nil
		}
	}
	if cp.CallID != "" {
		return fmt.Errorf("run %s %w of call %s", cp.RunID, ErrNoWait, cp.CallID)
	}
	return fmt.Errorf("run %s %w", cp.RunID, ErrNoWait)
}

// StoreSecret seals a static secret (such as sql:NAME, a user's
// database connection string) for (agentName, user) and ends the waits
// of the calls that wait for it. It returns the stored secret (its
// hash, never its value) and how many calls may now run.
func StoreSecret(ctx context.Context, rt *agent.Runtime, v *credential.Vault, name, agentName, user, value, by string) (*credential.Secret, int, error) {
	s, err := v.PutSecret(ctx, name, agentName, user, value, by)
	if err != nil {
		return nil, 0, err
	}
	n, err := ResolveSecretWaits(ctx, rt, s, by)
	return s, n, err
}

// ResolveSecretWaits ends the waits of every call that waits for the
// secret s (same name, agent and user).
func ResolveSecretWaits(ctx context.Context, rt *agent.Runtime, s *credential.Secret, by string) (int, error) {
	waits, err := rt.AuthWaits(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, w := range waits {
		if w.Provider != s.Name || w.Agent != s.Agent || w.User != s.User {
			continue
		}
		err := rt.ResolveAuth(ctx, w.RunID, w.CallID, &agent.AuthResolved{By: by})
		if err != nil && !errors.Is(err, agent.ErrNoAuthWait) {
			return n, err
		}
		if err == nil {
			n++
		}
	}
	return n, nil
}

// WithJWKS serves the agents' public keys of v at
// /.well-known/jwks.json beside h (keel serve).
func WithJWKS(h http.Handler, v *credential.Vault) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /.well-known/jwks.json", v.JWKSHandler())
	mux.Handle("/", h)
	return mux
}
