package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/keel-run/keel/server/api"
)

// Evals lists the evaluations the server keeps (docs/eval.md), newest
// first, with their overall numbers (an admin token).
func (c *Client) Evals(ctx context.Context) (*api.EvalList, error) {
	var out api.EvalList
	return &out, c.do(ctx, http.MethodGet, "/v1/evals", nil, nil, &out)
}

// Eval returns evaluation id's report, with pass@k and pass^k for k (0:
// its trials per case).
func (c *Client) Eval(ctx context.Context, id string, k int) (*api.EvalReport, error) {
	q := url.Values{}
	if k > 0 {
		q.Set("k", strconv.Itoa(k))
	}
	var out api.EvalReport
	return &out, c.do(ctx, http.MethodGet, "/v1/evals/"+url.PathEscape(id), q, nil, &out)
}
