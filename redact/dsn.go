package redact

import (
	"fmt"
	"net/url"
	"strings"
)

// DSN returns the connection string dsn without its passwords, in every
// form pgx and libpq accept:
//
//   - a URL (postgres://user:PASSWORD@host/db, also with several hosts,
//     with '?', '#' or an unescaped '@' in the password, and any other
//     scheme such as sqlite://): the password of the user info, and the
//     query parameters whose names say they are secret (password,
//     sslpassword, pass%77ord, oauth_client_secret, ...), as [URL] does;
//   - keyword=value pairs (host=h user=u password=PASSWORD dbname=db,
//     with spaces around '=', a quoted value with backslash escapes, an
//     unquoted one with escaped spaces): the pairs whose keyword says they
//     are secret.
//
// The rest of dsn is kept as written, so the result still names the same
// database and still connects when the password comes from PGPASSWORD or
// ~/.pgpass; a dsn without a password is returned unchanged. DSN never
// fails: for text that is no valid connection string it hides whatever
// sits where a password would.
func DSN(dsn string) string {
	if urlScheme().MatchString(dsn) {
		return URL(dsn)
	}
	if !strings.Contains(dsn, "=") {
		return dsn // a path, such as an SQLite file's
	}
	return keywordValue(dsn)
}

// URL returns the URL s without the password of its user info and
// without its query parameters whose names say they are secret
// (password, sslpassword, token, secret, api_key, in any letter case, also
// percent-encoded), keeping the rest as written. It reads s as both Go's
// net/url and libpq read a URL: the user info ends at the last '@' before
// the first '/' (or, for a malformed URL whose password holds a '/', the
// first '?', '#' or '='), so a password holding '@', '?', '#' or ':' is
// removed whole. An s without a password is returned unchanged.
func URL(s string) string {
	out, _ := urlCredentials(s)
	return out
}

// urlCredentials returns the URL s without its credentials and names
// each part removed (never its value), the one rule of [URL] and
// [URLCredential]: the password of its user info, a user name that looks
// like a token ([tokenLike]: then the whole user info), the query
// parameters, path parameters (";token=") and fragment parameters
// ("#access_token=") whose names say they are secret ([secretName]).
// Parameters are separated by '&' or ';'.
func urlCredentials(s string) (string, []string) {
	m := urlScheme().FindStringIndex(s)
	if m == nil {
		return s, nil
	}
	head, rest := s[:m[1]], s[m[1]:]
	var parts []string
	if at := userinfoEnd(rest); at >= 0 {
		user, _, hasPw := strings.Cut(rest[:at], ":")
		if du, err := url.PathUnescape(user); err == nil {
			user = du
		}
		switch {
		case tokenLike(user):
			parts = append(parts, "its user name, which looks like a token")
			rest = rest[at+1:]
		case hasPw:
			parts = append(parts, "the password of its user info")
			rest = rest[:strings.IndexByte(rest, ':')] + rest[at:]
		}
	}
	path, query, frag := rest, "", ""
	hasQuery, hasFrag := false, false
	if i := strings.IndexByte(path, '#'); i >= 0 {
		path, frag, hasFrag = path[:i], path[i+1:], true
	}
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path, query, hasQuery = path[:i], path[i+1:], true
	}
	if strings.Contains(path, ";") {
		segs := strings.Split(path, "/")
		for i, seg := range segs {
			name, params, ok := strings.Cut(seg, ";")
			if !ok {
				continue
			}
			kept, dropped := dropSecretParams(params)
			for _, d := range dropped {
				parts = append(parts, fmt.Sprintf("its path parameter %q", d))
			}
			if len(dropped) > 0 {
				segs[i] = name
				if kept != "" {
					segs[i] += ";" + kept
				}
			}
		}
		path = strings.Join(segs, "/")
	}
	if hasQuery {
		kept, dropped := dropSecretParams(query)
		for _, d := range dropped {
			parts = append(parts, fmt.Sprintf("its query parameter %q", d))
		}
		query, hasQuery = kept, hasQuery && (kept != "" || len(dropped) == 0)
	}
	if hasFrag {
		kept, dropped := dropSecretParams(frag)
		for _, d := range dropped {
			parts = append(parts, fmt.Sprintf("its fragment parameter %q", d))
		}
		frag, hasFrag = kept, hasFrag && (kept != "" || len(dropped) == 0)
	}
	if len(parts) == 0 {
		return s, nil
	}
	out := head + path
	if hasQuery {
		out += "?" + query
	}
	if hasFrag {
		out += "#" + frag
	}
	return out, parts
}

