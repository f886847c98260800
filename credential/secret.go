package credential

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/keel-run/keel/internal/lazy"
	"github.com/keel-run/keel/journal"
)

// Static secrets: credentials that are not OAuth grants, such as a user's
// own database connection string, stored by a person for (agent, user,
// name) and given to the one tool that needs them. Like a grant's tokens
// they are sealed under the vault key, every store, use and deletion is
// an event of [StreamID] (with the secret's keyed hash, never the secret
// nor a hash anyone without the vault key could test guesses against), and
// a missing one is a wait for a person, not a failure ([ErrNoSecret]).

const kindSecret = "vault.secret"

// Event types of static secrets.
const (
	EventSecretStored  journal.Type = "credential.secret_stored"
	EventSecretUsed    journal.Type = "credential.secret_used"
	EventSecretDeleted journal.Type = "credential.secret_deleted"
)

// ErrNoSecret is wrapped when no secret is stored for (agent, user,
// name): a person stores one ([Vault.PutSecret], keel auth secret set).
var ErrNoSecret = errors.New("credential: no secret stored")

// Secret describes a stored secret; its value is never in it.
type Secret struct {
	Name  string    `json:"name"`
	Agent string    `json:"agent"`
	User  string    `json:"user,omitempty"`
	Hash  string    `json:"hash"`
	By    string    `json:"by,omitempty"`
	Time  time.Time `json:"stored"`
}

type secretRecord struct {
	Secret
	Value *sealed `json:"secret"`
}

type secretPayload struct {
	Name  string `json:"name"`
	Agent string `json:"agent"`
	User  string `json:"user,omitempty"`
	Hash  string `json:"hash"`
	By    string `json:"by,omitempty"`
	Run   string `json:"run,omitempty"`
	Call  string `json:"call,omitempty"`
}

var secretName = lazy.Regexp(`^[a-z0-9][a-z0-9._:-]{0,63}$`)

func secretKey(name, agent, user string) string { return name + "/" + agent + "/" + user }

func checkSecret(name, agent, user string) error {
	if !secretName().MatchString(name) {
		return fmt.Errorf("%w: secret name %q: 1 to 64 lowercase letters, digits, '.', '_', ':', '-'", ErrInvalid, name)
	}
	if agent == "" || strings.ContainsAny(agent, "/\x00\n") {
		return fmt.Errorf("%w: a secret names its agent", ErrInvalid)
	}
	return checkUser(user)
}

// PutSecret seals value under the vault key as the secret name of agent
// acting for user (replacing an earlier one) and journals
// credential.secret_stored.
func (v *Vault) PutSecret(ctx context.Context, name, agent, user, value, by string) (*Secret, error) {
	if err := checkSecret(name, agent, user); err != nil {
		return nil, err
	}
	if value == "" {
		return nil, fmt.Errorf("%w: an empty secret", ErrInvalid)
	}
	if len(v.opts.Keys) == 0 {
		return nil, fmt.Errorf("%w: the secret would be sealed under the vault key", ErrNoKey)
	}
	key := secretKey(name, agent, user)
	s, err := v.opts.Keys[0].seal(kindSecret, key, value)
	if err != nil {
		return nil, err
	}
	rec := secretRecord{Secret: Secret{Name: name, Agent: agent, User: user, Hash: v.opts.Keys[0].secretHash(value), By: by, Time: v.now()}, Value: s}
	b, err := jsonMarshal(rec)
	if err != nil {
		return nil, err
	}
	var ver int64
	if old, err := v.records.GetRecord(ctx, kindSecret, key); err == nil {
		ver = old.Version
	}
	if _, err := v.records.PutRecord(ctx, kindSecret, key, b, ver); err != nil {
		return nil, fmt.Errorf("credential: store secret %s: %w", name, err)
	}
	if err := v.audit(ctx, EventSecretStored, &secretPayload{Name: name, Agent: agent, User: user, Hash: rec.Hash, By: by}); err != nil {
		return nil, err
	}
	return &rec.Secret, nil
}

// SecretValue returns the secret name of agent acting for user, an error
// wrapping [ErrNoSecret] when none is stored, or [ErrNotAllowed] when the
// agent may not have credentials (Options.Check). With run set, the use
// is journaled (credential.secret_used, with run and call).
func (v *Vault) SecretValue(ctx context.Context, name, agent, user, run, call string) (string, error) {
	// A sub-agent (a child agent, "PARENT/NAME") uses its root agent's
	// secrets; the use names the sub-agent.
	owner := Owner(agent)
	if err := checkSecret(name, owner, user); err != nil {
		return "", err
	}
	if v.opts.Check != nil {
		if err := v.opts.Check(ctx, agent, user); err != nil {
			return "", fmt.Errorf("%w: %w", ErrNotAllowed, err)
		}
	}
	key := secretKey(name, owner, user)
	rec, err := v.records.GetRecord(ctx, kindSecret, key)
	if errors.Is(err, journal.ErrNotFound) {
		return "", fmt.Errorf("%w: %s for %s", ErrNoSecret, name, whoOf(owner, user))
	}
	if err != nil {
		return "", err
	}
	var sr secretRecord
	if err := decodeJSON(rec.Value, &sr); err != nil {
		return "", err
	}
	var value string
	if err := open(v.opts.Keys, kindSecret, key, sr.Value, &value); err != nil {
		return "", err
	}
	if run != "" {
		hash := sr.Hash
		if !strings.HasPrefix(hash, secretHashPrefix) {
			// Stored before hashes were keyed: journal no unkeyed hash.
			hash = v.opts.Keys[0].secretHash(value)
		}
		if err := v.audit(ctx, EventSecretUsed, &secretPayload{Name: name, Agent: agent, User: user, Hash: hash, Run: run, Call: call}); err != nil {
			return "", err
		}
	}
	return value, nil
}

// DeleteSecret removes the secret (an error wrapping [ErrNoSecret] if
// there is none) and journals credential.secret_deleted.
func (v *Vault) DeleteSecret(ctx context.Context, name, agent, user, by string) error {
	if err := checkSecret(name, agent, user); err != nil {
		return err
	}
	key := secretKey(name, agent, user)
	rec, err := v.records.GetRecord(ctx, kindSecret, key)
	if errors.Is(err, journal.ErrNotFound) {
		return fmt.Errorf("%w: %s for %s", ErrNoSecret, name, whoOf(agent, user))
	}
	if err != nil {
		return err
	}
	if err := v.records.DeleteRecord(ctx, kindSecret, key, rec.Version); err != nil {
		return fmt.Errorf("credential: delete secret %s: %w", name, err)
	}
	return v.audit(ctx, EventSecretDeleted, &secretPayload{Name: name, Agent: agent, User: user, By: by})
}

// Secrets lists the stored secrets, without their values.
func (v *Vault) Secrets(ctx context.Context) ([]Secret, error) {
	recs, err := v.records.ListRecords(ctx, kindSecret)
	if err != nil {
		return nil, err
	}
	out := make([]Secret, 0, len(recs))
	for _, r := range recs {
		var sr secretRecord
		if err := decodeJSON(r.Value, &sr); err != nil {
			return nil, err
		}
		out = append(out, sr.Secret)
	}
	return out, nil
}
