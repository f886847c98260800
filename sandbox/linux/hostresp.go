//go:build linux

package linux

import (
	"bufio"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"slices"
	"strings"
)

// The response of a host a secret is for reaches the sandbox stripped of
// the value by every way HTTP/1.1 carries it, on the plain-HTTP path and
// the intercepted HTTPS path alike:
//   - the request asks for no Content-Encoding, no transfer coding and no
//     trailers (Accept-Encoding and TE are removed), and for the whole
//     resource (Range and If-Range are removed): a value cut into pieces
//     by the sandbox's own ranges is not a value the proxy can find;
//   - a body the host encodes anyway (gzip, deflate, several) is decoded
//     before the values are replaced; a coding the proxy cannot read, a
//     piece of a resource (206) and a protocol switch (101) are refused;
//   - the values are replaced in header values and trailer values, and a
//     header or trailer whose name holds a value (in any case: names are
//     case-insensitive) is dropped; 1xx answers reach the sandbox without
//     their headers; the status line carries the standard reason.

// prepareSecretRequest removes from a request to a host a secret is for
// the headers that would let the response carry the value in a form the
// proxy does not strip.
func prepareSecretRequest(h http.Header) {
	for _, k := range []string{"Accept-Encoding", "Te", "Range", "If-Range"} {
		h.Del(k)
	}
}

// errResponse is a response of a host a secret is for that the proxy
// refuses to pass on: the host got the request, the sandbox gets a 502
// with why.
type errResponse struct{ why string }

func (e *errResponse) Error() string { return "response refused: " + e.why }

// maxCodings bounds the Content-Encoding layers the proxy decodes.
const maxCodings = 4

// strip makes resp fit for the sandbox: the values replaced in its
// headers and streamed out of its body (decoded first), its trailers
// stripped once the body is read. A response it cannot make so is an
// *errResponse, its body closed.
func (sub *substitution) strip(resp *http.Response) error {
	refuse := func(format string, a ...any) error {
		if resp.Body != nil {
			resp.Body.Close()
		}
		return &errResponse{fmt.Sprintf(format, a...)}
	}
	switch resp.StatusCode {
	case http.StatusSwitchingProtocols:
		return refuse("the host switches protocols (101, a WebSocket or other upgrade), which the proxy cannot strip a secret's value from")
	case http.StatusPartialContent:
		return refuse("the host answered with a piece of a resource (206), which the proxy cannot strip a secret's value from")
	}
	resp.Status = "" // the standard reason, not the host's
	sub.scrubHeader(resp.Header)
	sub.scrubHeader(resp.Trailer)
	if resp.Body == nil || resp.Body == http.NoBody {
		return nil
	}
	codings := contentCodings(resp.Header)
	if len(codings) > maxCodings {
		return refuse("the response has %d content codings, more than the proxy decodes", len(codings))
	}
	ts := &trailerStrip{r: resp.Body, resp: resp, sub: sub}
	var body io.Reader = ts
	for _, c := range slices.Backward(codings) {
		d, err := decoder(c, body)
		if err != nil {
			return refuse("its Content-Encoding %s: %v", codingName(c), err)
		}
		body = d
	}
	if len(codings) > 0 {
		resp.Header.Del("Content-Encoding")
		resp.Uncompressed = true
	}
	resp.Body = &replaceReader{r: readCloser{body, ts}, pairs: sub.back}
	resp.ContentLength = -1
	resp.Header.Del("Content-Length")
	return nil
}

// contentCodings are the codings of a Content-Encoding header in the
// order the host applied them, identity left out.
func contentCodings(h http.Header) []string {
	var out []string
	for _, v := range h.Values("Content-Encoding") {
		for c := range strings.SplitSeq(v, ",") {
			if c = strings.ToLower(strings.TrimSpace(c)); c != "" && c != "identity" {
				out = append(out, c)
			}
		}
	}
	return out
}

// codingName names a content coding in the proxy's errors: a registered
// one as it is, another not at all (the host wrote it, and a host may
// echo a secret's value there).
func codingName(c string) string {
	switch c {
	case "gzip", "x-gzip", "deflate", "br", "zstd", "compress", "x-compress", "dcb", "dcz", "aes128gcm", "exi", "pack200-gzip":
		return c
	}
	return "(a coding not registered, not quoted)"
}

// decoder undoes one content coding; it refuses a coding it cannot read.
func decoder(coding string, r io.Reader) (io.Reader, error) {
	switch coding {
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(r)
		if err != nil {
			return nil, err
		}
		return zr, nil
	case "deflate":
		// RFC 9110's deflate is zlib; some hosts send raw DEFLATE.
		br := bufio.NewReader(r)
		if h, err := br.Peek(2); err == nil && h[0]&0x0f == 8 && (uint16(h[0])<<8|uint16(h[1]))%31 == 0 {
			zr, err := zlib.NewReader(br)
			if err != nil {
				return nil, err
			}
			return zr, nil
		}
		return flate.NewReader(br), nil
	}
	return nil, errors.New("not a coding the proxy can read to strip a secret's value (gzip, deflate)")
}

// scrubHeader replaces the values in h's values and drops a field whose
// name holds one.
func (sub *substitution) scrubHeader(h http.Header) {
	for k, vs := range h {
		if sub.inName(k) {
			delete(h, k)
			continue
		}
		for i, v := range vs {
			vs[i] = sub.replace(v)
		}
	}
}

// inName reports whether a field name holds a value, in any case.
func (sub *substitution) inName(name string) bool {
	name = strings.ToLower(name)
	for _, p := range sub.back {
		if strings.Contains(name, strings.ToLower(p[0])) {
			return true
		}
	}
	return false
}

// trailerStrip reads a response's body and strips its trailers as soon
// as they are read: at the end of the body, and again at Close (which
// reads what was left, and after which a reverse proxy copies them).
type trailerStrip struct {
	r    io.ReadCloser
	resp *http.Response
	sub  *substitution
}

func (t *trailerStrip) Read(b []byte) (int, error) {
	n, err := t.r.Read(b)
	if err != nil {
		t.sub.scrubHeader(t.resp.Trailer)
	}
	return n, err
}

func (t *trailerStrip) Close() error {
	err := t.r.Close()
	t.sub.scrubHeader(t.resp.Trailer)
	return err
}

type readCloser struct {
	io.Reader
	io.Closer
}

// no1xxHeaders is a transport whose 1xx answers (103 Early Hints, 100
// Continue) lose their headers before a reverse proxy passes them on:
// httputil.ReverseProxy forwards them without ModifyResponse.
type no1xxHeaders struct{ rt http.RoundTripper }

func (t no1xxHeaders) RoundTrip(r *http.Request) (*http.Response, error) {
	// A trace added here runs before the reverse proxy's own.
	ctx := httptrace.WithClientTrace(r.Context(), &httptrace.ClientTrace{
		Got1xxResponse: func(_ int, h textproto.MIMEHeader) error {
			clear(h)
			return nil
		},
	})
	return t.rt.RoundTrip(r.WithContext(ctx))
}
