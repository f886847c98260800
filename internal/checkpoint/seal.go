package checkpoint

import (
	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/redact"
)

// SealSecrets returns changes with every spelling of the secrets' values
// that [redact.Secrets.Seal] knows, in their paths and patches, replaced
// by a placeholder naming the secret («secret:NAME:FORM»): what a diff
// shows of a file a run wrote a secret into (docs/security.md, "A secret
// the model writes"). changes is not modified; with no secrets it is
// returned as is.
func SealSecrets(changes []Change, secrets []agent.Secret) []Change {
	if len(secrets) == 0 || len(changes) == 0 {
		return changes
	}
	names := make([]string, len(secrets))
	values := make([]string, len(secrets))
	for i, s := range secrets {
		names[i], values[i] = s.Name, s.Value
	}
	set := redact.NewSecrets(values...)
	seal := func(s string) string {
		if len(set.Scan(s)) == 0 {
			return s
		}
		return set.Seal(s, names)
	}
	out := make([]Change, len(changes))
	for i, c := range changes {
		c.Path = seal(c.Path)
		c.Patch = seal(c.Patch)
		out[i] = c
	}
	return out
}
