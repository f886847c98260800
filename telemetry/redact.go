package telemetry

import "regexp"

// secretPatterns match credentials that commonly appear in prompts, tool
// arguments and command output: provider API keys, bearer tokens, JWTs,
// private keys, cloud access keys and password assignments.
var secretPatterns = []*regexp.Regexp{
	regexp.MustCompile(`-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----`),
	regexp.MustCompile(`\b(?:sk|pk|rk)-[A-Za-z0-9_-]{16,}`),
	regexp.MustCompile(`\bsk-ant-[A-Za-z0-9_-]{16,}`),
	regexp.MustCompile(`\b(?:ghp|gho|ghu|ghs|ghr|github_pat)_[A-Za-z0-9_]{20,}`),
	regexp.MustCompile(`\bxox[abprs]-[A-Za-z0-9-]{10,}`),
	regexp.MustCompile(`\bAKIA[0-9A-Z]{16}\b`),
	regexp.MustCompile(`\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}`),
	regexp.MustCompile(`(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{12,}`),
	regexp.MustCompile(`(?i)\b([A-Z0-9_]*(?:password|passwd|secret|token|api_?key)[A-Z0-9_]*)(\s*[=:]\s*)("[^"]*"|'[^']*'|\S+)`),
}

// Redacted replaces a secret in span text.
const Redacted = "[REDACTED]"

// Redact replaces likely secrets in s by [Redacted]. It is the default
// of [Options.Redact]; [RedactValues] adds exact values (vault-injected
// credentials) to it.
func Redact(s string) string {
	for i, re := range secretPatterns {
		if i == len(secretPatterns)-1 {
			s = re.ReplaceAllString(s, "${1}${2}"+Redacted)
			continue
		}
		s = re.ReplaceAllString(s, Redacted)
	}
	return s
}

// RedactValues returns a redactor that replaces each of values (secrets
// known exactly, such as credentials a vault injected into the run), then
// applies [Redact]. Values shorter than 4 bytes are ignored: replacing
// them would garble the text without hiding anything.
func RedactValues(values ...string) func(string) string {
	var quoted []string
	for _, v := range values {
		if len(v) >= 4 {
			quoted = append(quoted, regexp.QuoteMeta(v))
		}
	}
	if len(quoted) == 0 {
		return Redact
	}
	re := regexp.MustCompile(joinAlt(quoted))
	return func(s string) string { return Redact(re.ReplaceAllString(s, Redacted)) }
}

func joinAlt(parts []string) string {
	out := ""
	for i, p := range parts {
		if i > 0 {
			out += "|"
		}
		out += p
	}
	return out
}
