package cli

import (
	"context"
	"strings"

	"github.com/keel-run/keel/server/api"
)

// CreateToken checks the token's agents first, in the command line's
// words (the service refuses them too).
func (l *local) CreateToken(ctx context.Context, req *api.CreateToken) (*api.NewToken, error) {
	dir := l.directory()
	for _, ag := range req.Agents {
		got, err := dir.Get(ctx, ag)
		if err != nil {
			return nil, usagef("--agent %s: %v (create it with keel agents create)", ag, strings.TrimPrefix(err.Error(), "identity: "))
		}
		if got.Revoked {
			return nil, usagef("--agent %s: the agent is revoked", ag)
		}
	}
	return l.Session.CreateToken(ctx, req)
}
