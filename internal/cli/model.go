package cli

import (
	"context"
	"fmt"
	"net"

	"github.com/spf13/cobra"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/evalrun"
	"github.com/keel-run/keel/model/replay"
)

func (a *app) modelCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "model", Short: "Model utilities: serve a recorded trajectory as an OpenAI-compatible endpoint"}
	var addr string
	serve := &cobra.Command{
		Use:   "serve-replay TRAJECTORY",
		Short: "Serve a recorded trajectory on a local OpenAI-compatible HTTP endpoint",
		Long: `serve-replay answers POST /v1/chat/completions with the recorded raw
provider responses of TRAJECTORY, the k-th request getting the k-th
response (k = assistant messages in the request), so that the real OpenAI
client path runs end to end offline:

  keel model serve-replay traj.json --addr 127.0.0.1:8421 &
  keel run --model openai-compatible:deepseek-chat@http://127.0.0.1:8421/v1 ...`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.serveReplay(cmd.Context(), args[0], addr)
		},
	}
	serve.Flags().StringVar(&addr, "addr", "127.0.0.1:8421", "address to listen on (port 0 picks a free one)")
	cmd.AddCommand(serve, &cobra.Command{
		Use:   "replay-task TRAJECTORY",
		Short: "Print the task recorded in a trajectory (to pipe into keel run --task-file -)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			tr, err := replay.Load(args[0])
			if err != nil {
				return err
			}
			fmt.Fprint(a.stdout, tr.Task())
			return nil
		},
	})
	return cmd
}

func (a *app) serveReplay(ctx context.Context, path, addr string) error {
	tr, err := replay.Load(path)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	url := "http://" + ln.Addr().String() + "/v1"
	fmt.Fprintf(a.stderr, "keel: serving %d recorded turns of %s at %s\n", tr.Len(), path, url)
	name := tr.Model()
	if name == "" {
		name = "replay"
	}
	fmt.Fprintf(a.stderr, "keel: use --model openai-compatible:%s@%s --completion-marker %s, and the recorded task (keel model replay-task %s)\n", name, url, DefaultCompletionMarker, path)
	fmt.Fprintln(a.stdout, url)
	return replay.Serve(ctx, ln, tr)
}

func (a *app) runsCompareCmd() *cobra.Command {
	var verbose bool
	cmd := &cobra.Command{
		Use:         "compare RUN TRAJECTORY",
		Annotations: firstArgIsRun,
		Short:       "Compare a replayed run's tool results with the recorded ones",
		Long: `compare matches each tool call of RUN with the recorded result of the same
call id in TRAJECTORY and reports how many gave the same exit code and the
same output. The whole output is compared: the artifact when the model saw
only part of it.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.compare(cmd.Context(), args[0], args[1], verbose)
		},
	}
	cmd.Flags().BoolVarP(&verbose, "verbose", "v", false, "show every differing call")
	return cmd
}

func (a *app) compare(ctx context.Context, runID, path string, verbose bool) error {
	tr, err := replay.Load(path)
	if err != nil {
		return err
	}
	store, err := a.openStore(ctx)
	if err != nil {
		return err
	}
	defer store.Close()
	st, _, err := agent.NewRuntime(store, nil).Load(ctx, runID)
	if err != nil {
		return err
	}
	c := evalrun.Compare(st, tr)
	c.Report(a.stdout, verbose)
	if c.Total == 0 {
		fmt.Fprintf(a.stderr, "keel: no tool call of run %s has a recorded result in %s: is it a replay of this trajectory?\n", runID, path)
		return &exitError{1}
	}
	return nil
}
