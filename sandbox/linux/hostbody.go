//go:build linux

package linux

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"unicode/utf8"
)

// MaxSubstitutedBody bounds the request body the egress proxy reads
// whole, before sending anything on, to put host secrets' values in
// place of their placeholders or to find a placeholder it must refuse.
// A longer body is sent as it streams, and a placeholder found in it
// beyond this bound stops the request (the host receives an incomplete
// body it does not act on) and the sandbox's program a refusal.
const MaxSubstitutedBody = 1 << 20

// bodyRefusal is a request the proxy refuses because of its body: code
// and why are what the sandbox's program receives.
type bodyRefusal struct {
	code int
	why  string
}

func (e *bodyRefusal) Error() string { return e.why }

// substituteBody deals with the placeholders of secrets (those of r's
// host) in r's body: it puts the values in for secrets that allow it
// (HostSecret.Body) in a text body of at most MaxSubstitutedBody bytes,
// names them in sub, and returns a *bodyRefusal, before anything is
// sent, for a body holding any other placeholder of secrets. A longer
// body is sent as it streams, watched: a placeholder in it fails the
// body's read with a *bodyRefusal.
func substituteBody(r *http.Request, secrets []hostSecret, sub *substitution) error {
	if r.Body == nil || r.Body == http.NoBody || len(secrets) == 0 {
		return nil
	}
	orig := r.Body
	head, err := io.ReadAll(io.LimitReader(orig, MaxSubstitutedBody+1))
	if err != nil {
		return &bodyRefusal{http.StatusBadRequest, "cannot read the request's body: " + err.Error()}
	}
	if len(head) > MaxSubstitutedBody {
		if found := placeholdersIn(head, secrets); len(found) > 0 {
			return tooLong(found)
		}
		r.Body = &watchReader{r: io.MultiReader(bytes.NewReader(head), orig), c: orig, secrets: secrets}
		return nil
	}
	orig.Close()
	enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding")))
	if enc == "identity" {
		enc = ""
	}
	found := placeholdersIn(head, secrets)
	if len(found) == 0 && enc != "" {
		if plain, ok := decompress(head, enc); ok && len(placeholdersIn(plain, secrets)) > 0 {
			return &bodyRefusal{http.StatusUnsupportedMediaType, fmt.Sprintf("the request's body (Content-Encoding %s) holds the placeholder of %s; Keel puts a value only in an uncompressed body: send it without compression", enc, names(placeholdersIn(plain, secrets)))}
		}
	}
	if len(found) > 0 {
		var refused []hostSecret
		for _, s := range found {
			if !s.Body {
				refused = append(refused, s)
			}
		}
		if len(refused) > 0 {
			return &bodyRefusal{http.StatusUnprocessableEntity, fmt.Sprintf("the request's body holds the placeholder of %s, and Keel puts that value only in the headers, path and query of requests to its host, not in bodies (a body could store it at the host where others read it); send it in a header, or start the run with --secret-in-body %s",
				names(refused), refused[0].Name)}
		}
		ct := r.Header.Get("Content-Type")
		switch {
		case enc != "":
			return &bodyRefusal{http.StatusUnsupportedMediaType, fmt.Sprintf("the request's body holds the placeholder of %s but is encoded (Content-Encoding %s); Keel puts a value only in an uncompressed body", names(found), enc)}
		case !textBody(ct, head):
			if ct == "" {
				ct = "not UTF-8 text, no Content-Type"
			}
			return &bodyRefusal{http.StatusUnsupportedMediaType, fmt.Sprintf("the request's body (%s) holds the placeholder of %s; Keel puts a value only in a text body (JSON, a form, a multipart form, XML, text/*): send it as one, or in a header", ct, names(found))}
		}
		for _, s := range found {
			head = bytes.ReplaceAll(head, []byte(s.placeholder), []byte(s.Value))
			sub.add(s.Name)
		}
	}
	r.Body = io.NopCloser(bytes.NewReader(head))
	r.ContentLength = int64(len(head))
	r.TransferEncoding = nil
	if len(head) == 0 {
		r.Body = http.NoBody
	}
	return nil
}

