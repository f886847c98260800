package policy_test

import (
	"encoding/json"
	"testing"

	"github.com/keel-run/keel/policy"
)

// A policy sees the credential a call would use: here it asks a person
// before writes with a user's credential and before one scope, and
// allows the rest.
func TestPolicyAsksForCredentialedWrites(t *testing.T) {
	e, err := policy.Parse("cred.cedar", []byte(`
@id("all") permit (principal, action, resource);
@id("credential-writes") @ask @reason("changes data with a user's credential")
forbid (principal, action, resource)
when { context.credential && !(["GET", "HEAD"].contains(context.method)) };
@id("mail-send") @ask
forbid (principal, action, resource)
when { context.scopes.contains("mail.send") && context.provider == "mail" };
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		cred *policy.CredentialUse
		want policy.Effect
	}{
		{"no credential", nil, policy.Allow},
		{"read", &policy.CredentialUse{Provider: "crm", Method: "GET", Scopes: []string{"read"}}, policy.Allow},
		{"write", &policy.CredentialUse{Provider: "crm", Method: "post", Scopes: []string{"read"}}, policy.Ask},
		{"chosen scope", &policy.CredentialUse{Provider: "mail", Method: "GET", Scopes: []string{"mail.send"}}, policy.Ask},
	} {
		d := e.Decide(t.Context(), &policy.Call{Principal: "helper", OnBehalfOf: "ann", Tool: "http_request", Effect: "external",
			Arguments: json.RawMessage(`{"url":"https://api.example.com/x"}`), Network: []string{"api.example.com"}, Sandbox: "linux", Credential: tt.cred})
		if d.Effect != tt.want {
			t.Errorf("%s: %s (%v), want %s", tt.name, d.Effect, d.Policies, tt.want)
		}
	}
}
