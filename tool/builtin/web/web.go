// Package web provides Keel's fetch_url tool: an HTTP GET of one URL whose
// host the run's network policy allows, returned as bounded, sanitised
// text.
//
// Arguments: {"url": string (required, http or https), "max_bytes":
// integer (optional, 1 to [Options].MaxBytesLimit)}.
//
// The policy is [sandbox.Network]: a URL's host must match an entry of
// Allow (see package [egress]), and every redirect is checked again. A
// name is reached only at public addresses: one that resolves to a
// loopback or private address is refused, unless the allowlist names
// that address itself (or "localhost"). With the zero Network the tool
// refuses every URL.
package web

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/keel-run/keel/sandbox"
	"github.com/keel-run/keel/sandbox/egress"
	"github.com/keel-run/keel/tool"
)

// Name is the tool's name.
const Name = "fetch_url"

// Defaults of [Options].
const (
	DefaultTimeout       = 30 * time.Second                           // whole fetch
	DefaultMaxBytes      = 1 << 20                                    // body bytes read by default
	DefaultMaxBytesLimit = 10 << 20                                   // largest max_bytes
	DefaultUserAgent     = "Keel (+https://github.com/keel-run/keel)" // User-Agent header
)

// maxRedirects is how many redirects a fetch follows, each checked
// against the allowlist.
const maxRedirects = 5

// Options configures fetch_url. The zero value is valid.
type Options struct {
	// Transport makes the requests; nil means [egress.Transport]: no
	// proxy from the environment, timeouts, and names reached only at
	// public addresses unless the allowlist names the address.
	Transport http.RoundTripper
	// Timeout bounds a whole fetch, redirects and body included; default
	// [DefaultTimeout].
	Timeout time.Duration
	// MaxBytes is how much of a body is read when the call gives no
	// max_bytes; default [DefaultMaxBytes] (1 MiB).
	MaxBytes int64
	// MaxBytesLimit is the largest max_bytes a call may ask for; default
	// [DefaultMaxBytesLimit] (10 MiB).
	MaxBytesLimit int64
	// UserAgent is sent with every request; default [DefaultUserAgent].
	UserAgent string
}

//go:embed fetch_url.md
var description string

// Register adds fetch_url to r. opts may be nil. It panics if r already
// has a tool of that name.
func Register(r *tool.Registry, opts *Options) {
	t, h := New(opts)
	r.Add(t, h)
}

// New returns fetch_url and its handler without registering them. opts
// may be nil.
func New(opts *Options) (*tool.Tool, tool.Handler) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.MaxBytesLimit <= 0 {
		o.MaxBytesLimit = DefaultMaxBytesLimit
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	o.MaxBytes = min(o.MaxBytes, o.MaxBytesLimit)
	if o.UserAgent == "" {
		o.UserAgent = DefaultUserAgent
	}
	if o.Transport == nil {
		o.Transport = egress.Transport()
	}
	t := &tool.Tool{
		Name:        Name,
		Description: strings.TrimSpace(description),
		InputSchema: json.RawMessage(fmt.Sprintf(`{
  "type": "object",
  "additionalProperties": false,
  "properties": {
    "url": {"type": "string", "minLength": 1, "description": "The http or https URL to fetch."},
    "max_bytes": {"type": "integer", "minimum": 1, "maximum": %d, "description": "Read at most this many bytes of the body; default %d."}
  },
  "required": ["url"]
}`, o.MaxBytesLimit, o.MaxBytes)),
		Effect: tool.External,
		Scope:  func(json.RawMessage) []string { return []string{} },
	}
	f := &fetcher{opts: o}
	return t, f.handle
}

// ErrNotAllowed is wrapped by [Allowed]'s errors.
var ErrNotAllowed = egress.ErrNotAllowed

