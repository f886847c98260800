package server

import (
	"errors"
	"net/http"

	"github.com/keel-run/keel/credential"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/service"
)

func (h *Handler) listAuthWaits(w http.ResponseWriter, r *http.Request, who *caller) error {
	list, err := h.svc.AuthWaits(r.Context(), who)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.AuthWaitList{Waits: list})
	return nil
}

func (h *Handler) startConnect(w http.ResponseWriter, r *http.Request, who *caller) error {
	if err := decode(r, &struct{}{}, true); err != nil {
		return err
	}
	st, err := h.svc.BeginConnect(r.Context(), who, r.PathValue("id"), r.PathValue("call"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, st)
	return nil
}

// authCallback is the redirect URL of the authorizations the server
// starts. It needs no API token: the browser arrives from the
// authorization server, and the response's state (32 random bytes,
// single use, bound to the run and call) is what authenticates it. The
// vault checks the state, the issuer (RFC 9207) and redeems the code
// with the PKCE verifier; then every call waiting for that grant is
// resolved and its run executed, here (or by the server that holds its
// lease). The page names no secret.
func (h *Handler) authCallback(w http.ResponseWriter, r *http.Request, _ *caller) error {
	w.Header().Set("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'")
	w.Header().Set("Referrer-Policy", "no-referrer") // the URL holds the code
	who, _ := h.authenticate(r)
	p := h.newPage(r.Context(), who, "Authorization", "")
	c, runs, err := h.svc.FinishConnect(r.Context(), credential.ResponseFrom(r.URL.Query()))
	var se *service.Error
	switch {
	case errors.As(err, &se) && se.Code == api.CodeUnavailable:
		p.Flash = &flash{"bad", se.Message}
		h.render(w, http.StatusServiceUnavailable, "connected", p)
		return nil
	case err != nil && c == nil:
		status := http.StatusBadRequest
		msg := err.Error()
		if errors.Is(err, credential.ErrBadState) {
			msg = "this authorization response is unknown, was used already or expired (start again with Connect): " + err.Error()
		} else if !errors.Is(err, credential.ErrDenied) && !errors.Is(err, credential.ErrIssuerMismatch) && !errors.Is(err, credential.ErrInvalid) {
			status = http.StatusBadGateway
		}
		h.logger.Warn("authorization callback", "err", err)
		p.Flash = &flash{"bad", "The authorization did not complete: " + msg}
		h.render(w, status, "connected", p)
		return nil
	case err != nil:
		return err
	}
	p.Connected = &connected{Grant: c.Grant, Runs: runs, Run: c.RunID}
	h.render(w, http.StatusOK, "connected", p)
	return nil
}

// connected is what the callback's page shows.
type connected struct {
	Grant *credential.Grant
	// Runs are the runs that go on; Run the one the authorization was
	// started for.
	Runs []string
	Run  string
}
