//go:build linux

package linux

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"

	"github.com/keel-run/keel/redact"
	"github.com/keel-run/keel/sandbox/egress"
)

// upstreamFailure says what went wrong with the answer of a host secrets
// are for, in words of the proxy's own: never the host's bytes. Go's
// HTTP client quotes the line it could not parse (a status line, a
// header, a Content-Length), and a host that echoes the value into such
// a line would otherwise get it into the sandbox through the proxy's
// error. The details go to the egress record, the values hidden (see
// [hideSecrets]).
func upstreamFailure(err error) string {
	var er *errResponse
	var ne net.Error
	var op *net.OpError
	var cv *tls.CertificateVerificationError
	var rh tls.RecordHeaderError
	var al tls.AlertError
	switch {
	case errors.As(err, &er):
		return er.Error() // the proxy's own words
	case errors.Is(err, egress.ErrNonPublic), errors.Is(err, egress.ErrNotAllowed):
		return err.Error() // the proxy's own words
	case errors.As(err, &cv):
		return "the host's TLS certificate does not verify"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "the host did not answer in time"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "the host closed the connection before its answer was complete"
	case errors.As(err, &op):
		if op.Err == nil {
			return op.Op + " failed"
		}
		return op.Op + " failed: " + op.Err.Error()
	case errors.As(err, &rh), errors.As(err, &al):
		return "TLS: " + err.Error()
	}
	return "the host's answer is not HTTP/1.1 the proxy can read (not quoted: it may hold a secret's value)"
}

// hideSecrets is text (an error about a host's answer, for the egress
// record) with the values of secrets hidden in every form
// [redact.Secrets.Hide] knows.
func hideSecrets(text string, secrets []hostSecret) string {
	values := make([]string, 0, len(secrets))
	for _, s := range secrets {
		values = append(values, s.Value)
	}
	return redact.NewSecrets(values...).Hide(text)
}
