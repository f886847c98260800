package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/credential"
	"github.com/keel-run/keel/identity"
	"github.com/keel-run/keel/internal/connect"
	"github.com/keel-run/keel/internal/tui"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/service"
)

// vaultClock is the vaults' clock (token expiry, refresh, leases); nil
// means time.Now. Tests of this package set it to move time forward by
// days in every process they start.
var vaultClock func() time.Time

// vaultKeyPath is the default vault key file (connect.KeyPath).
func (a *app) vaultKeyPath() string { return connect.KeyPath(a.getenv, a.home) }

// vaultKeys returns the vault keys (connect.Keys).
func (a *app) vaultKeys() ([]*credential.Key, error) { return connect.Keys(a.getenv, a.home) }

// openVault returns the vault of store (connect.OpenVault).
func (a *app) openVault(store journal.Store) (*credential.Vault, error) {
	keys, err := a.vaultKeys()
	if err != nil {
		return nil, err
	}
	return connect.OpenVault(store, keys, vaultClock)
}

func (a *app) withVault(ctx context.Context, fn func(journal.Store, *credential.Vault) error) error {
	err := a.withStore(ctx, func(s journal.Store) error {
		v, err := a.openVault(s)
		if err != nil {
			return err
		}
		return fn(s, v)
	})
	return connect.Explain(err, a.vaultKeyPath())
}

func (a *app) authCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "auth",
		Short: "OAuth providers, grants and the credential vault",
		Long: `Keel keeps OAuth grants per (agent, user, provider) in its journal database,
encrypted under the vault key ($KEEL_HOME/vault.key, KEEL_VAULT_KEY_FILE or
KEEL_VAULT_KEY). Tools such as http_request get credentials from it at
execution time; the model never sees one. A call that needs a grant nobody
gave yet waits (auth.required) until someone runs keel auth connect.`,
	}
	providers := &cobra.Command{Use: "providers", Short: "Authorization servers Keel may obtain tokens from"}
	providers.AddCommand(a.authProvidersAddCmd(), a.authProvidersListCmd())
	key := &cobra.Command{Use: "key", Short: "The vault key"}
	key.AddCommand(a.authKeyGenerateCmd(), a.authKeyRotateCmd(), a.authKeyRotateAgentCmd())
	cmd.AddCommand(providers, key, a.authConnectCmd(), a.authListCmd(), a.authRevokeCmd(), a.authWaitsCmd(), a.authTokenCmd(), a.authSecretCmd())
	return cmd
}

func (a *app) authKeyGenerateCmd() *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "generate",
		Short: "Create the vault key file ($KEEL_HOME/vault.key, mode 0600)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p := a.vaultKeyPath()
			err := connect.GenerateKey(p, force)
			if errors.Is(err, connect.ErrKeyExists) {
				return usagef("%s exists; a new key cannot open what the old one sealed (rotate with keel auth key rotate, or pass --force to discard it)", p)
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "wrote a new vault key to %s (keep a copy outside this machine: without it the grants cannot be used)\n", p)
			return nil
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "overwrite an existing key (the grants it sealed become unusable)")
	return cmd
}

