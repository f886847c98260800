package cli

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/keel-run/keel/internal/tui"
	"github.com/keel-run/keel/server/api"
)

// triggersBackend is what the trigger commands need of a journal or a
// team server: the service's trigger operations (service/triggers.go).
type triggersBackend interface {
	CreateTrigger(ctx context.Context, req *api.CreateTrigger) (*api.NewTrigger, error)
	Triggers(ctx context.Context) ([]api.Trigger, error)
	Trigger(ctx context.Context, ref string) (*api.Trigger, error)
	Deliveries(ctx context.Context, ref string, last int) ([]api.Delivery, error)
	PauseTrigger(ctx context.Context, ref, reason string) (*api.Trigger, error)
	ResumeTrigger(ctx context.Context, ref string) (*api.Trigger, error)
	DeleteTrigger(ctx context.Context, ref string) error
}

func (a *app) triggersCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "triggers",
		Short: "Start runs when something happens: signed webhooks, other runs' ends",
		Long: `A webhook trigger has a URL (POST /v1/triggers/ID on keel serve) and a
signing secret: each request must carry the Standard Webhooks headers
(webhook-id, webhook-timestamp, webhook-signature). A message delivered
again (a sender's retry) starts no second run; a bad signature, an old
timestamp or a replayed id is refused; every delivery is journaled. The
payload reaches the run as untrusted input, never as its task.

A run trigger (--on-agent A --on completed,failed,output) starts a run
when a run of agent A ends. See docs/schedules.md.`,
	}
	cmd.AddCommand(a.triggersCreateCmd(), a.triggersListCmd(), a.triggersShowCmd(),
		a.changeCmd("pause", "Pause a trigger (deliveries are refused, and journaled)", true, func(ctx context.Context, b backend, name, reason string) (string, error) {
			t, err := b.PauseTrigger(ctx, name, reason)
			if err != nil {
				return "", err
			}
			return "paused trigger " + t.Name, nil
		}),
		a.changeCmd("resume", "Resume a paused trigger", false, func(ctx context.Context, b backend, name, _ string) (string, error) {
			t, err := b.ResumeTrigger(ctx, name)
			if err != nil {
				return "", err
			}
			return "resumed trigger " + t.Name, nil
		}),
		a.changeCmd("delete", "Delete a trigger (its URL answers 404; its records stay)", false, func(ctx context.Context, b backend, name, _ string) (string, error) {
			return "deleted trigger " + name, b.DeleteTrigger(ctx, name)
		}))
	return cmd
}

func (a *app) triggersCreateCmd() *cobra.Command {
	var rf unattendedRunFlags
	var p api.CreateTrigger
	var onAgent string
	var on []string
	cmd := &cobra.Command{
		Use:   "create NAME --task TEMPLATE [flags]",
		Short: "Create a webhook trigger (prints its signing secret once) or a run trigger",
		Long: `Create a webhook trigger: its URL and its signing secret (whsec_..., shown
only this once; give both to the sender) are printed. The secret is kept
sealed in the vault (it needs a vault key: keel auth key generate). With
--on-agent and --on, create a run trigger instead.

The task is a Go template over {{.Trigger}}, {{.MessageID}} and
{{.Received}}; the payload is never in it.

  keel triggers create deploy-failed --task 'find why the deploy failed' --notify oncall`,
		Args:        cobra.ExactArgs(1),
		Annotations: bothForms,
		RunE: func(cmd *cobra.Command, args []string) error {
			run, err := rf.request(cmd.Flags())
			if err != nil {
				return err
			}
			req := p
			req.Name, req.Run, req.Notify = args[0], run, rf.notify
			if (onAgent == "") != (len(on) == 0) {
				return usagef("a run trigger needs --on-agent and --on (completed, failed, output)")
			}
			if onAgent != "" {
				req.On = &api.RunEvents{Agent: onAgent, Events: on}
			}
			return a.withBackend(cmd, func(ctx context.Context, b backend) error {
				t, err := b.CreateTrigger(ctx, &req)
				if err != nil {
					return err
				}
				w := tui.Esc(a.stdout)
				fmt.Fprintf(w, "created trigger %s (%s)\n", t.Name, t.ID)
				if t.Secret != "" {
					url := t.URL
					if !strings.Contains(url, "://") {
						url = "SERVER" + url
					}
					fmt.Fprintf(a.stderr, "keel: the signing secret is shown only this once; senders post to %s with the Standard Webhooks headers\n", url)
					fmt.Fprintln(w, t.Secret)
				}
				return nil
			}, append([]string{"tolerance", "dedupe", "on-agent", "on"}, unattendedRunFlagNames...)...)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&p.Tolerance, "tolerance", "", "how far a message's timestamp may be from the clock (default 5m)")
	fs.StringVar(&p.Dedupe, "dedupe", "", "how long message ids are remembered (default 168h)")
	fs.StringVar(&onAgent, "on-agent", "", "a run trigger: the agent whose runs' ends start one")
	fs.StringSliceVar(&on, "on", nil, "a run trigger's events: completed, failed, output")
	rf.bind(fs, "{{.Trigger}}, {{.MessageID}}, {{.Received}}")
	return cmd
}

func (a *app) triggersListCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:         "list",
		Short:       "List triggers and their deliveries by outcome",
		Args:        cobra.NoArgs,
		Annotations: bothForms,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withBackend(cmd, func(ctx context.Context, b backend) error {
				list, err := b.Triggers(ctx)
				if err != nil {
					return err
				}
				return tui.Triggers(a.stdout, list, asJSON)
			}, "json")
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "JSON lines")
	return cmd
}

func (a *app) triggersShowCmd() *cobra.Command {
	var last int
	cmd := &cobra.Command{
		Use:         "show NAME",
		Short:       "Show a trigger and its deliveries (digests, never payloads)",
		Args:        cobra.ExactArgs(1),
		Annotations: bothForms,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withBackend(cmd, func(ctx context.Context, b backend) error {
				t, err := b.Trigger(ctx, args[0])
				if err != nil {
					return err
				}
				ds, err := b.Deliveries(ctx, t.ID, last)
				if err != nil {
					return err
				}
				return tui.Trigger(a.stdout, t, ds)
			}, "last")
		},
	}
	cmd.Flags().IntVar(&last, "last", 20, "the newest N deliveries (0: all)")
	return cmd
}
