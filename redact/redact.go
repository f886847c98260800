// Package redact hides secrets in text that people, logs, spans and the
// journal see. It is the one home of Keel's redaction: every printer of a
// connection string, a URL or a text that may hold a credential goes
// through it, so that a fix here holds everywhere.
//
//   - [DSN] removes the passwords of a database connection string in every
//     form pgx and libpq accept (URL user info, password and sslpassword
//     query parameters, key=value pairs, quoted or escaped); the result
//     still connects, with the password from PGPASSWORD or ~/.pgpass.
//   - [URL] removes the password of a URL's user info and its query
//     parameters whose names say they are secret, keeping the rest;
//     [URLCredential] names what it would remove, and [ConnectorURL]
//     refuses a connector's URL that carries a credential (such URLs are
//     journaled), saying how Keel authenticates instead.
//   - [Resource] names what a URL reaches (scheme, host, path) without its
//     user info, query or fragment, for events and messages about it.
//   - [Text] replaces likely secrets in free text (key and token shapes,
//     private keys, password assignments, URL passwords) by [Mask].
//   - [Forms], [Find], [Value] and [Values] find or hide values known
//     to be secret, also in the encodings an echo is likely to use.
//
// The package imports only the standard library, so that any package may
// use it.
package redact

import (
	"regexp"
	"slices"
	"strings"
)

// Mask replaces a secret that [Text], [Value] or [Values] hid.
const Mask = "[REDACTED]"

// shapes match credentials that commonly appear in prompts, tool
// arguments, command output and provider error messages: private keys,
// provider API keys (also as providers echo them partly masked with
// '*'), GitHub, Slack and AWS keys, JWTs, Bearer and Basic credentials,
// URL passwords. Each is replaced whole by Mask.
var shapes = []func() *regexp.Regexp{
	onceRegexp(`-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----`),
	onceRegexp(`\b(?:sk|pk|rk)-[A-Za-z0-9_*-]{6,}`),
	onceRegexp(`\b(?:ghp|gho|ghu|ghs|ghr|github_pat)_[A-Za-z0-9_]{20,}`),
	onceRegexp(`\bglpat-[A-Za-z0-9_-]{20,}`),
	onceRegexp(`\bxox[abprs]-[A-Za-z0-9-]{10,}`),
	onceRegexp(`\bAKIA[0-9A-Z]{16}\b`),
	onceRegexp(`\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}`),
	onceRegexp(`(?i)\b(?:bearer|basic)\s+[A-Za-z0-9._~+/=-]{12,}`),
}

// urlPassword matches the password of a URL's user info in text
// ("scheme://user:PASSWORD@"); group 1 is what comes before it.
var urlPassword = onceRegexp(`(?i)\b([a-z][a-z0-9+.-]*://[^\s/?#@:]*):[^\s/@]+@`)

// assignment matches "NAME=value" and "NAME: value" where NAME says the
// value is secret (password, secret, token, API key); group 1 is the name,
// 2 the separator, 3 the value (quoted with backslash escapes, or up to
// the next space).
var assignment = onceRegexp(`(?i)\b([A-Z0-9_]*(?:password|passwd|secret|token|api_?key)[A-Z0-9_]*)(\s*[=:]\s*)("(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*'|\S+)`)

// Text returns s with likely secrets replaced by [Mask]: private keys,
// provider API keys (sk-..., sk-ant-..., also partly masked ones), GitHub
// and Slack tokens, AWS access keys, JWTs, Bearer and Basic credentials,
// the password of a URL's user info, and the values of password=, token=,
// secret=, api_key= style assignments (also libpq's quoted and escaped
// ones). It is a guard for text that may hold anything (a model's output,
// a provider's error, a span): values known to be secret are hidden
// exactly by [Value] or [Values].
func Text(s string) string {
	for _, re := range shapes {
		s = re().ReplaceAllLiteralString(s, Mask)
	}
	s = urlPassword().ReplaceAllString(s, "${1}:"+Mask+"@")
	return replaceAssignments(s)
}

// replaceAssignments hides the values of assignment's matches whose name
// says they are secret: "max_tokens: 4096" names a count, not a token.
func replaceAssignments(s string) string {
	var b strings.Builder
	last := 0
	for _, m := range assignment().FindAllStringSubmatchIndex(s, -1) {
		if !secretName(s[m[2]:m[3]]) {
			continue
		}
		b.WriteString(s[last:m[6]])
		b.WriteString(Mask)
		last = m[7]
	}
	if last == 0 {
		return s
	}
	return b.String() + s[last:]
}

// secretName reports whether a parameter named k (a query, path or
// fragment parameter, a libpq keyword, a variable, a command line option;
// any letter case) holds a secret: any name holding password, passwd,
// secret, token or api_key (sslpassword, oauth_client_secret,
// X-Amz-Security-Token), but not a count of tokens (max_tokens); and the
// whole names of [secretNames] (key, sig, auth, ...), which as parts of a
// name mark no secret (sslkey, target_session_attrs).
func secretName(k string) bool {
	k = strings.ToLower(k)
	if slices.Contains(secretNames, strings.ReplaceAll(k, "_", "-")) {
		return true
	}
	k = strings.ReplaceAll(k, "tokens", "")
	for _, w := range []string{"password", "passwd", "secret", "token", "apikey", "api_key", "api-key"} {
		if strings.Contains(k, w) {
			return true
		}
	}
	return false
}

// secretNames are the whole names (lower case, '_' read as '-') that mark
// a secret: signed URLs (AWS, Google Cloud, Azure SAS), OAuth codes,
// session ids and the short spellings of keys and passwords.
var secretNames = []string{
	"key", "sig", "signature", "x-amz-signature", "x-amz-credential", "x-goog-signature", "x-goog-credential",
	"auth", "authorization", "code", "jwt", "session", "sessionid", "session-id", "bearer",
	"pass", "pwd", "credential", "credentials", "private-key", "privatekey", "access-key", "accesskey",
}
