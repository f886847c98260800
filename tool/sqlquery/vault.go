package sqlquery

import (
	"context"
	"errors"
	"strings"

	"github.com/keel-run/keel/credential"
	"github.com/keel-run/keel/tool"
)

// SecretVault is what [VaultDSN] needs of the credential vault
// ([*credential.Vault] implements it).
type SecretVault interface {
	SecretValue(ctx context.Context, name, agent, user, run, call string) (string, error)
}

// SecretName is the vault secret holding a user's connection string of
// the database name: "sql:" and the name in lower case.
func SecretName(database string) string { return "sql:" + strings.ToLower(database) }

// VaultDSN returns an [Options].UserDSN that reads the user's connection
// string from the vault secret [SecretName] of (agent, user); a missing
// one is an [*tool.AuthRequiredError] whose hint is the command that
// stores it (then the waiting call runs).
func VaultDSN(v SecretVault, database, agent, user string) func(ctx context.Context, run, call string) (string, error) {
	name := SecretName(database)
	return func(ctx context.Context, run, call string) (string, error) {
		dsn, err := v.SecretValue(ctx, name, agent, user, run, call)
		if errors.Is(err, credential.ErrNoSecret) {
			owner := credential.Owner(agent) // a child agent uses its root's
			hint := "keel auth secret set " + name + " --agent " + owner
			if user != "" {
				hint += " --user " + user
			}
			return "", &tool.AuthRequiredError{Provider: name, Agent: owner, User: user, Reason: tool.AuthMissing,
				Resource: "sql database " + database, Hint: hint + " (the user's connection string on standard input)"}
		}
		return dsn, err
	}
}
