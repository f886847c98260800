// Package credential is Keel's OAuth vault: the authorization servers
// (providers) Keel may obtain tokens from, the grants users and agents gave
// it, and the one call every tool that reaches an external system makes,
// [Vault.Credential]: "a credential for this agent, acting for this user,
// to call this resource, or the reason a person must authorize first".
//
// # Storage
//
// Providers and grants are records of the journal database's side table
// ([journal.Records]), never events. Their public part (ids, names,
// scopes, expiry, token hashes) is plain JSON; their secrets (access and
// refresh tokens, client secrets, PKCE verifiers) are sealed with
// AES-256-GCM under the vault key ([Key]), bound to the record they
// belong to. A vault key that is missing or wrong is a clear error
// ([ErrNoKey], [ErrWrongKey]) and decrypts nothing; [Vault.Rekey]
// re-encrypts every secret under a new key.
//
// Every change and every use is an event of the hash-chained system
// stream [StreamID] (credential.provider_added, credential.granted,
// credential.refreshed, credential.used, credential.revoked, ...), which
// carries grant ids, scopes, issuers and token hashes ([TokenHash]), never
// a token.
//
// # Just-in-time authorization
//
// A grant that does not exist, lacks a requested scope, was revoked, or
// whose refresh token the server no longer accepts is not an error of the
// call: [Vault.Credential] returns a [*tool.AuthRequiredError] naming what a
// person must authorize, and the runtime turns it into a durable
// auth.required wait. [Vault.BeginConnect] and [Vault.CompleteConnect]
// run authorization code with PKCE (RFC 7636), with state bound to the
// run and call that waits and the response's iss checked (RFC 9207);
// [Vault.ConnectDevice] runs the device flow (RFC 8628).
//
// # Refresh
//
// An access token is refreshed before it expires ([Options.RefreshBefore]).
// Refresh of one grant is single-flight across every process sharing the
// database: the refresher takes a lease written into the grant's record
// by compare-and-swap, other callers wait for the new token, so a rotated
// refresh token (OAuth 2.1) is used exactly once.
package credential
