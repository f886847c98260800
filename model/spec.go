package model

import (
	"fmt"
	"net/url"
	"strings"
)

// Spec is a parsed model spec string. The accepted forms (docs/architecture.md,
// "Contract — model messages") are:
//
//	openai:MODEL                       OpenAI Chat Completions
//	anthropic:MODEL                    Anthropic Messages
//	anthropic:MODEL@BASE_URL           an Anthropic-compatible endpoint
//	openai-compatible:MODEL@BASE_URL   any OpenAI-compatible endpoint
//	replay:PATH                        a recorded trajectory file
//
// A scripted demonstration model is also available as "scripted:demo" for
// `keel demo`.
type Spec struct {
	// Provider is "openai", "anthropic", "openai-compatible", "replay" or
	// "scripted".
	Provider string
	// Name is the provider's model name ("gpt-4o", "deepseek-chat"); for
	// replay it is the trajectory path.
	Name string
	// BaseURL is set for openai-compatible specs (for example
	// "http://127.0.0.1:11434/v1") and for anthropic specs that name an
	// endpoint ("https://gateway.example/anthropic").
	BaseURL string
}

// String formats s back into spec syntax.
func (s Spec) String() string {
	if s.BaseURL != "" {
		return s.Provider + ":" + s.Name + "@" + s.BaseURL
	}
	return s.Provider + ":" + s.Name
}

// ParseSpec parses a model spec string. It returns an error that names the
// accepted forms when s is malformed.
func ParseSpec(s string) (Spec, error) {
	provider, rest, ok := strings.Cut(s, ":")
	if !ok || rest == "" {
		return Spec{}, fmt.Errorf("model: bad spec %q: want PROVIDER:MODEL (openai:MODEL, anthropic:MODEL, openai-compatible:MODEL@BASE_URL, replay:PATH)", s)
	}
	// "@http://" or "@https://" names an endpoint; any other '@' is part
	// of the model name (Vertex AI names such as claude-3-5-sonnet@20240620).
	name, base := rest, ""
	if i := strings.LastIndex(rest, "@"); i > 0 && (strings.HasPrefix(rest[i+1:], "http://") || strings.HasPrefix(rest[i+1:], "https://")) {
		name, base = rest[:i], rest[i+1:]
	}
	switch provider {
	case "openai":
		if base != "" {
			return Spec{}, fmt.Errorf("model: bad spec %q: for an endpoint of your own use openai-compatible:%s@%s", s, name, base)
		}
		return Spec{Provider: provider, Name: rest}, nil
	case "anthropic":
		if base != "" {
			u, err := url.Parse(base)
			if err != nil || u.Host == "" {
				return Spec{}, fmt.Errorf("model: bad spec %q: base URL %q is not an http(s) URL", s, base)
			}
		}
		return Spec{Provider: provider, Name: name, BaseURL: base}, nil
	case "scripted":
		return Spec{Provider: provider, Name: rest}, nil
	case "replay":
		return Spec{Provider: provider, Name: rest}, nil
	case "openai-compatible":
		// The model name may itself contain '@' (rare); the URL starts at
		// the last '@' followed by a scheme.
		i := strings.LastIndex(rest, "@")
		if i <= 0 || i == len(rest)-1 {
			return Spec{}, fmt.Errorf("model: bad spec %q: want openai-compatible:MODEL@BASE_URL", s)
		}
		name, base := rest[:i], rest[i+1:]
		u, err := url.Parse(base)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return Spec{}, fmt.Errorf("model: bad spec %q: base URL %q is not an http(s) URL", s, base)
		}
		return Spec{Provider: provider, Name: name, BaseURL: base}, nil
	default:
		return Spec{}, fmt.Errorf("model: bad spec %q: unknown provider %q (want openai, anthropic, openai-compatible or replay)", s, provider)
	}
}