func (a *app) authKeyRotateCmd() *cobra.Command {
	var newFile string
	cmd := &cobra.Command{
		Use:   "rotate --new-key-file FILE",
		Short: "Re-encrypt every secret of the vault under a new key",
		Long: `Opens every sealed secret with the current key (and KEEL_VAULT_OLD_KEY_FILE,
if set) and seals it again under the key in FILE (make one with
'keel auth key generate' and KEEL_VAULT_KEY_FILE=FILE). Afterwards, make FILE
the vault key (replace $KEEL_HOME/vault.key or point KEEL_VAULT_KEY_FILE at
it). A secret that does not open is reported and left as it was.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if newFile == "" {
				return usagef("--new-key-file is required")
			}
			nk, err := connect.ReadKeyFile(newFile)
			if err != nil {
				return err
			}
			return a.withVault(cmd.Context(), func(_ journal.Store, v *credential.Vault) error {
				n, err := v.Rekey(cmd.Context(), nk)
				if err != nil {
					return err
				}
				fmt.Fprintf(a.stdout, "re-encrypted %d secrets under key %s; now make %s the vault key\n", n, nk.ID(), newFile)
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&newFile, "new-key-file", "", "the new key")
	return cmd
}

func (a *app) authProvidersAddCmd() *cobra.Command {
	var p credential.ProviderParams
	var secretFile, by string
	var replace bool
	cmd := &cobra.Command{
		Use:   "add NAME --issuer URL --client-id ID",
		Short: "Register an OAuth 2.1 / OpenID Connect authorization server",
		Long: `Reads the server's metadata (OpenID Connect discovery, then RFC 8414) and
registers it. --resource names the resource URLs its tokens are for (RFC
8707): Keel adds a credential only to requests these cover. The client
secret, if any, is read from --client-secret-file and sealed under the vault
key; it is never printed or journaled.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p.Name, p.By, p.Replace = args[0], a.person(by), replace
			if p.Issuer == "" || p.ClientID == "" {
				return usagef("--issuer and --client-id are required")
			}
			if secretFile != "" {
				b, err := os.ReadFile(secretFile)
				if err != nil {
					return err
				}
				p.ClientSecret = strings.TrimSpace(string(b))
			}
			return a.withVault(cmd.Context(), func(_ journal.Store, v *credential.Vault) error {
				pr, err := v.AddProvider(cmd.Context(), &p)
				if err != nil {
					return err
				}
				fmt.Fprintf(a.stdout, "added provider %s (issuer %s, token endpoint %s)\n", pr.Name, pr.Issuer, pr.TokenURL)
				if len(pr.Resources) == 0 {
					fmt.Fprintln(a.stderr, "keel: note: no --resource given: its tokens are added to no request yet")
				}
				return nil
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&p.Issuer, "issuer", "", "the issuer URL (https; http only on loopback)")
	f.StringVar(&p.ClientID, "client-id", "", "Keel's OAuth client id at that server")
	f.StringVar(&secretFile, "client-secret-file", "", "file holding the client secret (none: a public client with PKCE)")
	f.StringArrayVar(&p.Scopes, "scope", nil, "default scope to ask for (repeatable)")
	f.StringArrayVar(&p.Resources, "resource", nil, "resource URL its tokens are for (repeatable)")
	f.StringVar(&by, "by", "", "who adds it (default: $USER)")
	f.BoolVar(&replace, "replace", false, "replace a provider of the same name")
	f.BoolVar(&p.Delegate, "delegate", false, "assistant agents use a token exchanged for the user's (RFC 8693), limited to each call's scopes")
	return cmd
}

func (a *app) authProvidersListCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the registered providers",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withVault(cmd.Context(), func(_ journal.Store, v *credential.Vault) error {
				ps, err := v.Providers(cmd.Context())
				if err != nil {
					return err
				}
				if asJSON {
					return json.NewEncoder(a.stdout).Encode(ps)
				}
				return tui.Providers(a.stdout, ps)
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func (a *app) authConnectCmd() *cobra.Command {
	var cp credential.ConnectParams
	var device bool
	var port int
	cmd := &cobra.Command{
		Use:   "connect PROVIDER [--agent A] [--user U] [--scope S]...",
		Short: "Authorize Keel at a provider for an agent (acting for a user)",
		Long: `Runs authorization code with PKCE: prints a URL to open in a browser, waits
on a loopback redirect (http://127.0.0.1:PORT/callback) for the answer,
checks its state and issuer, and stores the grant. With --device, runs the
device flow instead (a code to enter on another device). With --run, the
agent, user, provider and scopes are those the run's call waits for.
Afterwards every run waiting for this (agent, user, provider) is resumed
at its next execution (keel runs resume, or at once under keel serve).`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if len(args) == 1 {
				cp.Provider = args[0]
			}
			return a.withVault(ctx, func(store journal.Store, v *credential.Vault) error {
				if cp.RunID != "" {
					id, err := a.runFlag(ctx, &local{a: a, store: store}, cp.RunID)
					if err != nil {
						return err
					}
					cp.RunID = id
				}
				c, err := connect.Connect(ctx, agent.NewRuntime(store, nil), v, &cp, &connect.Flow{Device: device, Port: port, Out: a.stdout, By: a.person("")})
				if errors.Is(err, connect.ErrNoWait) {
					callID, _ := cmd.Flags().GetString("call")
					return &usageError{service.NoAuthWait(cp.RunID, callID)}
				}
				if errors.Is(err, connect.ErrNoProvider) {
					return &usageError{err}
				}
				if c != nil {
					tui.Connected(a.stdout, c)
				}
				return err
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&cp.Agent, "agent", "", "the agent the grant is for (default: "+identity.LocalAgent+")")
	f.StringVar(&cp.User, "user", "", "the user an assistant agent acts for")
	f.StringArrayVar(&cp.Scopes, "scope", nil, "scope to ask for (repeatable; default: the provider's)")
	f.StringVar(&cp.RunID, "run", "", "connect what this run waits for")
	f.StringVar(&cp.CallID, "call", "", "with --run: the call (default: the first waiting one)")
	f.BoolVar(&device, "device", false, "use the device flow (RFC 8628)")
	f.IntVar(&port, "port", 0, "loopback port of the redirect (default: any free port)")
	return cmd
}

// clientAuthConnect is keel --server URL auth connect --run R: the
// server starts the authorization (its callback completes it, stores the
// grant in the server's vault and continues the run there); this prints
// the URL to open.
func (a *app) clientAuthConnect(cmd *cobra.Command, args []string) error {
	run, _ := cmd.Flags().GetString("run")
	call, _ := cmd.Flags().GetString("call")
	if device, _ := cmd.Flags().GetBool("device"); device {
		return usagef("--device is not supported with --server: the server connects with authorization code (open the URL it gives)")
	}
	if run == "" {
		return usagef("with --server, connect what a run waits for: keel --server %s auth connect --run RUN (keel --server %s auth waits lists them)", a.serverURL(), a.serverURL())
	}
	c, err := a.apiClient()
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	if run, err = a.runFlag(ctx, &remote{Client: c, a: a}, run); err != nil {
		return err
	}
	if call == "" || len(args) == 1 {
		r, err := c.Run(ctx, run)
		if err != nil {
			return err
		}
		if call == "" && len(r.AuthWaits) == 0 {
			return &usageError{service.NoAuthWait(run, "")}
		}
		if call == "" {
			call = r.AuthWaits[0].CallID
		}
		for _, w := range r.AuthWaits {
			if len(args) == 1 && w.CallID == call && w.Provider != args[0] {
				return usagef("call %s of run %s waits for provider %s, not %s", call, run, w.Provider, args[0])
			}
		}
	}
	st, err := c.StartConnect(ctx, run, call)
	if errorCode(err) == api.CodeConflict {
		// The call waits for no authorization (service.NoAuthWait): a
		// name that names nothing here, as locally (exit 2).
		return &usageError{err}
	}
	if err != nil {
		return err
	}
	tui.AuthStarted(a.stdout, st, a.serverURL())
	return nil
}

// clientAuthWaits is keel --server URL auth waits.
func (a *app) clientAuthWaits(cmd *cobra.Command, _ []string) error {
	c, err := a.apiClient()
	if err != nil {
		return err
	}
	waits, err := c.AuthWaits(cmd.Context())
	if err != nil {
		return err
	}
	if asJSON, _ := cmd.Flags().GetBool("json"); asJSON {
		return tui.JSONLines(a.stdout, waits)
	}
	tui.ServerAuthWaits(a.stdout, waits, a.serverURL())
	return nil
}

func (a *app) authListCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the grants (never a token: ids, scopes, expiry, token hashes)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withVault(cmd.Context(), func(_ journal.Store, v *credential.Vault) error {
				gs, err := v.Grants(cmd.Context())
				if err != nil {
					return err
				}
				if asJSON {
					return tui.JSONLines(a.stdout, gs)
				}
				return tui.OAuthGrants(a.stdout, gs)
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON lines")
	return cmd
}

func (a *app) authRevokeCmd() *cobra.Command {
	var sel credential.Selector
	var by, reason string
	cmd := &cobra.Command{
		Use:   "revoke [GRANT] [--agent A] [--user U]",
		Short: "Revoke grants here and at the provider (RFC 7009)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				sel.GrantID = args[0]
			}
			if sel == (credential.Selector{}) {
				return usagef("name a grant, or --agent or --user")
			}
			return a.withVault(cmd.Context(), func(store journal.Store, v *credential.Vault) error {
				gs, err := v.Revoke(cmd.Context(), sel, &credential.RevokeParams{By: a.person(by), Reason: reason})
				if err != nil {
					return err
				}
				tui.Revoked(a.stdout, gs)
				return nil
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&sel.Agent, "agent", "", "every grant of this agent")
	f.StringVar(&sel.User, "user", "", "every grant for this user")
	f.StringVar(&by, "by", "", "who revokes (default: $USER)")
	f.StringVar(&reason, "reason", "", "why (recorded)")
	return cmd
}

func (a *app) authWaitsCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "waits",
		Short: "List the calls waiting for an authorization",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withStore(cmd.Context(), func(store journal.Store) error {
				waits, err := agent.NewRuntime(store, nil).AuthWaits(cmd.Context())
				if err != nil {
					return err
				}
				if asJSON {
					return tui.JSONLines(a.stdout, waits)
				}
				tui.AuthWaits(a.stdout, waits)
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON lines")
	return cmd
}

// withJWKS serves the agents' public keys at /.well-known/jwks.json
// beside h (keel serve), when the journal can hold a vault.
func (a *app) withJWKS(h http.Handler, store journal.Store) http.Handler {
	v, err := a.openVault(store)
	if err != nil {
		return h
	}
	return connect.WithJWKS(h, v)
}

func (a *app) authTokenCmd() *cobra.Command {
	var p credential.AgentTokenParams
	cmd := &cobra.Command{
		Use:   "token --agent A [--user U] --audience URL",
		Short: "Issue a short-lived signed agent credential (JWT)",
		Long: `Signs a JWT with the agent's Ed25519 key (made by keel agents create, sealed
under the vault key): iss (--issuer), sub (the agent, or the user it acts
for with the agent in the act claim, RFC 8693), aud, iat, nbf, exp and jti.
Resource servers verify it with the keys keel serve publishes at
/.well-known/jwks.json. The issuance is journaled (never the token). A
revoked agent gets none.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if p.Agent == "" || p.Audience == "" {
				return usagef("--agent and --audience are required")
			}
			if p.Issuer == "" {
				p.Issuer = firstNonEmpty(a.getenv("KEEL_ISSUER"), a.serverURL(), "urn:keel:local")
			}
			return a.withVault(cmd.Context(), func(_ journal.Store, v *credential.Vault) error {
				tok, c, err := v.IssueAgentToken(cmd.Context(), &p)
				if err != nil {
					return err
				}
				fmt.Fprintln(a.stdout, tok)
				fmt.Fprintf(a.stderr, "keel: agent credential %s for %s, audience %s, expires %s\n", c.ID, connect.WhoFor(p.Agent, p.User), p.Audience, c.Expiry.Time().Local().Format(time.TimeOnly))
				return nil
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&p.Agent, "agent", "", "the agent")
	f.StringVar(&p.User, "user", "", "the user an assistant agent acts for")
	f.StringVar(&p.Audience, "audience", "", "the resource the token is for")
	f.StringVar(&p.Issuer, "issuer", "", "this deployment's URL (default $KEEL_ISSUER, else --server, else urn:keel:local)")
	f.DurationVar(&p.TTL, "ttl", 5*time.Minute, "lifetime (at most 1h)")
	return cmd
}

func (a *app) authKeyRotateAgentCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "rotate-agent NAME",
		Short: "Give an agent a new signing key (the previous one stays published until the next rotation)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withVault(cmd.Context(), func(_ journal.Store, v *credential.Vault) error {
				kid, err := v.RotateAgentKey(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				fmt.Fprintf(a.stdout, "agent %s now signs with key %s\n", args[0], kid)
				return nil
			})
		},
	}
}
