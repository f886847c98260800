package service

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/credential"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/visible"
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
func (s *Service) authWaits(ctx context.Context) ([]api.AuthWait, error) {
	runs, err := s.runs(ctx, []journal.Status{journal.StatusRunning, journal.StatusPaused}, 0)
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

// beginConnect starts the authorization a run's call waits for: the
// state (bound to the run and call, single use) is stored in the vault
// and the URL to send the person to returned. Only the user the grant is
// for (the token's person) or an admin may connect a user's grant: the
// person who consents decides whose account the agent uses.
func (s *Service) beginConnect(ctx context.Context, runID, callID string, who *Caller) (*api.AuthStarted, error) {
	if s.opts.Vault == nil || s.opts.PublicURL == "" {
		return nil, unavailable("this server connects no authorizations (no vault or public URL configured): use keel auth connect --run %s", runID)
	}
	run, err := s.run(ctx, runID, 0)
	if err != nil {
		return nil, err
	}
	i := slices.IndexFunc(run.AuthWaits, func(a api.AuthWait) bool { return a.CallID == callID })
	if i < 0 {
		return nil, NoAuthWait(runID, callID)
	}
	aw := run.AuthWaits[i]
	if aw.User != "" && aw.User != who.Name && !who.admin() {
		return nil, forbidden("this authorization is %s's: only %s (or an admin) may connect it, since whoever consents gives the agent their account", aw.User, aw.User)
	}
	redirect := strings.TrimSuffix(s.opts.PublicURL, "/") + CallbackPath
	pend, err := s.opts.Vault.BeginConnect(ctx, &credential.ConnectParams{Provider: aw.Provider, Agent: aw.Agent, User: aw.User,
		Scopes: aw.Scopes, RedirectURL: redirect, RunID: runID, CallID: callID, By: who.Name})
	if err != nil {
		return nil, vaultError(err)
	}
	rerr := s.record(ctx, who, action{Action: "auth.connect", RunID: runID, CallID: callID, Target: aw.Provider})
	return &api.AuthStarted{URL: pend.URL, Expires: pend.Expires, RedirectURL: redirect, RunID: runID, CallID: callID,
		Provider: aw.Provider, Agent: aw.Agent, User: aw.User, Scopes: aw.Scopes}, rerr
}

// NoAuthWait is the refusal to connect what call callID of run runID
// waits for ("": any call of it) when it waits for no authorization, in
// every front end (report 15, Q16: keel auth connect --run said it in
// other words than the server): a conflict with the run's state (409),
// as a call that waits for no approval or an input that is not asked.
func NoAuthWait(runID, callID string) error {
	if callID == "" {
		return conflict(api.CodeConflict, "run %s waits for no authorization", runID)
	}
	return conflict(api.CodeConflict, "run %s waits for no authorization of call %s", runID, visible.String(callID))
}

// vaultError maps the vault's errors to the API's; messages of the
// vault name no secret.
func vaultError(err error) error {
	switch {
	case errors.Is(err, credential.ErrNoKey):
		return unavailable("the server has no vault key (keel auth key generate on its machine, or KEEL_VAULT_KEY_FILE, then restart keel serve): %v", err)
	case errors.Is(err, credential.ErrWrongKey):
		return unavailable("%v", err)
	case errors.Is(err, credential.ErrUnknownProvider):
		return notFound("%v", err)
	case errors.Is(err, credential.ErrInvalid), errors.Is(err, credential.ErrNotAllowed):
		return badRequest("%v", err)
	}
	return err
}

// submitAuthorized executes a run whose authorization waits ended, once
// it waits for nothing else.
func (s *Service) submitAuthorized(ctx context.Context, id string) error {
	run, err := s.run(ctx, id, 0)
	if err != nil {
		return err
	}
	if len(run.Pending) > 0 || len(run.AuthWaits) > 0 || journal.Status(run.Status).Terminal() {
		return nil
	}
	if err := s.pool.submit(id); err != nil && !errors.Is(err, errCanceling) {
		return err
	}
	return nil
}

func whoFor(agent, user string) string {
	if user == "" {
		return agent
	}
	return agent + " acting for " + user
}

// FinishConnect completes an authorization [Service.BeginConnect]
// started, from the authorization server's response (the browser's
// redirect to [CallbackPath]): the vault checks the state, the issuer
// (RFC 9207) and redeems the code with the PKCE verifier; then every call
// waiting for that grant is resolved and its run executed, here (or by
// the process that holds its lease). It returns the connection and the
// runs that go on. The response's state (32 random bytes, single use,
// bound to the run and call) is what authenticates it: no token is
// needed.
func (s *Service) FinishConnect(ctx context.Context, resp *credential.Response) (*credential.Connection, []string, error) {
	if s.opts.Vault == nil {
		return nil, nil, unavailable("this server connects no authorizations")
	}
	c, err := s.opts.Vault.FinishConnect(ctx, resp)
	if err != nil {
		return nil, nil, err
	}
	g := c.Grant
	ended, err := s.rt.ResolveAuthsFor(ctx, g.Provider, g.Agent, g.User, &agent.AuthResolved{Grant: g.ID, By: c.By})
	if err != nil {
		return c, nil, err
	}
	_ = s.record(ctx, &Caller{Token: api.Token{Name: c.By}}, action{Action: "auth.connected", RunID: c.RunID, CallID: c.CallID, Target: g.ID,
		Detail: fmt.Sprintf("%s for %s, scopes %s", g.Provider, whoFor(g.Agent, g.User), strings.Join(g.Scopes, " "))})
	var runs []string
	for _, e := range ended {
		if !slices.Contains(runs, e.RunID) {
			runs = append(runs, e.RunID)
		}
	}
	for _, id := range runs {
		if err := s.submitAuthorized(ctx, id); err != nil {
			s.logger.Warn("execute an authorized run", "run", id, "err", err)
		}
	}
	return c, runs, nil
}

// AuthWaits returns the calls that wait for an authorization, oldest
// first.
func (s *Service) AuthWaits(ctx context.Context, who *Caller) ([]api.AuthWait, error) {
	return s.authWaits(ctx)
}

// BeginConnect starts the authorization a run's call waits for (see
// [Service.beginConnect]).
func (s *Service) BeginConnect(ctx context.Context, who *Caller, runID, callID string) (*api.AuthStarted, error) {
	return s.beginConnect(ctx, runID, callID, who)
}
