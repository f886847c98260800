package serve

import (
	"encoding/json"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Tokens is the content of the token file keel serve writes
// ($KEEL_HOME/server-token): the admin token it made, and the server URLs
// it may be sent to. The command line sends it to no other server.
type Tokens struct {
	// Servers are base URLs ("http://127.0.0.1:8420") this token is for.
	Servers []string `json:"servers"`
	Token   string   `json:"token"`
	// Others are the tokens of other servers (other journals) started
	// from this KEEL_HOME before, each for its own URLs: a second keel
	// serve does not take the first one's token away.
	Others []Tokens `json:"others,omitempty"`
}

// Lookup returns the saved token for the server at raw, or nil.
func (st *Tokens) Lookup(raw string) *Tokens {
	if st.isFor(raw) {
		return st
	}
	for i := range st.Others {
		if st.Others[i].isFor(raw) {
			return &st.Others[i]
		}
	}
	return nil
}

// AllServers returns every URL a saved token is for.
func (st *Tokens) AllServers() []string {
	all := slices.Clone(st.Servers)
	for _, o := range st.Others {
		all = append(all, o.Servers...)
	}
	return all
}

// with returns the file with e as its newest token: the others keep
// their URLs but those of e (which now name e's server).
func (st *Tokens) with(e Tokens) *Tokens {
	out := &Tokens{Servers: e.Servers, Token: e.Token}
	for _, o := range append([]Tokens{{Servers: st.Servers, Token: st.Token}}, st.Others...) {
		if o.Token == "" || o.Token == e.Token {
			continue
		}
		o.Servers = slices.DeleteFunc(slices.Clone(o.Servers), func(u string) bool {
			return slices.ContainsFunc(e.Servers, func(v string) bool { return Origin(u) == Origin(v) })
		})
		if len(o.Servers) > 0 {
			out.Others = append(out.Others, Tokens{Servers: o.Servers, Token: o.Token})
		}
	}
	return out
}

// isFor reports whether the saved token is for the server at raw.
func (st *Tokens) isFor(raw string) bool {
	o := Origin(raw)
	return o != "" && slices.ContainsFunc(st.Servers, func(s string) bool { return Origin(s) == o })
}

// ReadTokens reads the token file; a file in the old format (the token
// alone) has no servers and is sent nowhere.
func ReadTokens(path string) (*Tokens, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var st Tokens
	if json.Unmarshal(b, &st) != nil {
		return &Tokens{Token: strings.TrimSpace(string(b))}, nil
	}
	return &st, nil
}

// writeTokens writes the token file (mode 0600).
func writeTokens(path string, st *Tokens) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// Origin returns a URL's scheme, host and port in canonical form
// ("http://127.0.0.1:8420"), or "" if it is not an http(s) URL.
func Origin(raw string) string {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return ""
	}
	host, port := u.Hostname(), u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	return strings.ToLower(u.Scheme) + "://" + net.JoinHostPort(strings.ToLower(host), port)
}