// Allowed checks u against the network policy n ([egress.List.CheckURL]):
// the scheme must be http or https and the host and port match an entry
// of n.Allow (a name, a "*.domain" wildcard, "localhost", or an IP
// address the list names; ports 80 and 443 for an entry without one).
// Names compare case-insensitively, ignoring a final dot. It returns nil
// or an error wrapping [ErrNotAllowed] that says why. The name's
// addresses are checked when it is dialed ([egress.Dial]).
func Allowed(n sandbox.Network, u *url.URL) error {
	l, err := egress.Parse(n.Allow)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrNotAllowed, err)
	}
	return l.CheckURL(u)
}

type fetcher struct{ opts Options }

type fetchInput struct {
	URL      string  `json:"url"`
	MaxBytes float64 `json:"max_bytes"`
}

// headerReserve is the room kept for the status line and notes.
const headerReserve = 400

func (f *fetcher) handle(ctx context.Context, req *tool.Request) (*tool.Result, error) {
	var in fetchInput
	if err := json.Unmarshal(req.Arguments, &in); err != nil {
		return tool.Errorf("invalid arguments for fetch_url: %v", err), nil
	}
	var network sandbox.Network
	if req.Env != nil {
		network = req.Env.Network
	}
	u, err := url.Parse(strings.TrimSpace(in.URL))
	if err != nil {
		return tool.Errorf("invalid URL: %v", err), nil
	}
	if err := Allowed(network, u); err != nil {
		return tool.Errorf("fetch refused: %s", strings.TrimPrefix(err.Error(), ErrNotAllowed.Error()+": ")), nil
	}
	limit := f.opts.MaxBytes
	if in.MaxBytes > 0 {
		limit = min(int64(in.MaxBytes), f.opts.MaxBytesLimit)
	}
	ctx, cancel := context.WithTimeout(ctx, f.opts.Timeout)
	defer cancel()
	client := &http.Client{
		Transport: f.opts.Transport,
		CheckRedirect: func(r *http.Request, via []*http.Request) error {
			if len(via) >= maxRedirects {
				return fmt.Errorf("stopped after %d redirects", maxRedirects)
			}
			if err := Allowed(network, r.URL); err != nil {
				return fmt.Errorf("redirect to %s refused: %s", r.URL.Redacted(), strings.TrimPrefix(err.Error(), ErrNotAllowed.Error()+": "))
			}
			return nil
		},
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return tool.Errorf("invalid URL: %v", err), nil
	}
	hreq.Header.Set("User-Agent", f.opts.UserAgent)
	hreq.Header.Set("Accept", "text/html, text/plain, application/json, */*;q=0.5")
	resp, err := client.Do(hreq)
	if err != nil {
		return tool.Errorf("fetch %s failed: %s", u.Redacted(), fetchErr(ctx, err, f.opts.Timeout)), nil
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return tool.Errorf("fetch %s failed while reading the body: %s", u.Redacted(), fetchErr(ctx, err, f.opts.Timeout)), nil
	}
	cut := int64(len(body)) > limit
	if cut {
		body = body[:limit]
	}
	ctype := resp.Header.Get("Content-Type")
	media, params, _ := mime.ParseMediaType(ctype)
	if media == "" {
		media = http.DetectContentType(body)
		media, params, _ = mime.ParseMediaType(media)
	}
	header := fmt.Sprintf("HTTP %s · %s · %s", resp.Status, orUnknown(media), resp.Request.URL.Redacted())
	res := &tool.Result{IsError: resp.StatusCode >= 400}
	if !isText(media, body) {
		res.Content = fmt.Sprintf("%s\n[binary content (%s, %s bytes read) is not shown; fetch_url returns text only]", header, orUnknown(media), commas(int64(len(body))))
		res.IsError = true
		return res, nil
	}
	body = toUTF8(body, params["charset"])
	if media == "text/html" || media == "application/xhtml+xml" {
		body = []byte(htmlText(body, resp.Request.URL))
	}
	maxChars := tool.DefaultMaxResultChars
	if req.Env != nil && req.Env.MaxResultChars > 0 {
		maxChars = req.Env.MaxResultChars
	}
	var ws *tool.Workspace
	if req.Env != nil {
		ws = req.Env.Workspace
	}
	out := tool.NewOutput(ws, req.RunID, req.CallID, maxChars-headerReserve)
	out.Write(body)
	out.Close()
	res.Artifact, res.OutputBytes = out.Artifact(), out.Bytes()
	var b strings.Builder
	b.WriteString(header)
	b.WriteByte('\n')
	b.WriteString(out.View())
	if cut {
		fmt.Fprintf(&b, "\n[the body was cut at max_bytes=%d]", limit)
	}
	res.Content = b.String()
	return res, nil
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown type"
	}
	return s
}

