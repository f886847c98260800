package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/tui"
	"github.com/keel-run/keel/server/api"
)

func (a *app) inputsCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "inputs", Short: "List and answer the questions MCP servers ask a person during runs",
		Long: `An MCP server may ask a person for input during a tool call (MCP
elicitation: a form, or a URL to open). Keel journals the question
(input.requested) and the call waits, durably: the run survives a
restart, and the answer (input.answered, journaled with who gave it) is
delivered to the waiting call, or, when no process executes the run any
more, to the same question when keel runs resume runs the call again.`}
	list := pendingListCmd(a, "List the questions runs wait for, oldest first", backend.Inputs, inputOf, func(pending []agent.PendingInput, asJSON bool) error {
		return tui.Inputs(a.stdout, pending, asJSON, a.keelCmd())
	})
	var sets []string
	var content, by string
	var accept, decline, cancel bool
	answer := &cobra.Command{
		Use:   "answer RUN INPUT",
		Short: "Answer a question: accept with --set NAME=VALUE or --content JSON (or --accept a URL), or --decline / --cancel",
		Long: `Answer input request INPUT of run RUN (keel inputs list shows them). A
form is accepted with its fields, --set NAME=VALUE (repeatable; values of
boolean, number and integer fields are parsed as such) or --content with
the whole JSON object; it must match the form's schema. A URL request is
accepted with --accept once you opened the URL. --decline and --cancel
refuse.

The answer is journaled (never type a secret into a form). The execution
that waits for it continues; if none does (its process stopped), resume
the run with keel runs resume RUN.`,
		Args:        cobra.ExactArgs(2),
		Annotations: annotated(firstArgIsRun, bothForms),
		RunE: func(cmd *cobra.Command, args []string) error {
			// The answer's flags first, whatever the run and the input.
			form := len(sets) > 0 || content != ""
			ans := &api.AnswerInput{Action: "accept"}
			switch {
			case !form && !accept && !decline && !cancel:
				return usagef("give the answer: --set NAME=VALUE or --content JSON for a form, --accept for a URL request you opened, or --decline or --cancel")
			case decline && cancel:
				return usagef("--decline or --cancel, not both")
			case (decline || cancel) && (form || accept):
				return usagef("--decline and --cancel take no --set, --content or --accept")
			case accept && form:
				return usagef("--accept accepts a URL request; a form's answer is its --set or --content")
			case decline || cancel:
				ans.Action = map[bool]string{true: "decline", false: "cancel"}[decline]
			}
			// A server records its token's person as who answered.
			return a.withBackendAs(cmd, by, func(ctx context.Context, b backend) error {
				if err := a.checkRuns(); err != nil {
					return err
				}
				if ans.Action == "accept" {
					pending, err := b.Inputs(ctx)
					if err != nil {
						return err
					}
					// An input the run does not wait for is refused by
					// the backend, as a --decline of it is.
					if i := slices.IndexFunc(pending, func(in api.Input) bool { return in.RunID == args[0] && in.ID == args[1] }); i >= 0 {
						in := &pending[i]
						switch {
						case in.Mode == "url" && form:
							return usagef("input %s of run %s asks you to open a URL, not to fill a form: accept it with --accept once you opened it", args[1], args[0])
						case in.Mode != "url" && accept:
							return usagef("input %s of run %s is a form: answer it with --set NAME=VALUE or --content JSON", args[1], args[0])
						}
						if ans.Content, err = answerContent(in, sets, content); err != nil {
							return err
						}
					}
				}
				if _, err := b.AnswerInput(ctx, args[0], args[1], ans); err != nil {
					return err
				}
				fmt.Fprintf(tui.Esc(a.stdout), "%s input %s of run %s\n", map[string]string{"accept": "answered", "decline": "declined", "cancel": "canceled"}[ans.Action], args[1], args[0])
				return nil
			}, "set", "content", "accept", "decline", "cancel")
		},
	}
	answer.Flags().StringArrayVar(&sets, "set", nil, "a form field: NAME=VALUE (repeatable)")
	answer.Flags().StringVar(&content, "content", "", "the whole answer as a JSON object")
	answer.Flags().BoolVar(&accept, "accept", false, "accept a URL request (once you opened its URL)")
	answer.Flags().BoolVar(&decline, "decline", false, "decline to answer")
	answer.Flags().BoolVar(&cancel, "cancel", false, "cancel the question")
	answer.Flags().StringVar(&by, "by", "", "who answers (default: $USER; on a server, the token's person)")
	cmd.AddCommand(list, answer)
	return cmd
}

// answerContent builds an accepted form's content from --set and
// --content, typed by the form's schema.
func answerContent(in *api.Input, sets []string, content string) (json.RawMessage, error) {
	if in.Mode == "url" {
		return nil, nil
	}
	obj := map[string]any{}
	if content != "" {
		if err := json.Unmarshal([]byte(content), &obj); err != nil {
			return nil, usagef("--content: want a JSON object: %v", err)
		}
	}
	var schema struct {
		Properties map[string]struct {
			Type string `json:"type"`
		} `json:"properties"`
	}
	_ = json.Unmarshal(in.Schema, &schema)
	for _, s := range sets {
		k, v, ok := strings.Cut(s, "=")
		if !ok || k == "" {
			return nil, usagef("--set %q: want NAME=VALUE", s)
		}
		switch schema.Properties[k].Type {
		case "boolean":
			b, err := strconv.ParseBool(v)
			if err != nil {
				return nil, usagef("--set %s: want true or false", k)
			}
			obj[k] = b
		case "number", "integer":
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return nil, usagef("--set %s: want a number", k)
			}
			obj[k] = n
		default:
			obj[k] = v
		}
	}
	return json.Marshal(obj)
}

// inputsBackend is what the input commands need of a journal or a team
// server.
type inputsBackend interface {
	// Inputs lists the input requests every run waits for, oldest first.
	Inputs(ctx context.Context) ([]api.Input, error)
	// AnswerInput journals an answer as the backend's person.
	AnswerInput(ctx context.Context, runID, id string, req *api.AnswerInput) (*api.Run, error)
}

// inputOf is an input request of the API's list as keel inputs list
// prints it, and its run.
func inputOf(in api.Input) (string, agent.PendingInput) {
	return in.RunID, agent.PendingInput{RunID: in.RunID, Seq: in.Seq, Time: in.Requested, Task: in.Task,
		InputRequested: agent.InputRequested{ID: in.ID, CallID: in.CallID, Tool: in.Tool, Server: in.Server, Mode: in.Mode, Message: in.Message, Schema: in.Schema, URL: in.URL}}
}
