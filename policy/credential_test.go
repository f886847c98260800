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

// The default policy asks a person before any write with a credential
// from the vault (a method other than GET or HEAD), and lets reads and
// requests without a credential through.
func TestDefaultPolicyAsksForCredentialedWrites(t *testing.T) {
	for _, tt := range []struct {
		name   string
		method string
		cred   *policy.CredentialUse
		want   policy.Effect
	}{
		{"POST without a credential", "POST", nil, policy.Allow},
		{"GET with one", "GET", &policy.CredentialUse{Provider: "crm", Method: "GET", Scopes: []string{"read"}}, policy.Allow},
		{"HEAD with one", "HEAD", &policy.CredentialUse{Provider: "crm", Method: "head"}, policy.Allow},
		{"POST with one", "POST", &policy.CredentialUse{Provider: "crm", Method: "POST"}, policy.Ask},
		{"DELETE with one", "DELETE", &policy.CredentialUse{Provider: "crm", Method: "delete"}, policy.Ask},
		{"PATCH with one", "PATCH", &policy.CredentialUse{Provider: "crm", Method: "PATCH"}, policy.Ask},
	} {
		args, _ := json.Marshal(map[string]string{"method": tt.method, "url": "https://api.example.com/x"})
		d := policy.Default().Decide(t.Context(), &policy.Call{Principal: "helper", OnBehalfOf: "ann", Tool: "http_request", Effect: "external",
			Arguments: args, Network: []string{"api.example.com"}, Sandbox: "linux", Credential: tt.cred})
		if d.Effect != tt.want {
			t.Errorf("%s: %s (%v), want %s", tt.name, d.Effect, d.Policies, tt.want)
		}
	}
}
