package redact

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// URLCredential names the parts of the URL s that carry a credential,
// never their values: "the password of its user info", `its query
// parameter "token"`, `its path parameter "token"` (";token="), `its
// fragment parameter "access_token"`, "its user name, which looks like a
// token" (each by the rule of [URL]), joined by " and "; "" when s
// carries none or is no URL. It names exactly what [URL] removes:
// URLCredential(s) == "" if and only if URL(s) == s.
func URLCredential(s string) string {
	_, parts := urlCredentials(s)
	return strings.Join(parts, " and ")
}

// connectorURL returns what [ConnectorURL] refuses in s, and s as its
// error shows it: besides [URLCredential]'s parts, any user info (a user
// name alone is how personal access tokens are often given, and a
// connector authenticates through Keel's vault) and any fragment (never
// sent to a server, so of no use in a connector, and free text that may
// hold anything), both removed whole from the URL shown.
func connectorURL(s string) (string, []string) {
	shown, parts := urlCredentials(s)
	m := urlScheme().FindStringIndex(shown)
	if m == nil {
		return shown, parts
	}
	head, rest := shown[:m[1]], shown[m[1]:]
	if at := userinfoEnd(rest); at >= 0 {
		if !slices.ContainsFunc(parts, func(p string) bool { return strings.Contains(p, "user") }) {
			parts = append([]string{"its user info"}, parts...)
		}
		rest = rest[at+1:]
	}
	if i := strings.IndexByte(rest, '#'); i >= 0 {
		parts = slices.DeleteFunc(parts, func(p string) bool { return strings.HasPrefix(p, "its fragment") })
		parts = append(parts, "a fragment")
		rest = rest[:i]
	} else if slices.ContainsFunc(parts, func(p string) bool { return strings.HasPrefix(p, "its fragment") }) {
		parts = slices.DeleteFunc(parts, func(p string) bool { return strings.HasPrefix(p, "its fragment") })
		parts = append(parts, "a fragment")
	}
	return head + rest, parts
}

// ConnectorURL refuses the URL s of a connector (an MCP server's
// endpoint, kind "mcp"; an OpenAPI document or base URL, kind "openapi")
// that carries a credential: what [URLCredential] names, and also any
// user info (a user name alone included) and any fragment. A connector's URL is
// journaled (run.created, the agent directory) and shown to every reader
// of the run or the agent, so it must hold no secret; stripping the
// credential would not do, as the stripped URL would not work on a
// resume. The error names the part (never its value), shows the URL
// without it and says how Keel authenticates to that kind of connector.
func ConnectorURL(kind, s string) error {
	shown, parts := connectorURL(s)
	if len(parts) == 0 {
		return nil
	}
	part := strings.Join(parts, " and ")
	how := "a server that answers 401 gets its token from Keel's vault: the provider covering the URL, or the one `provider` names in [[mcp.servers]] (`keel auth connect mcp-NAME`; docs/mcp.md, \"Servers of a run: tokens from the vault\")"
	if kind == "openapi" {
		how = "each call gets a token from Keel's vault, from the provider covering the URL or the one `provider` names (`keel auth providers add`, `keel auth connect`; docs/credentials.md), else a bearer token from the environment variable `token_env` names (default KEEL_OPENAPI_TOKEN_NAME; docs/mcp.md, \"OpenAPI connector\")"
	}
	return fmt.Errorf("URL %s carries a credential (%s), which Keel refuses in a connector, since connector URLs are journaled and shown to every reader of the run or agent: give the URL without it and let Keel authenticate: %s", shown, part, how)
}

// CommandCredential names the arguments of a stdio connector's command
// line argv that carry a credential, never their values: an option whose
// name says it is secret ([secretName]) with its value, in one word
// (--api-key=V, also API_KEY=V as env assigns it) or two (--token V), and
// a URL argument that carries a credential ([URLCredential]); joined by
// " and ", "" when there is none. An option naming where the secret is
// (--token-file PATH, --password-env VAR) or a value that is a variable
// reference (--token "$API_TOKEN", expanded by a shell wrapper from the
// server's secret_env) carries none. It names exactly
// what [Command] masks.
func CommandCredential(argv []string) string {
	_, parts := commandCredentials(argv)
	return strings.Join(parts, " and ")
}

