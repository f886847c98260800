// Package notify tells a person when a run needs one: an approval, a
// credential to connect, an input, or a run that ended badly. Sinks are
// signed webhooks (Standard Webhooks), Slack-compatible incoming webhooks
// and email through an SMTP server.
//
// Delivery never blocks or fails a run: a [Notifier] queues each
// notification in the system stream [StreamID] (one per item and sink,
// keyed, so a restart or a second server never queues it twice) and
// delivers it from its own loop, retrying with backoff; every attempt
// and its outcome is journaled. A notification carries no secret and no
// untrusted content: only Keel's own facts (what kind of wait, the run,
// the agent, the tool's name, the schedule or trigger that started the
// run) and a link to the exact item in the web UI. Identifiers that came
// from a model (a call id) are shown only when they are plain, and
// otherwise by a digest.
package notify

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/keel-run/keel/internal/lazy"
	"github.com/keel-run/keel/journal"
)

// Kind is what the person is needed for.
type Kind string

// Kinds of notifications.
const (
	KindApproval Kind = "approval" // a call waits for approval
	KindAuth     Kind = "auth"     // a call waits for a credential
	KindInput    Kind = "input"    // an MCP server asks a question
	KindFailed   Kind = "failed"   // the run failed
	// KindScheduleFailed: a schedule's fire could not create its run
	// (its creator's token was revoked, its workspace is gone...); the
	// fires after it fail alike until a person acts. RunID is the run the
	// fire would have created (it identifies the notification; messages
	// leave it out: no such run exists), ItemID the fire's key, Origin
	// the schedule.
	KindScheduleFailed Kind = "schedule_failed"
)

// Item is something a person is needed for, as a [Source] reports it.
type Item struct {
	Kind  Kind
	RunID string
	// ItemID is the call or input waiting ("" for a failed run).
	ItemID string
	// Agent and OnBehalfOf are the run's principal.
	Agent, OnBehalfOf string
	// Tool is the tool's name (Keel's registry, not the model's text).
	Tool string
	// Reason is Keel's code for a failure ("max_steps", "setup").
	Reason string
	// Origin names what started the run ("schedule nightly", "trigger
	// deploy-failed"), "" for a person.
	Origin string
	// Since is when the wait (or the failure) began.
	Since time.Time
	// Sinks name the sinks to tell.
	Sinks []string
}

// Message is one notification as sinks send it: only Keel's own facts.
type Message struct {
	// ID is stable across retries (the webhook-id and Message-ID).
	ID   string `json:"id"`
	Kind Kind   `json:"kind"`
	// RunID is the run ("" for schedule_failed: no run was created).
	RunID      string    `json:"run_id,omitempty"`
	Item       string    `json:"item,omitempty"`
	Agent      string    `json:"agent,omitempty"`
	OnBehalfOf string    `json:"on_behalf_of,omitempty"`
	Tool       string    `json:"tool,omitempty"`
	Reason     string    `json:"reason,omitempty"`
	Origin     string    `json:"origin,omitempty"`
	Since      time.Time `json:"since"`
	// Link opens the item in the web UI.
	Link string `json:"link,omitempty"`
	// Title and Text are the message in words.
	Title string `json:"title"`
	Text  string `json:"text"`
}

// plain is what a fact must look like to be shown as it is.
var plain = lazy.Regexp(`^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,79}$`)

// safe returns s when it is plain, else a digest of it: text a model or
// a sender chose never reaches a person's inbox as it was written.
func safe(s string) string {
	if s == "" || plain().MatchString(s) {
		return s
	}
	h := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(h[:6])
}

// safeOrigin keeps "schedule NAME" / "trigger NAME" forms only.
func safeOrigin(s string) string {
	kind, name, ok := strings.Cut(s, " ")
	if !ok || (kind != "schedule" && kind != "trigger") {
		return ""
	}
	return kind + " " + safe(name)
}

// id is the notification id of item it for sink.
func id(it *Item, sink string) string {
	h := sha256.Sum256([]byte(string(it.Kind) + "\x00" + it.RunID + "\x00" + it.ItemID + "\x00" + sink))
	return "ntf_" + hex.EncodeToString(h[:12])
}

// message builds the message of item it for sink, with link.
func message(it *Item, sink, link string) *Message {
	m := &Message{ID: id(it, sink), Kind: it.Kind, RunID: safe(it.RunID), Item: safe(it.ItemID), Agent: safe(it.Agent), OnBehalfOf: safe(it.OnBehalfOf),
		Tool: safe(it.Tool), Origin: safeOrigin(it.Origin), Since: it.Since.UTC(), Link: link}
	if it.Kind == KindFailed && plain().MatchString(it.Reason) && len(it.Reason) <= 32 {
		m.Reason = it.Reason
	}
	who := m.Agent
	if who == "" {
		who = "an agent"
	}
	if m.OnBehalfOf != "" {
		who += " (for " + m.OnBehalfOf + ")"
	}
	from := ""
	if m.Origin != "" {
		from = ", started by " + m.Origin
	}
	tool := "a call"
	if m.Tool != "" {
		tool = "a call to " + m.Tool
	}
	switch it.Kind {
	case KindApproval:
		m.Title = fmt.Sprintf("Keel: %s waits for your approval", who)
		m.Text = fmt.Sprintf("Run %s of %s%s waits for approval of %s (call %s).", m.RunID, who, from, tool, m.Item)
	case KindAuth:
		m.Title = fmt.Sprintf("Keel: %s needs a credential", who)
		m.Text = fmt.Sprintf("Run %s of %s%s waits for a credential to be connected for %s (call %s).", m.RunID, who, from, tool, m.Item)
	case KindInput:
		m.Title = fmt.Sprintf("Keel: %s has a question", who)
		m.Text = fmt.Sprintf("Run %s of %s%s waits for an answer during %s (input %s).", m.RunID, who, from, tool, m.Item)
	case KindFailed:
		m.Title = fmt.Sprintf("Keel: a run of %s failed", who)
		m.Text = fmt.Sprintf("Run %s of %s%s failed", m.RunID, who, from)
		if m.Reason != "" {
			m.Text += " (" + m.Reason + ")"
		}
		m.Text += "."
	case KindScheduleFailed:
		name := strings.TrimPrefix(m.Origin, "schedule ")
		m.Title = fmt.Sprintf("Keel: schedule %s cannot start its runs", name)
		m.RunID = ""
		m.Text = fmt.Sprintf("Schedule %s of %s could not create the run of its fire %s, and its next fires will fail alike until the cause is fixed (see keel schedules show %s).", name, who, m.Item, name)
	}
	if link != "" {
		m.Text += " Open it: " + link
	}
	return m
}

// StreamID is the system stream of notifications.
const StreamID = journal.SystemPrefix + "notify"

// Event types of [StreamID].
const (
	Queued    journal.Type = "notify.queued"
	Attempted journal.Type = "notify.attempted"
	Delivered journal.Type = "notify.delivered"
	Failed    journal.Type = "notify.failed"
	GaveUp    journal.Type = "notify.gave_up"
)
