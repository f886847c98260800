package assemble

import (
	"context"
	"errors"
	"sync"

	"github.com/keel-run/keel/credential"
	"github.com/keel-run/keel/journal"
)

// errNoVault is the error of a credential asked for where the assembler
// has no vault (Assembler.OpenVault is nil).
var errNoVault = errors.New("no credential vault is configured for this run")

// lazyVault is the vault of a run's tools: it opens the journal and the
// vault on first use, so that runs that never make an authorized request
// need no vault key.
type lazyVault struct {
	a     *Assembler
	once  sync.Once
	v     *credential.Vault
	store journal.Store
	err   error
}

func (l *lazyVault) get() (*credential.Vault, error) {
	l.once.Do(func() {
		if l.a.OpenVault == nil {
			l.err = errNoVault
			return
		}
		l.store, l.err = journal.Open(context.Background(), l.a.Journal)
		if l.err == nil {
			l.v, l.err = l.a.OpenVault(l.store)
		}
	})
	return l.v, l.err
}

// Credential implements httpreq.Vault.
func (l *lazyVault) Credential(ctx context.Context, r *credential.Request) (*credential.Credential, error) {
	v, err := l.get()
	if err != nil {
		return nil, err
	}
	return v.Credential(ctx, r)
}

// ProviderFor implements httpreq.Vault.
func (l *lazyVault) ProviderFor(ctx context.Context, url string) (*credential.Provider, error) {
	v, err := l.get()
	if err != nil {
		return nil, err
	}
	return v.ProviderFor(ctx, url)
}

// Provider implements mcp.Vault.
func (l *lazyVault) Provider(ctx context.Context, name string) (*credential.Provider, error) {
	v, err := l.get()
	if err != nil {
		return nil, err
	}
	return v.Provider(ctx, name)
}

// AddProvider implements mcp.Vault.
func (l *lazyVault) AddProvider(ctx context.Context, pp *credential.ProviderParams) (*credential.Provider, error) {
	v, err := l.get()
	if err != nil {
		return nil, err
	}
	return v.AddProvider(ctx, pp)
}

// SecretValue implements sqlquery.SecretVault.
func (l *lazyVault) SecretValue(ctx context.Context, name, agentName, user, run, call string) (string, error) {
	v, err := l.get()
	if err != nil {
		return "", err
	}
	return v.SecretValue(ctx, name, agentName, user, run, call)
}

func (l *lazyVault) Close() {
	if l.store != nil {
		l.store.Close()
	}
}
