package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/credential"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/server/token"
)

// CallbackPath is the server's redirect URL for authorizations, below
// [Options.PublicURL]: register PublicURL + CallbackPath with the
// authorization server as a redirect URI of Keel's client.
const CallbackPath = "/v1/auth/callback"

// Connector is the credential vault as the server uses it to authorize
// the calls that wait in auth.required (a *credential.Vault).
type Connector interface {
	BeginConnect(ctx context.Context, cp *credential.ConnectParams) (*credential.Pending, error)
	FinishConnect(ctx context.Context, r *credential.Response) (*credential.Connection, error)
}

// authWaits returns the calls of every run that has not ended that wait
// for an authorization, oldest first.
func (h *Handler) authWaits(ctx context.Context) ([]api.AuthWait, error) {
	runs, err := h.runs(ctx, []journal.Status{journal.StatusRunning, journal.StatusPaused}, 0)
	if err != nil {
		return nil, err
	}
	out := []api.AuthWait{}
	for _, r := range runs {
		out = append(out, r.AuthWaits...)
	}
	slices.SortStableFunc(out, func(a, b api.AuthWait) int { return a.Requested.Compare(b.Requested) })
	return out, nil
}

func (h *Handler) listAuthWaits(w http.ResponseWriter, r *http.Request, _ *caller) error {
	list, err := h.authWaits(r.Context())
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
	st, err := h.beginConnect(r.Context(), r.PathValue("id"), r.PathValue("call"), who)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, st)
	return nil
}

// beginConnect starts the authorization a run's call waits for: the
// state (bound to the run and call, single use) is stored in the vault
// and the URL to send the person to returned. Only the user the grant is
// for (the token's person) or an admin may connect a user's grant: the
// person who consents decides whose account the agent uses.
func (h *Handler) beginConnect(ctx context.Context, runID, callID string, who *caller) (*api.AuthStarted, error) {
	if h.opts.Vault == nil || h.opts.PublicURL == "" {
		return nil, &apiError{http.StatusServiceUnavailable, api.CodeUnavailable, "this server connects no authorizations (no vault or public URL configured): use keel auth connect --run " + runID}
	}
	run, err := h.run(ctx, runID, 0)
	if err != nil {
		return nil, err
	}
	i := slices.IndexFunc(run.AuthWaits, func(a api.AuthWait) bool { return a.CallID == callID })
	if i < 0 {
		return nil, conflict(api.CodeConflict, "call %s of run %s waits for no authorization", callID, runID)
	}
	aw := run.AuthWaits[i]
	if aw.User != "" && aw.User != who.Name && !token.HasScope(who, api.ScopeAdmin) {
		return nil, &apiError{http.StatusForbidden, api.CodeForbidden, fmt.Sprintf("this authorization is %s's: only %s (or an admin) may connect it, since whoever consents gives the agent their account", aw.User, aw.User)}
	}
	redirect := strings.TrimSuffix(h.opts.PublicURL, "/") + CallbackPath
	pend, err := h.opts.Vault.BeginConnect(ctx, &credential.ConnectParams{Provider: aw.Provider, Agent: aw.Agent, User: aw.User,
		Scopes: aw.Scopes, RedirectURL: redirect, RunID: runID, CallID: callID, By: who.Name})
	if err != nil {
		return nil, vaultError(err)
	}
	rerr := h.record(ctx, who, action{Action: "auth.connect", RunID: runID, CallID: callID, Target: aw.Provider})
	return &api.AuthStarted{URL: pend.URL, Expires: pend.Expires, RedirectURL: redirect, RunID: runID, CallID: callID,
		Provider: aw.Provider, Agent: aw.Agent, User: aw.User, Scopes: aw.Scopes}, rerr
}

// vaultError maps the vault's errors to the API's; messages of the
// vault name no secret.
func vaultError(err error) error {
	switch {
	case errors.Is(err, credential.ErrNoKey):
		return &apiError{http.StatusServiceUnavailable, api.CodeUnavailable, "the server has no vault key (keel auth key generate, or KEEL_VAULT_KEY_FILE): " + err.Error()}
	case errors.Is(err, credential.ErrWrongKey):
		return &apiError{http.StatusServiceUnavailable, api.CodeUnavailable, err.Error()}
	case errors.Is(err, credential.ErrUnknownProvider):
		return notFound("%v", err)
	case errors.Is(err, credential.ErrInvalid), errors.Is(err, credential.ErrNotAllowed):
		return badRequest("%v", err)
	}
	return err
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
	if h.opts.Vault == nil {
		p.Flash = &flash{"bad", "this server connects no authorizations"}
		h.render(w, http.StatusServiceUnavailable, "connected", p)
		return nil
	}
	ctx := r.Context()
	c, err := h.opts.Vault.FinishConnect(ctx, credential.ResponseFrom(r.URL.Query()))
	if err != nil {
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
	}
	g := c.Grant
	by := c.By
	ended, err := h.rt.ResolveAuthsFor(ctx, g.Provider, g.Agent, g.User, &agent.AuthResolved{Grant: g.ID, By: by})
	if err != nil {
		return err
	}
	_ = h.record(ctx, &caller{Name: by}, action{Action: "auth.connected", RunID: c.RunID, CallID: c.CallID, Target: g.ID,
		Detail: fmt.Sprintf("%s for %s, scopes %s", g.Provider, whoFor(g.Agent, g.User), strings.Join(g.Scopes, " "))})
	var runs []string
	for _, e := range ended {
		if !slices.Contains(runs, e.RunID) {
			runs = append(runs, e.RunID)
		}
	}
	for _, id := range runs {
		if err := h.submitAuthorized(ctx, id); err != nil {
			h.logger.Warn("execute an authorized run", "run", id, "err", err)
		}
	}
	p.Connected = &connected{Grant: g, Runs: runs, Run: c.RunID}
	h.render(w, http.StatusOK, "connected", p)
	return nil
}

// submitAuthorized executes a run whose authorization waits ended, once
// it waits for nothing else.
func (h *Handler) submitAuthorized(ctx context.Context, id string) error {
	run, err := h.run(ctx, id, 0)
	if err != nil {
		return err
	}
	if len(run.Pending) > 0 || len(run.AuthWaits) > 0 || journal.Status(run.Status).Terminal() {
		return nil
	}
	if err := h.pool.submit(id); err != nil && !errors.Is(err, errCanceling) {
		return err
	}
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

func whoFor(agent, user string) string {
	if user == "" {
		return agent
	}
	return agent + " acting for " + user
}
