package assemble

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/keel-run/keel/model"
)

// providerKeys are the provider's own API key variable and the host it
// belongs to. Only a spec whose endpoint is that host (https) gets the
// key from that variable implicitly: openai-compatible:MODEL@URL and
// anthropic:MODEL@URL name their key's variable (--api-key-env or the
// endpoint's api_key_env in config.toml), so that a spec from a
// committed file or a typo never sends the OpenAI or Anthropic key to
// a third party.
var providerKeys = map[string]struct{ env, host string }{
	"openai":            {"OPENAI_API_KEY", "api.openai.com"},
	"openai-compatible": {"OPENAI_API_KEY", "api.openai.com"},
	"anthropic":         {"ANTHROPIC_API_KEY", "api.anthropic.com"},
}

// ModelKey returns the API key for spec: flagKey (--api-key), else the
// variable flagEnv (--api-key-env) names, else the variable the
// endpoint's [endpoints."URL"] entry of config.toml names, else the
// provider's own variable when the endpoint is the provider's (no base
// URL in the spec, or its https host). "" with a nil error is no key
// (a local server that needs none); a named variable that is unset is
// an error.
func (a *Assembler) ModelKey(spec model.Spec, flagKey, flagEnv string) (string, error) {
	if flagKey != "" {
		return flagKey, nil
	}
	named := func(env, where string) (string, error) {
		if v := a.getenv(env); v != "" {
			return v, nil
		}
		return "", usagef("no API key for %s: %s names %s, which is not set", spec, where, env)
	}
	if flagEnv != "" {
		return named(flagEnv, "--api-key-env")
	}
	if spec.BaseURL != "" {
		if e, ok := a.Config.Endpoint(spec.BaseURL); ok {
			return named(e.APIKeyEnv, fmt.Sprintf("[endpoints.%q] of %s", e.URL, a.cfgPath()))
		}
	}
	pk, ok := providerKeys[spec.Provider]
	if !ok || !ownEndpoint(spec, pk.host) {
		return "", nil
	}
	return a.getenv(pk.env), nil
}

// ownEndpoint reports whether spec's endpoint is the provider's own
// (host): no base URL in the spec (the SDK's default, or the SDK's own
// *_BASE_URL variable the user set), or an https URL of that host.
func ownEndpoint(spec model.Spec, host string) bool {
	if spec.BaseURL == "" {
		return spec.Provider != "openai-compatible"
	}
	u, err := url.Parse(spec.BaseURL)
	return err == nil && u.Scheme == "https" && strings.EqualFold(u.Hostname(), host) && (u.Port() == "" || u.Port() == "443")
}

// keyAdvice says where spec's key comes from, for an error about a
// missing one.
func keyAdvice(spec model.Spec) string {
	pk := providerKeys[spec.Provider]
	if ownEndpoint(spec, pk.host) {
		return fmt.Sprintf("set %s or pass --api-key", pk.env)
	}
	return fmt.Sprintf("pass --api-key-env VAR (the variable holding this endpoint's key) or set api_key_env in [endpoints.%q] of config.toml; %s is sent only to %s", spec.BaseURL, pk.env, pk.host)
}

// cfgPath names the user's config file for a message.
func (a *Assembler) cfgPath() string {
	if a.Config != nil && a.Config.Path != "" {
		return a.Config.Path
	}
	return "config.toml"
}

// ProviderKey returns the variable of spec's provider's own API key
// (OPENAI_API_KEY, ANTHROPIC_API_KEY) when spec's endpoint is the
// provider's own, so that the key is sent there implicitly; "" when it
// is not (the endpoint's key variable must be named).
func ProviderKey(spec model.Spec) string {
	pk, ok := providerKeys[spec.Provider]
	if !ok || !ownEndpoint(spec, pk.host) {
		return ""
	}
	return pk.env
}

// KeyAdvice says where spec's key comes from, for an error about a
// missing one.
func KeyAdvice(spec model.Spec) string { return keyAdvice(spec) }
