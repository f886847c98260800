package policy

import (
	"strings"

	"github.com/cedar-policy/cedar-go"
)

// credentialContext adds what a call's credential would be to a Cedar
// context: credential (bool), provider, resource_url, method (upper
// case) and scopes (a set); empty values when the call uses none.
func credentialContext(ctx cedar.RecordMap, u *CredentialUse) {
	if u == nil {
		u = &CredentialUse{}
	}
	ctx["credential"] = cedar.Boolean(u.Provider != "")
	ctx["provider"] = cedar.String(u.Provider)
	ctx["resource_url"] = cedar.String(u.Resource)
	ctx["method"] = cedar.String(strings.ToUpper(u.Method))
	ctx["scopes"] = strSet(u.Scopes)
}
