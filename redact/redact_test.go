package redact_test

import (
	"encoding/base64"
	"encoding/hex"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/keel-run/keel/redact"
)

// pw is the password of the connection strings below; pgx must read it
// from each (so each is a form it accepts), and DSN must remove it whole.
const pw = "Canary7pw"

// DSNForms are connection strings with the password pw (or "Canary7 pw",
// where a form can hold a space) in every form pgx accepts, and what DSN
// makes of each. Other packages' tests print them through Keel's printers.
var DSNForms = []struct{ name, dsn, want string }{
	{"url user:pw@", "postgres://keel:" + pw + "@db.internal:5432/shop?sslmode=disable", "postgres://keel@db.internal:5432/shop?sslmode=disable"},
	{"postgresql scheme", "postgresql://keel:" + pw + "@db.internal/shop", "postgresql://keel@db.internal/shop"},
	{"url ?password=", "postgres://keel@db.internal/shop?sslmode=disable&password=" + pw, "postgres://keel@db.internal/shop?sslmode=disable"},
	{"url ?password= first", "postgres://keel@db.internal/shop?password=" + pw + "&sslmode=disable&application_name=a@b", "postgres://keel@db.internal/shop?sslmode=disable&application_name=a@b"},
	{"url ?sslpassword=", "postgres://keel@db.internal/shop?sslpassword=" + pw, "postgres://keel@db.internal/shop"},
	{"url escaped key", "postgres://keel@db.internal/shop?pass%77ord=" + pw, "postgres://keel@db.internal/shop"},
	{"url both", "postgres://keel:" + pw + "@db.internal/shop?password=" + pw, "postgres://keel@db.internal/shop"},
	{"url several hosts", "postgres://keel:" + pw + "@db1:5432,db2:5433/shop?target_session_attrs=read-write", "postgres://keel@db1:5432,db2:5433/shop?target_session_attrs=read-write"},
	{"url '?' in password", "postgres://keel:Canary7?pw@db.internal/shop", "postgres://keel@db.internal/shop"},
	{"url '#' in password", "postgres://keel:Canary7#pw@db.internal/shop", "postgres://keel@db.internal/shop"},
	{"url escaped '@' in password", "postgres://keel:Canary7%40pw@db.internal/shop", "postgres://keel@db.internal/shop"},
	{"url no host", "postgres://keel:" + pw + "@/shop?host=/run/postgresql", "postgres://keel@/shop?host=/run/postgresql"},
	{"keyword=value", "host=db.internal user=keel password=" + pw + " dbname=shop", "host=db.internal user=keel dbname=shop"},
	{"keyword=value first", "password=" + pw + " host=db.internal", "host=db.internal"},
	{"keyword = value", "host=db.internal password = " + pw + " dbname=shop", "host=db.internal dbname=shop"},
	{"keyword=value quoted", "host=db.internal password='Canary7 pw' dbname=shop", "host=db.internal dbname=shop"},
	{"keyword=value quoted escape", `host=db.internal password='Canary7\' pw' dbname=shop`, "host=db.internal dbname=shop"},
	{"keyword=value escaped space", `host=db.internal password=Canary7\ pw dbname=shop`, "host=db.internal dbname=shop"},
	{"keyword=value tabs", "host=db.internal\tpassword=" + pw + "\tdbname=shop", "host=db.internal\tdbname=shop"},
	{"keyword=value sslpassword", "host=db.internal sslpassword=" + pw, "host=db.internal"},
}

