package builder

import (
	"strings"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/redact"
)

// checkSecretValues refuses a new run whose journaled settings hold one
// of its own secrets: the task, the system prompt, the setup script and
// the values of its environment (--env, the API's env) are journaled in
// run.created as given, and every reader of the run reads them there
// (docs/security.md), while the run's results carry placeholders. A
// variable given both as an environment value and as a secret is
// refused too: the journal would name a value the sandbox never has.
// getenv reads this process's environment for the secrets' values (nil:
// none is known, and only the second rule applies).
func checkSecretValues(c *agent.RunCreated, getenv func(string) string) error {
	for _, kv := range c.Env {
		name, _, _ := strings.Cut(kv, "=")
		for _, n := range c.SecretEnv {
			if n == name {
				return invalidf("environment variable %s is given twice, as a value (--env, env) and as a secret (--secret-env, secret_env): give it once; a secret's value is never journaled", name)
			}
		}
	}
	if getenv == nil {
		return nil
	}
	secrets, _ := c.SecretValues(getenv)
	if len(secrets) == 0 {
		return nil
	}
	values := make([]string, len(secrets))
	for i, s := range secrets {
		values[i] = s.Value
	}
	set := redact.NewSecrets(values...)
	type field struct{ what, text string }
	fields := []field{{"the task", c.Task}, {"the system prompt", c.System}, {"the setup script", c.Setup}}
	for _, kv := range c.Env {
		name, value, _ := strings.Cut(kv, "=")
		fields = append(fields, field{"the value of environment variable " + name + " (--env, env)", value})
	}
	for _, f := range fields {
		if ms := set.Scan(f.text); len(ms) > 0 {
			name := secrets[ms[0].Value].Name
			return invalidf("%s holds the value of the run's secret %s: it would be journaled in clear, for every reader of the run; name the variable instead ($%s in a command), or give the value as a secret (--secret-env, secret_env)", f.what, name, name)
		}
	}
	return nil
}
