// Package connect is how Keel connects to a credential provider and
// opens the credential vault, for any front end: the vault's keys (from
// the environment or the key file, GenerateKey, Explain), Connect
// (authorization code with PKCE over a loopback redirect, RFC 8252, or
// the device flow), StoreSecret, and the end of the waits of the calls
// that waited for a grant or a secret. The OAuth mechanics (PKCE,
// device, callback checks, storage) are package credential's; the
// commands are internal/cli's, their printing internal/tui's.
package connect

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/credential"
	"github.com/keel-run/keel/identity"
	"github.com/keel-run/keel/journal"
)

// KeyPath is the default vault key file, $KEEL_HOME/vault.key.
func KeyPath(getenv func(string) string, home string) string {
	if p := getenv("KEEL_VAULT_KEY_FILE"); p != "" {
		return p
	}
	return filepath.Join(home, "vault.key")
}

// Keys returns the vault keys: KEEL_VAULT_KEY (the key text), else
// the key file (KEEL_VAULT_KEY_FILE, else $KEEL_HOME/vault.key), then
// KEEL_VAULT_OLD_KEY_FILE (during a rotation, to open what the old key
// sealed). No key is not an error: listings work, issuing does not.
func Keys(getenv func(string) string, home string) ([]*credential.Key, error) {
	var keys []*credential.Key
	if s := getenv("KEEL_VAULT_KEY"); s != "" {
		k, err := credential.ParseKey([]byte(s))
		if err != nil {
			return nil, fmt.Errorf("KEEL_VAULT_KEY: %w", err)
		}
		keys = append(keys, k)
	} else if k, err := ReadKeyFile(KeyPath(getenv, home)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	} else if k != nil {
		keys = append(keys, k)
	}
	if p := getenv("KEEL_VAULT_OLD_KEY_FILE"); p != "" {
		k, err := ReadKeyFile(p)
		if err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	return keys, nil
}

// ReadKeyFile reads a vault key file.
func ReadKeyFile(p string) (*credential.Key, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("vault key: %w", err)
	}
	k, err := credential.ParseKey(b)
	if err != nil {
		return nil, fmt.Errorf("vault key %s: %w", p, err)
	}
	return k, nil
}

// OpenVault returns the vault of store, with keys and clock (nil:
// time.Now), and the agent
// directory's check (a revoked agent gets no credential).
func OpenVault(store journal.Store, keys []*credential.Key, clock func() time.Time) (*credential.Vault, error) {
	dir := identity.NewDirectory(store, nil)
	return credential.New(store, &credential.Options{Keys: keys, Clock: clock, Check: func(ctx context.Context, agent, user string) error {
		_, err := dir.Check(ctx, agent, user)
		return err
	}})
}

// WhoFor names an agent, and the user it acts for.
func WhoFor(agent, user string) string {
	if user == "" {
		return agent
	}
	return agent + " acting for " + user
}

// ResolveWaits ends the waits of every call that waits for g's (agent,
// user, provider).
func ResolveWaits(ctx context.Context, rt *agent.Runtime, g *credential.Grant, by string) (int, error) {
	ended, err := rt.ResolveAuthsFor(ctx, g.Provider, g.Agent, g.User, &agent.AuthResolved{Grant: g.ID, By: by})
	return len(ended), err
}

// Loopback runs authorization code + PKCE with a loopback
// redirect (RFC 8252 §7.3): a listener on 127.0.0.1 serves /callback
// until one valid response arrived or ctx ends. It prints the URL to
// open on out.
func Loopback(ctx context.Context, out io.Writer, v *credential.Vault, cp *credential.ConnectParams, port int) (*credential.Grant, error) {
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return nil, fmt.Errorf("loopback redirect: %w", err)
	}
	defer ln.Close()
	cp.RedirectURL = fmt.Sprintf("http://%s/callback", ln.Addr())
	pend, err := v.BeginConnect(ctx, cp)
	if err != nil {
		return nil, err
	}
	type outcome struct {
		g   *credential.Grant
		err error
	}
	done := make(chan outcome, 1)
	mux := http.NewServeMux()
	mux.Handle("GET /callback", v.CallbackHandler(func(g *credential.Grant, err error) {
		if errors.Is(err, credential.ErrBadState) {
			return // a stray or replayed request: keep waiting for ours
		}
		select {
		case done <- outcome{g, err}:
		default:
		}
	}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	defer func() {
		// Shutdown, not Close: the browser still gets the page of the
		// response that ended the wait (Close would cut it off).
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if srv.Shutdown(sctx) != nil {
			srv.Close()
		}
	}()
	fmt.Fprintf(out, "open this URL in a browser to authorize %s at %s:\n\n  %s\n\nwaiting for the answer on %s (until %s) ...\n",
		WhoFor(cp.Agent, cp.User), cp.Provider, pend.URL, cp.RedirectURL, pend.Expires.Local().Format(time.Kitchen))
	wctx, cancel := context.WithDeadline(ctx, pend.Expires)
	defer cancel()
	select {
	case o := <-done:
		return o.g, o.err
	case <-wctx.Done():
		return nil, fmt.Errorf("no authorization arrived: %w", wctx.Err())
	}
}
