package server_test

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/client"
	"github.com/keel-run/keel/journal/mem"
	"github.com/keel-run/keel/server"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/server/token"
	"github.com/keel-run/keel/service"
)

// A server over a service on a journal, a token for a person, and the
// Go client. With no service.Options.Builder this server only reads;
// `keel serve` supplies one from the CLI's assembler.
func ExampleNewHandler() {
	ctx := context.Background()
	svc := service.New(agent.NewRuntime(mem.New(), nil), nil)
	defer svc.Shutdown(ctx)
	h := server.NewHandler(svc, nil)
	tok, err := svc.Tokens().Create(ctx, &token.Params{Name: "ada", Scopes: []string{api.ScopeRunsRead}, By: "example"})
	if err != nil {
		panic(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()

	c, _ := client.New(srv.URL, &client.Options{Token: tok.Secret})
	who, _ := c.Whoami(ctx)
	fmt.Println(who.Name, who.Scopes)
	runs, _ := c.Runs(ctx, nil)
	fmt.Println(len(runs), "runs")
	_, err = c.CreateRun(ctx, &api.CreateRun{Task: "fix the tests"})
	var apiErr *api.Error
	if errors.As(err, &apiErr) {
		fmt.Println(apiErr.Status, apiErr.Code)
	}
	// Output:
	// ada [runs:read]
	// 0 runs
	// 403 forbidden
}