// fetchErr words a request error for the model.
func fetchErr(ctx context.Context, err error, timeout time.Duration) string {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Sprintf("timed out after %s", timeout)
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return err.Error()
}

// isText reports whether a body of media type media is text. A declared
// text type is text unless most of it is control bytes; an undeclared or
// generic type must be valid UTF-8 without NULs.
func isText(media string, body []byte) bool {
	sample := body[:min(len(body), 8192)]
	switch {
	case strings.HasPrefix(media, "text/"),
		strings.HasSuffix(media, "+json"), strings.HasSuffix(media, "+xml"),
		media == "application/json", media == "application/xml", media == "application/javascript",
		media == "application/x-javascript", media == "application/ecmascript", media == "application/x-yaml",
		media == "application/yaml", media == "application/toml", media == "application/x-www-form-urlencoded",
		media == "application/xhtml+xml", media == "application/x-ndjson", media == "application/sql":
		ctrl := 0
		for _, c := range sample {
			if c < 0x09 || (c > 0x0d && c < 0x20 && c != 0x1b) {
				ctrl++
			}
		}
		return ctrl*10 <= len(sample)
	case media == "application/octet-stream" || media == "":
		return !bytes.Contains(sample, []byte{0}) && utf8.Valid(trimPartial(sample))
	}
	return false
}

func trimPartial(b []byte) []byte {
	for k := 1; k <= 3 && k <= len(b); k++ {
		if utf8.RuneStart(b[len(b)-k]) {
			if !utf8.FullRune(b[len(b)-k:]) {
				return b[:len(b)-k]
			}
			break
		}
	}
	return b
}

// toUTF8 converts Latin-1 and Windows-1252 bodies to UTF-8 (the common
// legacy charsets); other charsets pass unchanged, and invalid bytes
// become U+FFFD later.
func toUTF8(body []byte, charset string) []byte {
	switch strings.ToLower(charset) {
	case "iso-8859-1", "latin1", "latin-1", "windows-1252", "cp1252", "us-ascii", "ascii":
	default:
		return body
	}
	if utf8.Valid(body) {
		return body
	}
	var b bytes.Buffer
	for _, c := range body {
		if r, ok := cp1252[c]; ok {
			b.WriteRune(r)
			continue
		}
		b.WriteRune(rune(c))
	}
	return b.Bytes()
}

// cp1252 maps the Windows-1252 bytes that differ from Latin-1.
var cp1252 = map[byte]rune{
	0x80: '€', 0x82: '‚', 0x83: 'ƒ', 0x84: '„', 0x85: '…', 0x86: '†', 0x87: '‡', 0x88: 'ˆ', 0x89: '‰',
	0x8a: 'Š', 0x8b: '‹', 0x8c: 'Œ', 0x8e: 'Ž', 0x91: '‘', 0x92: '’', 0x93: '“', 0x94: '”', 0x95: '•',
	0x96: '–', 0x97: '—', 0x98: '˜', 0x99: '™', 0x9a: 'š', 0x9b: '›', 0x9c: 'œ', 0x9e: 'ž', 0x9f: 'Ÿ',
}

func commas(n int64) string {
	s := strconv.FormatInt(n, 10)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}