// Command returns argv with the values [CommandCredential] names
// replaced by [Mask] (a URL argument as [URL] prints it); argv itself
// when it names none.
func Command(argv []string) []string {
	out, _ := commandCredentials(argv)
	return out
}

// ConnectorCommand refuses the command line argv of a stdio MCP server
// that carries a credential ([CommandCredential]): a connector's command
// is journaled (run.created, the agent directory) and shown to every
// reader of the run or agent. The error names the argument, never its
// value, and says how a stdio server gets a secret instead.
func ConnectorCommand(argv []string) error {
	part := CommandCredential(argv)
	if part == "" {
		return nil
	}
	return fmt.Errorf("the command %s carries a credential (%s), which Keel refuses in a connector, since connector commands are journaled and shown to every reader of the run or agent: give the secret to the server through its environment instead: a run's secret (--secret-env) passed on with --mcp-secret-env NAME=VAR, or secret_env in [[mcp.servers]] (docs/mcp.md)", strings.Join(Command(argv), " "), part)
}

// Spec returns a connector's SPEC (of an entry NAME=SPEC) as a view
// shows it: a URL as [ConnectorURL]'s error shows it (without what it
// refuses: credentials, user info, fragment), a key=value connection string as
// [DSN] does, else a command line (split at spaces, quotes around a word
// ignored) with the values [CommandCredential] names masked.
func Spec(spec string) string {
	t := strings.TrimSpace(spec)
	switch {
	case urlScheme().MatchString(t):
		if shown, parts := connectorURL(t); len(parts) > 0 {
			return shown
		}
		return spec
	case KeywordDSN(t):
		return DSN(spec)
	}
	words := CommandWords(spec)
	masked := Command(words)
	if slices.Equal(words, masked) {
		return spec
	}
	return strings.Join(masked, " ")
}

// CommandWords splits a connector's command line as written in an entry
// NAME=COMMAND for [ConnectorCommand] and [Spec]: at spaces, each word
// without the quotes around it.
func CommandWords(spec string) []string {
	words := strings.Fields(spec)
	for i, w := range words {
		words[i] = strings.Trim(w, `"'`)
	}
	return words
}

// commandCredentials is the one rule of [Command] and [CommandCredential].
func commandCredentials(argv []string) ([]string, []string) {
	var out, parts []string
	set := func(i int, v string) {
		if out == nil {
			out = slices.Clone(argv)
		}
		out[i] = v
	}
	for i := 0; i < len(argv); i++ {
		w := argv[i]
		if urlScheme().MatchString(w) {
			if p := URLCredential(w); p != "" {
				parts = append(parts, fmt.Sprintf("a URL argument with %s", p))
				set(i, URL(w))
			}
			continue
		}
		if hw, ok := secretHeader(w); ok {
			// A header: NAME: VALUE in one word (as curl's -H and many
			// servers' --header take it), or NAME: with the value in the
			// words after it (a command line split at spaces).
			if hw.value != "" {
				if masked, secret := maskHeaderValue(hw.value); secret {
					parts = append(parts, fmt.Sprintf("the value of the header %s", hw.name))
					set(i, hw.prefix+hw.name+": "+masked)
				}
				continue
			}
			j := i + 1
			for ; j < len(argv) && !strings.HasPrefix(argv[j], "-"); j++ {
			}
			if masked, secret := maskHeaderValue(strings.Join(argv[i+1:j], " ")); secret {
				parts = append(parts, fmt.Sprintf("the value of the header %s", hw.name))
				for k, m := range strings.Fields(masked) {
					set(i+1+k, m)
				}
			}
			i = j - 1
			continue
		}
		name, value, hasValue := strings.Cut(w, "=")
		opt := strings.TrimLeft(name, "-")
		if !secretArgName(opt) {
			continue
		}
		switch {
		case hasValue && value != "" && !varRef(value):
			parts = append(parts, fmt.Sprintf("the value of %s", name))
			set(i, name+"="+Mask)
		case !hasValue && opt != name && i+1 < len(argv) && !strings.HasPrefix(argv[i+1], "-") && !varRef(argv[i+1]):
			parts = append(parts, fmt.Sprintf("the value of %s", name))
			set(i+1, Mask)
			i++
		}
	}
	if out == nil {
		return argv, nil
	}
	return out, parts
}

