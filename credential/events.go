package credential

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/keel-run/keel/journal"
)

// StreamID is the system stream of the vault's events. Its id starts
// with "_keel.", so run listings skip it and keel audit verify --all
// checks its chain.
const StreamID = "_keel.credentials"

// Event types of [StreamID]. Payloads carry ids, names, scopes, issuers
// and token hashes, never a token or a secret.
const (
	EventProviderAdded journal.Type = "credential.provider_added"
	EventGranted       journal.Type = "credential.granted"
	EventRefreshed     journal.Type = "credential.refreshed"
	EventUsed          journal.Type = "credential.used"
	EventRevoked       journal.Type = "credential.revoked"
	// EventReplaced: a new authorization replaced the grant.
	EventReplaced journal.Type = "credential.replaced"
	// EventExpired: the grant can no longer be refreshed.
	EventExpired journal.Type = "credential.expired"
	// EventExchanged: a delegated token was obtained (RFC 8693).
	EventExchanged journal.Type = "credential.exchanged"
	// EventRekeyed: every secret was sealed again under a new key.
	EventRekeyed journal.Type = "credential.rekeyed"
)

// Payloads of the vault's events; exported field names are the audit
// trail's vocabulary.
type (
	providerPayload struct {
		Name      string   `json:"name"`
		Issuer    string   `json:"issuer"`
		ClientID  string   `json:"client_id"`
		Scopes    []string `json:"scopes,omitempty"`
		Resources []string `json:"resources,omitempty"`
		HasSecret bool     `json:"has_secret,omitempty"`
		By        string   `json:"by,omitempty"`
	}
	grantedPayload struct {
		Grant       string    `json:"grant"`
		Provider    string    `json:"provider"`
		Issuer      string    `json:"issuer"`
		Agent       string    `json:"agent"`
		User        string    `json:"user,omitempty"`
		Scopes      []string  `json:"scopes"`
		Via         string    `json:"via"`
		Run         string    `json:"run,omitempty"`
		Call        string    `json:"call,omitempty"`
		TokenHash   string    `json:"token_hash"`
		RefreshHash string    `json:"refresh_hash,omitempty"`
		Expiry      time.Time `json:"expiry,omitzero"`
	}
	refreshedPayload struct {
		Grant       string    `json:"grant"`
		Provider    string    `json:"provider"`
		Agent       string    `json:"agent"`
		User        string    `json:"user,omitempty"`
		TokenHash   string    `json:"token_hash"`
		RefreshHash string    `json:"refresh_hash,omitempty"`
		Rotated     bool      `json:"rotated,omitempty"`
		Expiry      time.Time `json:"expiry,omitzero"`
		Scopes      []string  `json:"scopes,omitempty"`
	}
	usedPayload struct {
		Grant     string   `json:"grant"`
		Provider  string   `json:"provider"`
		Agent     string   `json:"agent"`
		User      string   `json:"user,omitempty"`
		Actor     []string `json:"actor,omitempty"`
		Run       string   `json:"run"`
		Call      string   `json:"call,omitempty"`
		Method    string   `json:"method,omitempty"`
		Resource  string   `json:"resource,omitempty"`
		Scopes    []string `json:"scopes"`
		TokenHash string   `json:"token_hash"`
	}
	revokedPayload struct {
		Grant    string `json:"grant"`
		Provider string `json:"provider"`
		Agent    string `json:"agent"`
		User     string `json:"user,omitempty"`
		By       string `json:"by,omitempty"`
		Reason   string `json:"reason,omitempty"`
		// AtServer says whether the authorization server confirmed the
		// revocation (RFC 7009); ServerError why not.
		AtServer    bool   `json:"at_server,omitempty"`
		ServerError string `json:"server_error,omitempty"`
	}
)

// audit appends one event to [StreamID]. Appends of this process are
// serialised; another process appending first is retried.
func (v *Vault) audit(ctx context.Context, typ journal.Type, payload any) error {
	b, err := json.Marshal(payload)
	if err != nil {
		return fmt.Errorf("credential: %w", err)
	}
	ctx = context.WithoutCancel(ctx)
	v.auditMu.Lock()
	defer v.auditMu.Unlock()
	for attempt := 0; ; attempt++ {
		last, err := v.auditHead(ctx)
		if err != nil {
			return err
		}
		_, err = v.store.Append(ctx, StreamID, last, journal.Draft{Type: typ, Time: v.now(), Payload: b})
		if errors.Is(err, journal.ErrConflict) && attempt < 100 {
			continue
		}
		if err != nil {
			v.log.Error("credential event not journaled", "type", string(typ), "error", err)
			return fmt.Errorf("credential: journal %s: %w", typ, err)
		}
		return nil
	}
}

func (v *Vault) auditHead(ctx context.Context) (int64, error) {
	if h, ok := v.store.(journal.Head); ok {
		seq, _, err := h.Head(ctx, StreamID)
		if errors.Is(err, journal.ErrNotFound) {
			return 0, nil
		}
		return seq, err
	}
	evs, err := v.store.Read(ctx, StreamID, 1)
	if errors.Is(err, journal.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return int64(len(evs)), nil
}