func tooLong(found []hostSecret) *bodyRefusal {
	return &bodyRefusal{http.StatusRequestEntityTooLarge, fmt.Sprintf("the request's body is over %d bytes and holds the placeholder of %s; Keel puts a value only in a body of at most %d bytes", MaxSubstitutedBody, names(found), MaxSubstitutedBody)}
}

// placeholdersIn returns the secrets whose placeholder b holds.
func placeholdersIn(b []byte, secrets []hostSecret) []hostSecret {
	if !bytes.Contains(b, []byte(PlaceholderPrefix)) {
		return nil
	}
	var out []hostSecret
	for _, s := range secrets {
		if bytes.Contains(b, []byte(s.placeholder)) {
			out = append(out, s)
		}
	}
	return out
}

func names(ss []hostSecret) string {
	var n []string
	for _, s := range ss {
		n = append(n, s.Name)
	}
	return strings.Join(n, ", ")
}

// textBody reports whether a body of Content-Type ct is text Keel puts
// values in: JSON, forms, multipart forms, XML, YAML, GraphQL, text/*,
// or, when ct names nothing, valid UTF-8.
func textBody(ct string, body []byte) bool {
	if strings.TrimSpace(ct) == "" {
		return utf8.Valid(body)
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	switch {
	case strings.HasPrefix(mt, "text/"),
		strings.HasSuffix(mt, "+json"), strings.HasSuffix(mt, "+xml"):
		return true
	}
	switch mt {
	case "application/json", "application/x-www-form-urlencoded", "multipart/form-data",
		"application/xml", "application/x-ndjson", "application/jsonl", "application/graphql",
		"application/yaml", "application/x-yaml", "application/javascript":
		return true
	}
	return false
}

// decompress decodes a body of Content-Encoding enc (gzip or deflate)
// to look into it, up to MaxSubstitutedBody bytes.
func decompress(b []byte, enc string) ([]byte, bool) {
	var r io.Reader
	switch enc {
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			return nil, false
		}
		r = zr
	case "deflate":
		// RFC 9110's deflate is zlib; some clients send it raw.
		if zr, err := zlib.NewReader(bytes.NewReader(b)); err == nil {
			r = zr
		} else {
			r = flate.NewReader(bytes.NewReader(b))
		}
	default:
		return nil, false
	}
	out, err := io.ReadAll(io.LimitReader(r, MaxSubstitutedBody))
	if err != nil && len(out) == 0 {
		return nil, false
	}
	return out, true
}

// watchReader passes a long body on as it streams, failing with a
// *bodyRefusal as soon as it holds a placeholder of secrets (the bytes
// that end one are never passed on).
type watchReader struct {
	r       io.Reader
	c       io.Closer
	secrets []hostSecret
	tail    []byte // the last bytes passed on, which may start a placeholder
	err     error
}

func (w *watchReader) Read(b []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	n, err := w.r.Read(b)
	if n > 0 {
		look := append(append([]byte(nil), w.tail...), b[:n]...)
		if found := placeholdersIn(look, w.secrets); len(found) > 0 {
			w.err = tooLong(found)
			return 0, w.err
		}
		keep := len(PlaceholderPrefix) + 32 - 1
		if len(look) > keep {
			look = look[len(look)-keep:]
		}
		w.tail = append(w.tail[:0], look...)
	}
	return n, err
}

func (w *watchReader) Close() error { return w.c.Close() }

// asBodyRefusal returns the *bodyRefusal err holds, if any.
func asBodyRefusal(err error) (*bodyRefusal, bool) {
	var br *bodyRefusal
	ok := errors.As(err, &br)
	return br, ok
}