func TestDSNForms(t *testing.T) {
	t.Setenv("PGPASSWORD", "")
	t.Setenv("PGPASSFILE", "/nonexistent")
	t.Setenv("PGSERVICEFILE", "/nonexistent")
	for _, tt := range DSNForms {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := pgconn.ParseConfig(tt.dsn)
			if err != nil {
				t.Fatalf("pgx does not accept %q: %v", tt.dsn, err)
			}
			secret := cfg.Password
			if secret == "" {
				secret = tt.dsn[strings.Index(tt.dsn, "Canary7") : strings.Index(tt.dsn, "Canary7")+len(pw)]
			}
			if !strings.HasPrefix(secret, "Canary7") {
				t.Fatalf("pgx reads the password %q from %q", secret, tt.dsn)
			}
			got := redact.DSN(tt.dsn)
			if got != tt.want {
				t.Errorf("DSN(%q) = %q, want %q", tt.dsn, got, tt.want)
			}
			if strings.Contains(got, "Canary7") || strings.Contains(got, "pw") {
				t.Errorf("DSN(%q) = %q holds the password", tt.dsn, got)
			}
			// What remains still names the same database.
			rc, err := pgconn.ParseConfig(got)
			if err != nil {
				t.Fatalf("pgx does not accept the redacted %q: %v", got, err)
			}
			if rc.Password != "" || rc.Host != cfg.Host || rc.Database != cfg.Database || rc.User != cfg.User {
				t.Errorf("redacted %q reads as %s@%s/%s (password %q), want %s@%s/%s", got, rc.User, rc.Host, rc.Database, rc.Password, cfg.User, cfg.Host, cfg.Database)
			}
		})
	}
}

func TestDSNUnchanged(t *testing.T) {
	for _, dsn := range []string{
		"", "keel.db", "/var/lib/keel/journal.db", "sqlite:///var/lib/keel/x.db?sync=normal",
		"postgres://keel@db.internal/shop?sslmode=disable", "host=db user=keel dbname=shop",
		"postgres://db.internal/shop?application_name=a@b", "https://example.com:8443/a/b@c",
	} {
		if got := redact.DSN(dsn); got != dsn {
			t.Errorf("DSN(%q) = %q, want it unchanged", dsn, got)
		}
	}
}

func TestDSNMalformed(t *testing.T) {
	for _, dsn := range []string{
		"postgres://keel:Canary7/pw@db.internal/shop",
		"postgres://keel:Canary7@pw@db.internal/shop",
		"host=db password='Canary7 pw",
		"postgres://keel:Canary7pw@db.internal:notaport/shop",
	} {
		if got := redact.DSN(dsn); strings.Contains(got, "Canary7") || strings.Contains(got, "pw") {
			t.Errorf("DSN(%q) = %q holds the password", dsn, got)
		}
	}
}

