package cli

import (
	"net/url"
	"path/filepath"
	"strings"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/tool/mcp"
)

// openAPIs returns the run's APIs: config.toml's (unless --no-mcp), then
// --openapi NAME=DOCUMENT, whose token comes from KEEL_OPENAPI_TOKEN_NAME.
func (a *app) openAPIs(f *mcpFlags) ([]agent.OpenAPI, error) {
	var out []agent.OpenAPI
	put := func(o agent.OpenAPI) {
		for i := range out {
			if out[i].Name == o.Name {
				out[i] = o
				return
			}
		}
		out = append(out, o)
	}
	if a.cfg != nil && !f.none {
		for _, c := range a.cfg.OpenAPI.APIs {
			if err := mcp.CheckName(c.Name); err != nil {
				return nil, usagef("%s: [[openapi.apis]]: %v", a.configFile(), err)
			}
			if c.Document == "" {
				return nil, usagef("%s: openapi %s: no document", a.configFile(), c.Name)
			}
			switch c.Writes {
			case "", "ask", "policy":
			default:
				return nil, usagef("%s: openapi %s: writes = %q: want ask or policy", a.configFile(), c.Name, c.Writes)
			}
			put(agent.OpenAPI{Name: c.Name, Document: absDocument(c.Document), BaseURL: c.BaseURL, Tags: c.Tags, Operations: c.Operations,
				TokenEnv: c.TokenEnv, WritesByPolicy: c.Writes == "policy", Provider: c.Provider})
		}
	}
	for _, v := range f.openapi {
		name, doc, ok := strings.Cut(v, "=")
		if !ok || doc == "" {
			return nil, usagef("--openapi %q: want NAME=DOCUMENT (a URL or a file)", v)
		}
		if err := mcp.CheckName(name); err != nil {
			return nil, usagef("--openapi: %v", err)
		}
		put(agent.OpenAPI{Name: name, Document: absDocument(doc), TokenEnv: tokenEnv(name)})
	}
	return out, nil
}

// tokenEnv is the default variable of an API's bearer token.
func tokenEnv(name string) string {
	return "KEEL_OPENAPI_TOKEN_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

func absDocument(doc string) string {
	if u, err := url.Parse(doc); err == nil && (u.Scheme == "http" || u.Scheme == "https") {
		return doc
	}
	if abs, err := filepath.Abs(doc); err == nil {
		return abs
	}
	return doc
}
