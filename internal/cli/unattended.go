package cli

import (
	"fmt"
	"slices"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/notify"
	"github.com/keel-run/keel/schedule"
	"github.com/keel-run/keel/service"
)

// unattended fills in what the service needs for schedules, triggers and
// notifications on this machine: the notification sinks of config.toml
// ([notify]; their secrets from the variables it names), the vault that
// seals webhook triggers' secrets (when there is a vault key), and the
// schedules' metrics. send says whether this process sends
// notifications (keel serve, keel scheduler): only then are the sinks'
// secrets read from their variables.
func (a *app) unattended(store journal.Store, o *service.Options, send bool) error {
	sinks, err := a.sinks(send)
	if err != nil {
		return err
	}
	o.Sinks, o.AgentSinks = sinks, a.cfg.Notify.Agents
	if keys, err := a.vaultKeys(); err == nil && len(keys) > 0 {
		if v, err := a.openVault(store); err == nil {
			o.Sealer = v
		}
	}
	if a.metrics != nil {
		o.OnFire = schedule.NewMetrics(a.metrics.Registry()).Observe
	}
	return nil
}

// sinks returns the notification sinks of config.toml; without send,
// their secrets are left out (the sinks are named, never used).
func (a *app) sinks(send bool) (map[string]notify.Sink, error) {
	out := map[string]notify.Sink{}
	env := func(sink, key, name string) (string, error) {
		if !send {
			return "", nil
		}
		v := a.getenv(name)
		if v == "" {
			return "", usagef("notify sink %q: %s names $%s, which is not set", sink, key, name)
		}
		return v, nil
	}
	for name, s := range a.cfg.Notify.Sinks {
		switch s.Kind {
		case "email":
			e := &notify.Email{Addr: s.SMTP, From: s.From, To: slices.Clone(s.To), Username: s.Username, TLS: s.TLS}
			if s.PasswordEnv != "" {
				p, err := env(name, "password_env", s.PasswordEnv)
				if err != nil {
					return nil, err
				}
				e.Password = p
			}
			out[name] = e
		case "webhook":
			secret, err := env(name, "secret_env", s.SecretEnv)
			if err != nil {
				return nil, err
			}
			if _, err := standardwebhooks.NewWebhook(secret); send && err != nil {
				return nil, usagef("notify sink %q: $%s is not a signing secret (whsec_ and base64): %v", name, s.SecretEnv, err)
			}
			out[name] = &notify.Webhook{URL: s.URL, Secret: secret}
		case "slack":
			u, err := env(name, "url_env", s.URLEnv)
			if err != nil {
				return nil, err
			}
			out[name] = &notify.Slack{URL: u}
		default:
			return nil, fmt.Errorf("notify sink %q: unknown kind %q", name, s.Kind)
		}
	}
	return out, nil
}