// userinfoEnd returns the index in rest (a URL after "scheme://") of the
// '@' that ends its user info, or -1.
func userinfoEnd(rest string) int {
	slash := strings.IndexByte(rest, '/')
	if slash < 0 {
		slash = len(rest)
	}
	if at := strings.LastIndexByte(rest[:slash], '@'); at >= 0 {
		return at
	}
	// A '/' in a password (postgres://u:pa/ss@h/db) strands the '@'
	// after it: take the last '@' before anything a query starts, unless
	// what precedes the '/' is a host and a port.
	if _, port, ok := strings.Cut(rest[:slash], ":"); !ok || port == "" || strings.Trim(port, "0123456789") == "" {
		return -1
	}
	end := len(rest)
	if j := strings.IndexAny(rest, "?#="); j >= 0 {
		end = j
	}
	return strings.LastIndexByte(rest[:end], '@')
}

// dropSecretParams returns the parameters q ("a=1&password=x", also
// separated by ';') without those whose (percent-decoded) names say they
// are secret, the rest as written, in their order and with their
// separators; and the names it dropped, decoded.
func dropSecretParams(q string) (string, []string) {
	var b strings.Builder
	var dropped []string
	sep := ""
	for len(q) > 0 || sep != "" {
		p := q
		next := ""
		if i := strings.IndexAny(q, "&;"); i >= 0 {
			p, next, q = q[:i], q[i:i+1], q[i+1:]
		} else {
			q = ""
		}
		k, _, _ := strings.Cut(p, "=")
		if dk, err := url.QueryUnescape(k); err == nil {
			k = dk
		}
		if secretName(k) {
			dropped = append(dropped, k)
		} else {
			if b.Len() > 0 {
				b.WriteString(sep)
			}
			b.WriteString(p)
		}
		if next == "" {
			break
		}
		sep = next
	}
	return b.String(), dropped
}

// keywordValue removes the secret pairs of a libpq keyword=value string,
// read as libpq reads it: a keyword, optional spaces, '=', optional
// spaces, then a value quoted with '...' (backslash escapes) or running to
// the next unescaped space.
func keywordValue(s string) string {
	var b strings.Builder
	changed := false
	i := 0
	for i < len(s) {
		start := i
		for i < len(s) && isSpace(s[i]) {
			i++
		}
		eq := strings.IndexByte(s[i:], '=')
		if eq < 0 {
			b.WriteString(s[start:])
			break
		}
		key := strings.TrimSpace(s[i : i+eq])
		j := i + eq + 1
		for j < len(s) && isSpace(s[j]) {
			j++
		}
		j = valueEnd(s, j)
		if secretName(key) {
			changed = true
		} else {
			b.WriteString(s[start:j])
		}
		i = j
	}
	if !changed {
		return s
	}
	return strings.TrimSpace(b.String())
}

// valueEnd returns the end of the value that starts at s[i].
func valueEnd(s string, i int) int {
	if i < len(s) && s[i] == '\'' {
		for i++; i < len(s); i++ {
			switch s[i] {
			case '\\':
				i++
			case '\'':
				return i + 1
			}
		}
		return len(s) // unterminated: all of it
	}
	for ; i < len(s) && !isSpace(s[i]); i++ {
		if s[i] == '\\' {
			i++
		}
	}
	return min(i, len(s))
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}

// urlScheme matches the start of a URL: an RFC 3986 scheme and "://".
var urlScheme = onceRegexp(`^[A-Za-z][A-Za-z0-9+.-]*://`)

// Resource returns what the URL s reaches, for events and messages about
// it: scheme, host and path, without user info, query and fragment (they
// may carry secrets of their own). An s that does not parse returns
// "(unparsable URL)".
func Resource(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable URL)"
	}
	u.User, u.RawQuery, u.Fragment, u.ForceQuery = nil, "", "", false
	return u.String()
}

// KeywordDSN reports whether s is a libpq keyword=value connection
// string (host=h user=u password=p dbname=d) rather than a URL or a
// file path.
func KeywordDSN(s string) bool { return keywordDSN().MatchString(s) }

var keywordDSN = onceRegexp(`(^|\s)(host|hostaddr|port|dbname|user|password|passfile|sslmode|service)\s*=`)
