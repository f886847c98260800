package credential

import (
	"context"
	"errors"
	"fmt"

	"github.com/keel-run/keel/journal"
)

// Sealed values: secrets Keel itself makes and keeps for its own use,
// never given to a run or a tool (a webhook trigger's signing secret).
// They are sealed under the vault key like a grant's tokens, bound to
// their record, and re-sealed by [Vault.Rekey]; unlike static secrets
// ([Vault.PutSecret]) they belong to no agent, so no tool can ask for
// one.

const kindSealed = "vault.sealed"

type sealedRecord struct {
	Name  string  `json:"name"`
	Value *sealed `json:"secret"`
}

// PutSealed seals value under the vault key as name (replacing an
// earlier one). It needs a vault key ([ErrNoKey]).
func (v *Vault) PutSealed(ctx context.Context, name, value string) error {
	if name == "" || value == "" {
		return fmt.Errorf("%w: a sealed value needs a name and a value", ErrInvalid)
	}
	if len(v.opts.Keys) == 0 {
		return fmt.Errorf("%w: the value would be sealed under the vault key (keel auth key generate makes one)", ErrNoKey)
	}
	s, err := v.opts.Keys[0].seal(kindSealed, name, value)
	if err != nil {
		return err
	}
	b, err := jsonMarshal(sealedRecord{Name: name, Value: s})
	if err != nil {
		return err
	}
	var ver int64
	if old, err := v.records.GetRecord(ctx, kindSealed, name); err == nil {
		ver = old.Version
	}
	if _, err := v.records.PutRecord(ctx, kindSealed, name, b, ver); err != nil {
		return fmt.Errorf("credential: store sealed value %s: %w", name, err)
	}
	return nil
}

// Sealed opens the value sealed as name; an error wrapping
// journal.ErrNotFound when there is none.
func (v *Vault) Sealed(ctx context.Context, name string) (string, error) {
	rec, err := v.records.GetRecord(ctx, kindSealed, name)
	if err != nil {
		if errors.Is(err, journal.ErrNotFound) {
			return "", fmt.Errorf("credential: no sealed value %s: %w", name, err)
		}
		return "", err
	}
	var sr sealedRecord
	if err := decodeJSON(rec.Value, &sr); err != nil {
		return "", err
	}
	var value string
	if err := open(v.opts.Keys, kindSealed, name, sr.Value, &value); err != nil {
		return "", err
	}
	return value, nil
}
