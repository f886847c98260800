package cli

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/keel-run/keel/internal/mcpserver"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/service"
)

func (a *app) mcpCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "mcp", Short: "Keel as an MCP server: hand work to Keel from any MCP client"}
	cmd.AddCommand(a.mcpServeCmd(), a.mcpCallCmd())
	return cmd
}

func (a *app) mcpServeCmd() *cobra.Command {
	var wait time.Duration
	var httpAddr string
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve Keel's runs and approvals over MCP on stdin and stdout",
		Long: `Serve speaks the Model Context Protocol on standard input and output, so
that an MCP client (an IDE, a chat app, another agent, the MCP Inspector)
can hand work to Keel and keep it governed. Its tools:

  start_run        start a run (a task in a workspace, or the bundled demo)
  run_status       a run's status, steps, cost, output and pending approvals
  run_timeline     a run's timeline, event by event
  list_approvals   the tool calls waiting for a person
  answer_approval  approve or deny a waiting call; the run continues

Runs execute in this process, on the journal of --db, with the policy,
sandbox, defaults and configuration every run gets (a run pauses for its
approvals); a run keeps executing while the server runs, and one
interrupted by the server's end continues with keel runs resume (or the
next answer_approval). start_run and answer_approval return when the run
pauses or ends, or after --wait.

With --server (or KEEL_SERVER) the tools act on that team server through
its API, with your token, as keel run --server does. With --http ADDR it
speaks streamable HTTP at http://ADDR/mcp instead, on a loopback address
only. keel serve offers the same tools at /mcp behind its API tokens,
acting with the caller's token.`,
		Args:        cobra.NoArgs,
		Annotations: bothForms,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if httpAddr != "" {
				if err := checkLoopback(httpAddr); err != nil {
					return err
				}
			}
			srv, done, err := a.mcpServer(ctx, wait)
			if err != nil {
				return err
			}
			defer done()
			if httpAddr != "" {
				return a.serveMCPHTTP(ctx, srv, httpAddr)
			}
			return srv.Run(ctx, mcpserver.Stdio(cmd.InOrStdin(), a.stdout, wait+time.Minute))
		},
	}
	cmd.Flags().DurationVar(&wait, "wait", mcpserver.DefaultWait, "how long start_run and answer_approval wait for the run to pause or end before they answer")
	cmd.Flags().StringVar(&httpAddr, "http", "", "serve streamable HTTP at http://ADDR/mcp instead of stdio (a loopback address, e.g. 127.0.0.1:8421; keel serve offers /mcp to a team)")
	return cmd
}

// mcpServer returns Keel's MCP server: over the team server's API with
// --server, else over the service on the local journal, executing runs
// in this process. done pauses the runs still executing and closes the
// journal.
func (a *app) mcpServer(ctx context.Context, wait time.Duration) (*sdk.Server, func(), error) {
	dir, _ := os.Getwd() // run_id "last": the newest run here, as for a RUN argument
	if srv := a.serverURL(); srv != "" {
		cl, err := a.apiClient()
		if err != nil {
			return nil, nil, err
		}
		return mcpserver.Remote(srv, &mcpserver.RemoteOptions{Wait: wait, Client: cl, Dir: dir}), func() {}, nil
	}
	store, err := a.openStore(ctx)
	if err != nil {
		return nil, nil, err
	}
	logger := slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	rt, flush, err := a.newRuntime(ctx, store, nil, nil)
	if err != nil {
		store.Close()
		return nil, nil, err
	}
	o := &service.Options{Builder: newBuilder(a, store, logger), Logger: logger, OwnerOnly: true}
	if m := a.cfg.Model; m != "" {
		s, err := model.ParseSpec(m)
		if err != nil {
			flush()
			store.Close()
			return nil, nil, usagef("model in config.toml: %v", err)
		}
		o.DefaultModel = s.String()
	}
	svc := service.New(rt, o)
	done := func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if err := svc.Shutdown(sctx); err != nil {
			fmt.Fprintf(a.stderr, "keel mcp serve: %v\n", err)
		}
		flush()
		store.Close()
	}
	return mcpserver.Local(svc, service.Local(a.person("")), &mcpserver.LocalOptions{Wait: wait, LoadPolicy: loadPolicy, Dir: dir}), done, nil
}