func TestURL(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"https://u:secret@mcp.example.com/sse?x=1", "https://u@mcp.example.com/sse?x=1"},
		{"https://mcp.example.com/sse?api_key=k1&x=1&Token=t#frag", "https://mcp.example.com/sse?x=1#frag"},
		{"https://mcp.example.com/sse?access_token=t", "https://mcp.example.com/sse"},
		{"https://mcp.example.com/sse;token=t;v=1?key=k&x=1;sig=s#access_token=a&state=1", "https://mcp.example.com/sse;v=1?x=1#state=1"},
		{"https://mcp.example.com/sse#token=t", "https://mcp.example.com/sse"},
		{"https://ghp_0123456789abcdefABCDEF0123456789@github.com/o/r?x=1", "https://github.com/o/r?x=1"},
		{"https://bob@mcp.example.com/sse#frag", "https://bob@mcp.example.com/sse#frag"},
		{"https://mcp.example.com/sse", "https://mcp.example.com/sse"},
		{"not a url", "not a url"},
	} {
		if got := redact.URL(tt.in); got != tt.want {
			t.Errorf("URL(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestResource(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"https://u:p@api.example.com/v1/x?key=1#f", "https://api.example.com/v1/x"},
		{"https://api.example.com/v1/x?", "https://api.example.com/v1/x"},
		{"https://api.example.com", "https://api.example.com"},
		{"http://[::1", "(unparsable URL)"},
	} {
		if got := redact.Resource(tt.in); got != tt.want {
			t.Errorf("Resource(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestText(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"key sk-proj-abcdefgh1234 here", "key [REDACTED] here"},
		{"Incorrect API key provided: sk-proj-****1234.", "Incorrect API key provided: [REDACTED]."},
		{"key sk-ant-api03-AAAAAAAAAA leaked", "key [REDACTED] leaked"},
		{"ghp_" + strings.Repeat("a", 36), "[REDACTED]"},
		{"xoxb-1234567890-abc", "[REDACTED]"},
		{"AKIAABCDEFGHIJKLMNOP", "[REDACTED]"},
		{"Authorization: Bearer abcdefghijklmnop", "Authorization: [REDACTED]"},
		{"eyJhbGciOiJIUzI1.eyJzdWIiOiIx.SflKxwRJSMeKKF2QT4", "[REDACTED]"},
		{"-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----", "[REDACTED]"},
		{"export DB_PASSWORD=hunter22 next", "export DB_PASSWORD=[REDACTED] next"},
		{`api_key: "a b c"`, `api_key: [REDACTED]`},
		{`password='a\' b' host=x`, `password=[REDACTED] host=x`},
		{"open postgres://keel:Canary7pw@db/shop failed", "open postgres://keel:[REDACTED]@db/shop failed"},
		{"dial postgres://keel@db/shop?password=Canary7pw", "dial postgres://keel@db/shop?password=[REDACTED]"},
		{"nothing secret here: desk-jockey task-list", "nothing secret here: desk-jockey task-list"},
	} {
		if got := redact.Text(tt.in); got != tt.want {
			t.Errorf("Text(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestValue(t *testing.T) {
	const tok = "CanaryAccessTok77+/x"
	b := []byte(tok)
	for _, tt := range []struct{ name, echo string }{
		{"as is", tok},
		{"lower", strings.ToLower(tok)},
		{"upper", strings.ToUpper(tok)},
		{"reversed", "x/+77koTsseccAyranaC"},
		{"base64", base64.StdEncoding.EncodeToString(b)},
		{"base64url unpadded", base64.RawURLEncoding.EncodeToString(b)},
		{"hex", hex.EncodeToString(b)},
		{"hex upper", strings.ToUpper(hex.EncodeToString(b))},
		{"url-escaped", "CanaryAccessTok77%2B%2Fx"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := redact.Value("before "+tt.echo+" after", tok); got != "before "+redact.Mask+" after" {
				t.Errorf("Value(%q) = %q", tt.echo, got)
			}
			m := redact.Find("before "+tt.echo+" after", "other-value", tok)
			if len(m) != 1 || m[0].Value != 1 {
				t.Errorf("Find(%q) = %v, want value 1", tt.echo, m)
			}
		})
	}
	if got := redact.Value("nothing here", tok); got != "nothing here" {
		t.Errorf("Value changed text without the value: %q", got)
	}
	if got := redact.Value("abc", ""); got != "abc" {
		t.Errorf("Value with no value = %q", got)
	}
	if got := redact.Find("nothing here", tok); got != nil {
		t.Errorf("Find in text without the value = %v", got)
	}
	// A short value is hidden as is, in its case only; shorter than
	// MinLen, not at all.
	if got := redact.Value("pin 4711 and PIN 4711x", "4711"); got != "pin [REDACTED] and PIN [REDACTED]x" {
		t.Errorf("Value of a short value = %q", got)
	}
	if got := redact.Value("a abc b", "abc"); got != "a abc b" {
		t.Errorf("Value of a 3-byte value = %q", got)
	}
}

func TestForms(t *testing.T) {
	var names []string
	for _, f := range redact.Forms("tok?>~canary??>>") {
		names = append(names, f.Name)
	}
	slices.Sort(names)
	want := []string{"as is", "base32", "base32 unpadded", "base64", "base64 unpadded", "base64url", "base64url unpadded", "hex", "reversed", "rot13", "spaced", "url-escaped"}
	if diff := cmp.Diff(want, names); diff != "" {
		t.Errorf("Forms names (-want +got):\n%s", diff)
	}
	// A value that URL-escapes to itself has one form "as is".
	var asIs int
	for _, f := range redact.Forms("abcdefgh") {
		if f.Text == "abcdefgh" {
			asIs++
			if f.Name != "as is" {
				t.Errorf("Forms(abcdefgh): the value itself is named %q", f.Name)
			}
		}
	}
	if asIs != 1 {
		t.Errorf("Forms(abcdefgh) has the value %d times", asIs)
	}
}

func TestValues(t *testing.T) {
	r := redact.Values("hunter2-canary", "hi ")
	got := r("token hunter2-canary and sk-abcdefghijklmnop, hi there")
	if want := "token [REDACTED] and [REDACTED], hi there"; got != want {
		t.Errorf("Values = %q, want %q", got, want)
	}
	if got := redact.Values()("sk-abcdefghijklmnop"); got != redact.Mask {
		t.Errorf("Values() = %q, want Text's", got)
	}
}

func TestTextKeepsCounts(t *testing.T) {
	for _, s := range []string{
		"max_tokens: 100000 > 64000, which is the maximum allowed number of output tokens",
		"usage: prompt_tokens=12 completion_tokens=3",
	} {
		if got := redact.Text(s); got != s {
			t.Errorf("Text(%q) = %q, want it unchanged", s, got)
		}
	}
}

func TestSecrets(t *testing.T) {
	s := redact.NewSecrets("abc", "first-Secret-Value", "Canary-second-77")
	text := "x " + base64.StdEncoding.EncodeToString([]byte("Canary-second-77")) + " y FIRST-SECRET-VALUE z"
	want := []redact.Match{{Value: 1, Form: "as is"}, {Value: 2, Form: "base64"}}
	if diff := cmp.Diff(want, s.Find(text)); diff != "" {
		t.Errorf("Find (-want +got):\n%s", diff)
	}
	if got := s.Hide(text); strings.Contains(got, "SECRET") || strings.Count(got, redact.Mask) != 2 {
		t.Errorf("Hide = %q", got)
	}
	// A value that holds another is hidden whole.
	if got := redact.NewSecrets("tok-1234", "my-tok-12345").Hide("a my-tok-12345 b"); got != "a "+redact.Mask+" b" {
		t.Errorf("Hide of nested values = %q", got)
	}
	var zero redact.Secrets
	if zero.Find("anything") != nil || zero.Hide("anything") != "anything" {
		t.Error("the zero Secrets finds or hides something")
	}
}

// BenchmarkSecretsFind scans a 4 KiB tool argument for three secrets.
func BenchmarkSecretsFind(b *testing.B) {
	s := redact.NewSecrets("ghp_0123456789abcdefghijABCDEFGHIJ", "Canary-second-77", "hunter2-hunter2")
	text := strings.Repeat("GET /api/v1/items?page=2&sort=desc HTTP/1.1 ", 100)
	b.ReportAllocs()
	for b.Loop() {
		if s.Find(text) != nil {
			b.Fatal("found")
		}
	}
}

// TestURLCredential: the part named, never the value, and exactly when
// URL would change s.
func TestURLCredential(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"https://bob:Canary7pw@mcp.example.com/mcp?token=Canary7tok", `the password of its user info and its query parameter "token"`},
		{"https://bob:Canary7?pw@mcp.example.com/mcp", "the password of its user info"},
		{"https://bob@mcp.example.com/mcp?x=1&Access_Token=Canary7tok", `its query parameter "Access_Token"`},
		{"https://mcp.example.com/mcp?api%5Fkey=Canary7tok", `its query parameter "api_key"`},
		{"https://mcp.example.com/mcp?max_tokens=5#token=Canary7tok", `its fragment parameter "token"`},
		{"https://bob@mcp.example.com/mcp", ""},
		// V2: the spellings of signed URLs, OAuth responses, sessions.
		{"https://mcp.example.com/mcp?key=Canary7tok", `its query parameter "key"`},
		{"https://mcp.example.com/mcp?KEY=Canary7tok", `its query parameter "KEY"`},
		{"https://mcp.example.com/mcp?sv=2022&sig=Canary7tok", `its query parameter "sig"`},
		{"https://mcp.example.com/mcp?signature=Canary7tok", `its query parameter "signature"`},
		{"https://b.s3.amazonaws.com/o?X-Amz-Credential=Canary7cred&X-Amz-Signature=Canary7sig&X-Amz-Security-Token=Canary7tok", `its query parameter "X-Amz-Credential" and its query parameter "X-Amz-Signature" and its query parameter "X-Amz-Security-Token"`},
		{"https://storage.googleapis.com/b/o?X-Goog-Credential=Canary7cred&X-Goog-Signature=Canary7sig", `its query parameter "X-Goog-Credential" and its query parameter "X-Goog-Signature"`},
		{"https://mcp.example.com/mcp?auth=Canary7tok", `its query parameter "auth"`},
		{"https://mcp.example.com/cb?code=Canary7tok&state=s", `its query parameter "code"`},
		{"https://mcp.example.com/mcp?jwt=Canary7tok", `its query parameter "jwt"`},
		{"https://mcp.example.com/mcp?session=Canary7tok", `its query parameter "session"`},
		{"https://mcp.example.com/mcp?SessionId=Canary7tok", `its query parameter "SessionId"`},
		{"https://mcp.example.com/mcp?bearer=Canary7tok", `its query parameter "bearer"`},
		{"https://mcp.example.com/mcp?pass=Canary7pw", `its query parameter "pass"`},
		{"https://mcp.example.com/mcp?pwd=Canary7pw", `its query parameter "pwd"`},
		{"https://mcp.example.com/mcp?authorization=Canary7tok", `its query parameter "authorization"`},
		{"https://mcp.example.com/mcp?%6Bey=Canary7tok", `its query parameter "key"`},
		{"https://mcp.example.com/mcp?x=1;sig=Canary7tok", `its query parameter "sig"`},
		{"https://mcp.example.com/mcp;token=Canary7tok", `its path parameter "token"`},
		{"https://mcp.example.com/a;v=1;Key=Canary7tok/b", `its path parameter "Key"`},
		{"https://mcp.example.com/mcp#token=Canary7tok", `its fragment parameter "token"`},
		{"https://app.example.com/cb#access_token=Canary7tok&token_type=bearer&expires_in=3600", `its fragment parameter "access_token" and its fragment parameter "token_type"`},
		{"https://ghp_Canary7tok0123456789abcdefABCDEF01@github.com/o/r", "its user name, which looks like a token"},
		{"https://glpat-Canary7tok0123456789ab@gitlab.com/o/r", "its user name, which looks like a token"},
		{"https://Canary7tk9Xq2Lm4Zp8Rt5Wv3@mcp.example.com/mcp", "its user name, which looks like a token"},
		{"https://Canary7tk9Xq2Lm4Zp8Rt5Wv3:x-oauth-basic@github.com/o/r", "its user name, which looks like a token"},
		// Not secrets: counts of tokens, parts of a name, plain users.
		{"https://mcp.example.com/mcp?keyword=a&monkey=b&max_tokens=5&sslkey=/k&target_session_attrs=any#section-2", ""},
		{"https://first.last@mcp.example.com/mcp;v=2", ""},
		{"node /srv/mcp.js --token=Canary7tok", ""},
		{"https://mcp.example.com/a@b?sslmode=require", ""},
	} {
		got := redact.URLCredential(tt.in)
		if got != tt.want {
			t.Errorf("URLCredential(%q) = %q, want %q", tt.in, got, tt.want)
		}
		if strings.Contains(got, "Canary7") {
			t.Errorf("URLCredential(%q) = %q names the value", tt.in, got)
		}
		if u := redact.URL(tt.in); tt.want != "" && strings.Contains(u, "Canary7") {
			t.Errorf("URL(%q) = %q keeps the credential", tt.in, u)
		}
		if (got == "") != (redact.URL(tt.in) == tt.in) {
			t.Errorf("URLCredential(%q) = %q, but URL makes it %q", tt.in, got, redact.URL(tt.in))
		}
	}
	for _, tt := range DSNForms {
		if strings.Contains(tt.dsn, "://") && redact.URLCredential(tt.dsn) == "" {
			t.Errorf("URLCredential(%q) finds no credential", tt.dsn)
		}
	}
}

func TestConnectorURL(t *testing.T) {
	if err := redact.ConnectorURL("mcp", "https://mcp.example.com/mcp?x=1;v=2&max_tokens=5"); err != nil {
		t.Errorf("a URL without a credential is refused: %v", err)
	}
	// Any user info (a token as user name is how PATs are given) and any
	// fragment (never sent; #Canary7 may be anything) are refused, never
	// shown, besides what URLCredential names.
	for _, tt := range []struct{ in, part, shown string }{
		{"https://Canary7user@mcp.example.com/mcp", "its user info", "https://mcp.example.com/mcp"},
		{"https://ghp_Canary7tok0123456789abcdefABCDEF01@mcp.example.com/mcp", "user name, which looks like a token", "https://mcp.example.com/mcp"},
		{"https://api.example.com/openapi.json#Canary7frag", "a fragment", "https://api.example.com/openapi.json"},
		{"https://mcp.example.com/mcp#token=Canary7tok", "a fragment", "https://mcp.example.com/mcp"},
		{"https://mcp.example.com/mcp?x=1&key=Canary7tok", `its query parameter "key"`, "https://mcp.example.com/mcp?x=1"},
		{"https://mcp.example.com/mcp;token=Canary7tok", `its path parameter "token"`, "https://mcp.example.com/mcp"},
	} {
		err := redact.ConnectorURL("mcp", tt.in)
		if err == nil {
			t.Errorf("ConnectorURL(%q) = nil, want it refused", tt.in)
			continue
		}
		if msg := err.Error(); strings.Contains(msg, "Canary7") || !strings.Contains(msg, tt.part) || !strings.Contains(msg, "URL "+tt.shown+" carries") {
			t.Errorf("ConnectorURL(%q) = %q: want %q named and %s shown, never a value", tt.in, msg, tt.part, tt.shown)
		}
	}
	for kind, how := range map[string]string{"mcp": "keel auth connect mcp-NAME", "openapi": "token_env"} {
		err := redact.ConnectorURL(kind, "https://bob:Canary7pw@api.example.com/x?token=Canary7tok")
		if err == nil {
			t.Fatalf("%s: a URL with a password and a token is accepted", kind)
		}
		if msg := err.Error(); strings.Contains(msg, "Canary7") || !strings.Contains(msg, "password of its user info") ||
			!strings.Contains(msg, "URL https://api.example.com/x carries") || !strings.Contains(msg, how) {
			t.Errorf("%s: error %q: want the part named, the URL without its credentials and %q, never a value", kind, msg, how)
		}
	}
}

// TestCommandCredential: a stdio connector's command line with a secret
// option's value (one or two words, env's NAME=VALUE) or a URL argument
// with a credential is named (never the value) and masked, and refused
// by ConnectorCommand with the way to pass a secret; options naming where
// a secret is are not.
func TestCommandCredential(t *testing.T) {
	for _, tt := range []struct {
		line, want, masked string
	}{
		{"node s.js --token Canary7tok", "the value of --token", "node s.js --token [REDACTED]"},
		{"/usr/bin/tool --password Canary7pw -v", "the value of --password", "/usr/bin/tool --password [REDACTED] -v"},
		{"/usr/bin/tool --api-key=Canary7tok", "the value of --api-key", "/usr/bin/tool --api-key=[REDACTED]"},
		{"/usr/bin/tool -key Canary7tok", "the value of -key", "/usr/bin/tool -key [REDACTED]"},
		{"env API_KEY=Canary7tok /usr/bin/tool", "the value of API_KEY", "env API_KEY=[REDACTED] /usr/bin/tool"},
		{"/usr/bin/tool 'https://u:Canary7pw@h/x'", "a URL argument with the password of its user info", "/usr/bin/tool https://u@h/x"},
		{"npx mcp-remote https://h/mcp?sig=Canary7tok", `a URL argument with its query parameter "sig"`, "npx mcp-remote https://h/mcp"},
		{"/usr/bin/tool --secret Canary7s --auth=Canary7a", "the value of --secret and the value of --auth", "/usr/bin/tool --secret [REDACTED] --auth=[REDACTED]"},
		{"node /srv/fs.js --token-file /run/t --password-env PW --max-tokens 100 --token --verbose", "", ""},
		{"node /srv/fs.js https://bob@h/x --key= --session-timeout 5", "", ""},
		{`sh -c 'exec tool --token "$API_TOKEN" --api-key=${API_KEY}'`, "", ""},
		{`npx mcp-remote https://h/mcp --header "Authorization: Bearer Canary7tok"`, "the value of the header Authorization", "npx mcp-remote https://h/mcp --header Authorization: Bearer [REDACTED]"},
		{`npx mcp-remote https://h/mcp --header "X-Api-Key: Canary7tok" -v`, "the value of the header X-Api-Key", "npx mcp-remote https://h/mcp --header X-Api-Key: [REDACTED] -v"},
		{`tool -H "Cookie: sid=Canary7tok"`, "the value of the header Cookie", "tool -H Cookie: [REDACTED]"},
		{`npx mcp-remote https://h/mcp --header "Authorization: Bearer ${AUTH_TOKEN}"`, "", ""},
		{`tool --header "Accept: application/json" --header "Content-Type: text/plain"`, "", ""},
	} {
		argv := redact.CommandWords(tt.line)
		got := redact.CommandCredential(argv)
		if got != tt.want {
			t.Errorf("CommandCredential(%q) = %q, want %q", tt.line, got, tt.want)
		}
		masked := strings.Join(redact.Command(argv), " ")
		if tt.masked == "" {
			tt.masked = strings.Join(argv, " ")
		}
		if masked != tt.masked || strings.Contains(masked, "Canary7") {
			t.Errorf("Command(%q) = %q, want %q", tt.line, masked, tt.masked)
		}
		if (got == "") != slices.Equal(redact.Command(argv), argv) {
			t.Errorf("CommandCredential(%q) = %q, but Command makes it %q", tt.line, got, masked)
		}
		err := redact.ConnectorCommand(argv)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("ConnectorCommand(%q) = %v, want it taken", tt.line, err)
		case tt.want != "" && (err == nil || strings.Contains(err.Error(), "Canary7") || !strings.Contains(err.Error(), "--mcp-secret-env") || !strings.Contains(err.Error(), "secret_env")):
			t.Errorf("ConnectorCommand(%q) = %v, want it refused naming --mcp-secret-env and secret_env, never the value", tt.line, err)
		}
		// A view of an entry journaled before shows it masked, whole.
		if spec := redact.Spec(tt.line); spec != tt.masked && tt.want != "" {
			t.Errorf("Spec(%q) = %q, want %q", tt.line, spec, tt.masked)
		}
	}
	if got := redact.Spec("https://Canary7@h/x?key=Canary7#Canary7"); got != "https://h/x" {
		t.Errorf("Spec of a URL = %q, want it without user info, key and fragment", got)
	}
	for _, spec := range []string{"https://h/x?key=k", "host=h password=p dbname=d", "node s.js --verbose"} {
		if got, want := redact.Spec(spec), map[bool]string{true: redact.URL(spec), false: redact.DSN(spec)}[strings.Contains(spec, "://")]; got != want {
			t.Errorf("Spec(%q) = %q, want %q", spec, got, want)
		}
	}
}

// A header given as one argument (as a shell splits --header "NAME:
// VALUE") carries its credential as the split form does.
func TestCommandCredentialHeaderArgument(t *testing.T) {
	for _, tt := range []struct {
		argv   []string
		want   string
		masked []string
	}{
		{[]string{"npx", "mcp-remote", "--header", "Authorization: Bearer Canary7tok"}, "the value of the header Authorization",
			[]string{"npx", "mcp-remote", "--header", "Authorization: Bearer [REDACTED]"}},
		{[]string{"tool", "--header=Authorization:Basic Canary7tok"}, "the value of the header Authorization",
			[]string{"tool", "--header=Authorization: Basic [REDACTED]"}},
		{[]string{"tool", "--header", "Authorization: Bearer $TOKEN"}, "", nil},
	} {
		if got := redact.CommandCredential(tt.argv); got != tt.want {
			t.Errorf("CommandCredential(%q) = %q, want %q", tt.argv, got, tt.want)
		}
		if tt.masked == nil {
			tt.masked = tt.argv
		}
		if got := redact.Command(tt.argv); !slices.Equal(got, tt.masked) {
			t.Errorf("Command(%q) = %q, want %q", tt.argv, got, tt.masked)
		}
	}
}