// header is an argument that is an HTTP header line: prefix (an option
// and '=', as in --header=NAME: VALUE), name and value (empty when the
// value is in the next arguments).
type header struct{ prefix, name, value string }

// secretHeader reports whether argument w is a header whose name says
// it carries a credential: Authorization, Proxy-Authorization, Cookie, or
// a name [secretName] takes (X-Api-Key, X-Auth-Token).
func secretHeader(w string) (header, bool) {
	var h header
	if opt, rest, ok := strings.Cut(w, "="); ok && strings.HasPrefix(opt, "-") {
		h.prefix, w = opt+"=", rest
	}
	name, value, ok := strings.Cut(w, ":")
	if !ok || name == "" || strings.ContainsAny(name, " \t/=\"'") {
		return h, false
	}
	n := strings.ToLower(name)
	if n != "cookie" && n != "proxy-authorization" && !secretName(n) {
		return h, false
	}
	h.name, h.value = name, strings.TrimSpace(value)
	return h, true
}

// maskHeaderValue returns a header's value with every word but its
// authentication scheme (Bearer, Basic, ...) masked, and whether it held
// a secret: a value that is only variable references ($TOKEN, which a
// shell wrapper expands from the secret_env it is given) holds none.
func maskHeaderValue(v string) (string, bool) {
	words := strings.Fields(v)
	secret := false
	for i, w := range words {
		switch {
		case varRef(w):
		case i == 0 && len(words) > 1 && slices.Contains([]string{"bearer", "basic", "token", "bot", "digest", "apikey"}, strings.ToLower(w)):
		default:
			words[i], secret = Mask, true
		}
	}
	return strings.Join(words, " "), secret
}

// varRef reports whether a value is a reference to a variable ($VAR,
// ${VAR}), which a shell wrapper expands from the secret_env it is given.
func varRef(v string) bool {
	return strings.HasPrefix(v, "$") && len(v) > 1
}

// secretArgName reports whether a command line option or variable named
// n takes a secret as its value: its name says it is secret, and it does
// not name where the secret is (a file, a path, a variable).
func secretArgName(n string) bool {
	if n == "" || !secretName(n) {
		return false
	}
	l := strings.ToLower(n)
	for _, s := range []string{"file", "path", "env", "var", "dir", "stdin"} {
		if strings.HasSuffix(l, s) {
			return false
		}
	}
	return true
}

// tokenLike reports whether s (a URL's user name) looks like a token
// rather than a person's or service's name: one of the shapes [Text]
// hides, or at least 20 characters mixing letters and digits with the
// entropy of random text.
func tokenLike(s string) bool {
	if s == "" {
		return false
	}
	for _, re := range shapes {
		if re().FindString(s) == s {
			return true
		}
	}
	if len(s) < 20 {
		return false
	}
	var letters, digits int
	counts := map[rune]int{}
	for _, r := range s {
		counts[r]++
		switch {
		case r >= '0' && r <= '9':
			digits++
		case r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z':
			letters++
		}
	}
	if letters == 0 || digits < 3 {
		return false
	}
	h := 0.0
	for _, c := range counts {
		p := float64(c) / float64(len(s))
		h -= p * math.Log2(p)
	}
	return h >= 3.5
}
