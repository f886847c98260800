package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/keel-run/keel/server/api"
)

// MemoryParams selects what [Client.Memory] lists.
type MemoryParams = api.MemoryParams

// Memory lists the memory entries the token sees, oldest first. p may
// be nil.
func (c *Client) Memory(ctx context.Context, p *MemoryParams) ([]api.MemoryEntry, error) {
	q := url.Values{}
	if p != nil {
		q["scope"] = p.Scopes
		if p.All {
			q.Set("all", "true")
		}
	}
	var out api.MemoryList
	return out.Entries, c.do(ctx, http.MethodGet, "/v1/memory", q, nil, &out)
}

// MemoryEntry returns every version of a memory entry, oldest first.
func (c *Client) MemoryEntry(ctx context.Context, id string) (*api.MemoryHistory, error) {
	var out api.MemoryHistory
	return &out, c.do(ctx, http.MethodGet, "/v1/memory/"+url.PathEscape(id), nil, nil, &out)
}

// EditMemory writes text as a new entry that supersedes entry id.
func (c *Client) EditMemory(ctx context.Context, id, text string) (*api.MemoryEntry, error) {
	var out api.MemoryEntry
	return &out, c.do(ctx, http.MethodPost, "/v1/memory/"+url.PathEscape(id)+"/edit", nil, &api.EditMemory{Text: text}, &out)
}

// ForgetMemory forgets entry id: no later run is offered it.
func (c *Client) ForgetMemory(ctx context.Context, id, reason string) error {
	return c.do(ctx, http.MethodPost, "/v1/memory/"+url.PathEscape(id)+"/forget", nil, &api.ForgetMemory{Reason: reason}, nil)
}
