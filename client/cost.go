package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/keel-run/keel/server/api"
)

// Cost returns the server's cost report grouped by by ("agent", "user",
// "model", "label" or "run"; "" means agent) for runs created since since
// ("7d", "2026-11-01"; "" means all). It needs an admin token.
func (c *Client) Cost(ctx context.Context, by, since string) (*api.CostReport, error) {
	q := url.Values{}
	if by != "" {
		q.Set("by", by)
	}
	if since != "" {
		q.Set("since", since)
	}
	var out api.CostReport
	if err := c.do(ctx, http.MethodGet, "/v1/cost", q, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
