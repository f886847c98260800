package assemble

import (
	"net/url"
	"regexp"
	"strings"
)

var dsnPassword = regexp.MustCompile(`(?i)(^|\s)password\s*=\s*('(\\'|[^'])*'|\S+)`)

// RedactDSN removes the password from a connection string.
func RedactDSN(dsn string) string {
	if u, err := url.Parse(dsn); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		if u.User != nil {
			if _, has := u.User.Password(); has {
				u.User = url.User(u.User.Username())
			}
		}
		q := u.Query()
		if q.Has("password") {
			q.Del("password")
			u.RawQuery = q.Encode()
		}
		return u.String()
	}
	return strings.TrimSpace(dsnPassword.ReplaceAllString(dsn, "$1"))
}
