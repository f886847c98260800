package trigger

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"text/template"
	"time"

	"github.com/oklog/ulid/v2"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/schedule"
)

// Secrets keeps the signing secrets of triggers (Keel's wiring: the
// credential vault, sealed under the vault key). Names are the
// [Trigger.Secret] values.
type Secrets interface {
	PutSealed(ctx context.Context, name, value string) error
	Sealed(ctx context.Context, name string) (string, error)
}

// Options configures a [Hub]. The zero value is valid.
type Options struct {
	// Clock is the hub's time (timestamps are checked against it); nil
	// means time.Now.
	Clock journal.Clock
	// Logger receives diagnostics; nil discards them.
	Logger *slog.Logger
	// NewID returns a new trigger id; nil means a ULID.
	NewID func() string
	// Admit, if set, checks a trigger before it is created.
	Admit func(ctx context.Context, t *Trigger) error
	// DispatchTimeout is how long after its acceptance a delivery whose
	// run was not created is given before it is recorded as failed; 0
	// means 10 minutes.
	DispatchTimeout time.Duration
	// RefusalsPerMinute bounds the refused deliveries journaled per
	// trigger and minute (requests nobody authenticated must not fill
	// the journal); the rest are counted in the next one journaled. 0
	// means 60.
	RefusalsPerMinute int
}

// Hub keeps the triggers of one journal and receives their deliveries.
// Several Hubs (in several processes) may share a journal. A Hub is safe
// for concurrent use.
type Hub struct {
	store   journal.Store
	runner  schedule.Runner
	secrets Secrets
	opts    Options
	clock   journal.Clock
	logger  *slog.Logger
	dir     *journal.Directory

	mu    sync.Mutex
	trigs map[string]*trig
	// watched are the run ends Watch has handled (RUN@SEQ).
	watched map[string]bool
}

// trig is one trigger's stream and state. Lock order: the stream's lock,
// then mu.
type trig struct {
	s  *journal.Stream
	mu sync.Mutex

	def    *Trigger
	paused bool
	// pauses are the journaled paused spans, oldest first (to is zero
	// while paused): a run that ends in one fires nothing.
	pauses   []span
	deleted  bool
	accepted map[string]*Delivery // message id → accepted delivery
	order    []*Delivery          // accepted, oldest first (for expiry)
	counts   map[string]int       // outcome or refusal reason → count
	// confirmed are message ids whose run this process saw exist.
	confirmed map[string]bool
	// refusal rate limit (this process).
	window  time.Time
	refused int
	dropped int
}

// Errors callers branch on.
var (
	ErrNotFound = errors.New("trigger: no such trigger")
	ErrInvalid  = errors.New("trigger: invalid trigger")
	// ErrState is wrapped by the refusal of a change the trigger has
	// made already: a pause of a paused trigger, a resume of one that is
	// not paused.
	ErrState = errors.New("trigger: already in that state")
	// ErrRefused wraps the error of a refused delivery; [RefusedError]
	// says why.
	ErrRefused = errors.New("trigger: delivery refused")
	// ErrUnavailable means the run could not be created for now: the
	// sender should retry (HTTP 503).
	ErrUnavailable = errors.New("trigger: the run cannot be created now")
)

// RefusedError is a refused delivery.
type RefusedError struct {
	Reason string
}

func (e *RefusedError) Error() string { return "trigger: delivery refused: " + e.Reason }

// Unwrap makes a RefusedError an [ErrRefused].
func (e *RefusedError) Unwrap() error { return ErrRefused }

type changed struct {
	By  string `json:"by,omitempty"`
	Why string `json:"reason,omitempty"`
}

type runFailed struct {
	MessageID string `json:"message_id"`
	Reason    string `json:"reason"`
}

// New returns the hub of store's triggers. It reads nothing until used.
func New(store journal.Store, runner schedule.Runner, secrets Secrets, opts *Options) *Hub {
	h := &Hub{store: store, runner: runner, secrets: secrets, trigs: map[string]*trig{}, watched: map[string]bool{}}
	if opts != nil {
		h.opts = *opts
	}
	h.clock = h.opts.Clock
	if h.clock == nil {
		h.clock = time.Now
	}
	h.logger = h.opts.Logger
	if h.logger == nil {
		h.logger = slog.New(slog.DiscardHandler)
	}
	if h.opts.DispatchTimeout <= 0 {
		h.opts.DispatchTimeout = 10 * time.Minute
	}
	if h.opts.RefusalsPerMinute <= 0 {
		h.opts.RefusalsPerMinute = 60
	}
	h.dir = journal.NewDirectory(store, DirectoryID, h.clock, Created, Deleted)
	return h
}

// apply folds one event of a trigger's stream.
func (t *trig) apply(e *journal.Event) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch e.Type {
	case Created:
		d := new(Trigger)
		if err := json.Unmarshal(e.Payload, d); err != nil {
			return err
		}
		t.def = d
	case Paused:
		if !t.paused {
			t.pauses = append(t.pauses, span{from: e.Time})
		}
		t.paused = true
	case Resumed:
		if t.paused && len(t.pauses) > 0 {
			t.pauses[len(t.pauses)-1].to = e.Time
		}
		t.paused = false
	case Deleted:
		t.deleted = true
	case Received:
		d := new(Delivery)
		if err := json.Unmarshal(e.Payload, d); err != nil {
			return err
		}
		key := string(d.Outcome)
		if d.Outcome == Refused {
			key = d.Reason
		}
		t.counts[key]++
		if d.Outcome == Accepted {
			if t.accepted[d.MessageID] != nil {
				return fmt.Errorf("message %q accepted twice", d.MessageID)
			}
			t.accepted[d.MessageID] = d
			t.order = append(t.order, d)
			// Forget ids past the dedupe horizon (a run trigger's keys
			// at least as long as Watch looks back, or a restart would
			// fire them again).
			horizon := t.dedupe()
			if t.def != nil && t.def.On != nil {
				horizon = max(horizon, Horizon)
			}
			for len(t.order) > 0 && e.Time.Sub(t.order[0].Received) > horizon {
				delete(t.accepted, t.order[0].MessageID)
				t.order = t.order[1:]
			}
		}
	case RunFailed:
		var p runFailed
		if err := json.Unmarshal(e.Payload, &p); err != nil {
			return err
		}
		// The accepted delivery becomes failed: one delivery, one
		// outcome, counted once.
		if d := t.accepted[p.MessageID]; d != nil {
			d.RunError = p.Reason
			if d.Outcome == Accepted {
				d.Outcome = Failed
				if t.counts[string(Accepted)]--; t.counts[string(Accepted)] <= 0 {
					delete(t.counts, string(Accepted))
				}
				t.counts[string(Failed)]++
			}
		}
	default:
		return fmt.Errorf("unknown event type %s", e.Type)
	}
	return nil
}

func (t *trig) dedupe() time.Duration {
	if t.def != nil && t.def.Dedupe > 0 {
		return t.def.Dedupe.D()
	}
	return DefaultDedupe
}

func (t *trig) tolerance() time.Duration {
	if t.def != nil && t.def.Tolerance > 0 {
		return t.def.Tolerance.D()
	}
	return DefaultTolerance
}

// get returns the trigger id or name ref, synced.
func (h *Hub) get(ctx context.Context, ref string) (*trig, error) {
	h.mu.Lock()
	_, known := h.trigs[ref]
	h.mu.Unlock()
	if !known {
		if err := h.dir.Sync(ctx); err != nil {
			return nil, err
		}
	}
	id, listed := h.dir.Resolve(ref)
	h.mu.Lock()
	if _, ok := h.trigs[id]; !ok && !listed {
		h.mu.Unlock()
		return nil, fmt.Errorf("%w: %s", ErrNotFound, ref)
	}
	t := h.trigs[id]
	if t == nil {
		t = &trig{accepted: map[string]*Delivery{}, counts: map[string]int{}, confirmed: map[string]bool{}}
		t.s = journal.NewStream(h.store, StreamPrefix+id, h.clock, t.apply)
		h.trigs[id] = t
	}
	h.mu.Unlock()
	if err := t.s.Sync(ctx); err != nil {
		return nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.def == nil {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, ref)
	}
	return t, nil
}

// Create journals a new trigger and makes its signing secret, which it
// returns this once ("whsec_" and base64, as Standard Webhooks senders
// take it).
func (h *Hub) Create(ctx context.Context, def *Trigger) (*Trigger, string, error) {
	d := *def
	d.Created = h.clock().UTC()
	if h.opts.NewID != nil {
		d.ID = h.opts.NewID()
	} else {
		d.ID = newID()
	}
	if err := Check(&d); err != nil {
		return nil, "", err
	}
	if h.opts.Admit != nil {
		if err := h.opts.Admit(ctx, &d); err != nil {
			return nil, "", err
		}
	}
	if err := h.dir.Taken(ctx, d.Name); err != nil {
		return nil, "", nameErr(err, d.Name)
	}
	var secret string
	if d.On == nil { // a webhook trigger: its signing secret
		raw := make([]byte, 24)
		rand.Read(raw)
		secret = "whsec_" + base64.StdEncoding.EncodeToString(raw)
		d.Secret = "trigger." + d.ID
		sum := sha256.Sum256([]byte(secret))
		d.SecretHash = "sha256:" + hex.EncodeToString(sum[:8])
		if err := h.secrets.PutSealed(ctx, d.Secret, secret); err != nil {
			return nil, "", fmt.Errorf("trigger: store the secret: %w", err)
		}
	}
	st := journal.NewStream(h.store, StreamPrefix+d.ID, h.clock, func(*journal.Event) error { return nil })
	if _, err := st.Append(ctx, Created, &d, nil); err != nil {
		return nil, "", err
	}
	if err := h.dir.Add(ctx, d.ID, d.Name, d.CreatedBy); err != nil {
		return nil, "", nameErr(err, d.Name)
	}
	return &d, secret, nil
}

// nameErr turns a taken name into ErrInvalid.
func nameErr(err error, name string) error {
	if errors.Is(err, journal.ErrNameTaken) {
		return fmt.Errorf("%w: a trigger named %q exists", ErrInvalid, name)
	}
	return err
}

// Check validates a trigger's definition.
func Check(d *Trigger) error {
	if d.Name == "" || len(d.Name) > 100 || strings.IndexFunc(d.Name, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.')
	}) >= 0 {
		return fmt.Errorf("%w: a trigger needs a name of 1 to 100 letters, digits, '-', '_' and '.'", ErrInvalid)
	}
	if strings.TrimSpace(d.Task) == "" {
		return fmt.Errorf("%w: a trigger needs a task", ErrInvalid)
	}
	if d.Tolerance < 0 || d.Dedupe < 0 {
		return fmt.Errorf("%w: tolerance and dedupe cannot be negative", ErrInvalid)
	}
	if _, err := render(d, "msg_example", d.Created); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if d.On != nil {
		return checkOn(d)
	}
	return nil
}

func render(d *Trigger, msg string, at time.Time) (string, error) {
	t, err := template.New("task").Option("missingkey=error").Parse(d.Task)
	if err != nil {
		return "", fmt.Errorf("task template: %v", err)
	}
	var b bytes.Buffer
	if err := t.Execute(&b, &TaskData{Trigger: d.Name, MessageID: msg, Received: schedule.NewTaskTime(at)}); err != nil {
		return "", fmt.Errorf("task template: %v", err)
	}
	return b.String(), nil
}

// Deliver receives one request to trigger ref: its headers and body as
// received, and the sender's address. It returns the delivery's record
// (journaled) and, for a refused one, an error wrapping [ErrRefused]
// ([*RefusedError] says why). An accepted message and its duplicates
// return the run's id once the run exists; [ErrUnavailable] asks the
// sender to retry.
func (h *Hub) Deliver(ctx context.Context, ref string, header http.Header, body []byte, remote string) (*Delivery, error) {
	t, err := h.get(ctx, ref)
	if err != nil {
		return nil, err
	}
	now := h.clock().UTC()
	sum := sha256.Sum256(body)
	d := &Delivery{MessageID: header.Get(standardwebhooks.HeaderWebhookID), Received: now, Digest: hex.EncodeToString(sum[:]), Size: len(body), Remote: remote}
	if len(d.MessageID) > 200 {
		d.MessageID = d.MessageID[:200]
	}
	t.mu.Lock()
	def, paused, deleted := t.def, t.paused, t.deleted
	t.mu.Unlock()
	if deleted || def.On != nil { // a run trigger has no URL
		return nil, fmt.Errorf("%w: %s", ErrNotFound, ref)
	}
	ts, tsErr := strconv.ParseInt(header.Get(standardwebhooks.HeaderWebhookTimestamp), 10, 64)
	if tsErr == nil {
		d.Timestamp = time.Unix(ts, 0).UTC()
	}
	switch {
	case len(body) > MaxBody:
		return h.refuse(ctx, t, d, ReasonTooLarge)
	case d.MessageID == "" || tsErr != nil || header.Get(standardwebhooks.HeaderWebhookSignature) == "":
		return h.refuse(ctx, t, d, ReasonHeaders)
	}
	secret, err := h.secrets.Sealed(ctx, def.Secret)
	if err != nil {
		return nil, fmt.Errorf("trigger %s: its secret: %w", def.Name, err)
	}
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		return nil, fmt.Errorf("trigger %s: its secret: %w", def.Name, err)
	}
	// The signature first: nothing a stranger sends gets further. The
	// timestamp is checked against this hub's clock, not the library's.
	if err := wh.VerifyIgnoringTimestamp(body, header); err != nil {
		return h.refuse(ctx, t, d, ReasonSignature)
	}
	switch tol := t.tolerance(); {
	case now.Sub(d.Timestamp) > tol:
		return h.refuse(ctx, t, d, ReasonTooOld)
	case d.Timestamp.Sub(now) > tol:
		return h.refuse(ctx, t, d, ReasonTooNew)
	case paused:
		return h.refuse(ctx, t, d, ReasonPaused)
	}
	d.RunID = schedule.RunID(def.ID, "message:"+d.MessageID, def.Created)
	var prior *Delivery
	d.Outcome = Accepted // the payload is encoded before the check runs
	_, err = t.s.Append(ctx, Received, d, func() error {
		t.mu.Lock()
		defer t.mu.Unlock()
		if t.deleted {
			return ErrNotFound
		}
		if a := t.accepted[d.MessageID]; a != nil {
			prior = a
			return errDuplicate
		}
		return nil
	})
	if errors.Is(err, errDuplicate) {
		if prior.Digest != d.Digest {
			return h.refuse(ctx, t, d, ReasonReplayed)
		}
		d.Outcome, d.RunID = Duplicate, prior.RunID
		if _, err := t.s.Append(ctx, Received, d, nil); err != nil {
			return nil, err
		}
	} else if err != nil {
		return nil, err
	}
	if err := h.start(ctx, t, d, header.Get("Content-Type"), body); err != nil {
		return d, err
	}
	return d, nil
}

var errDuplicate = errors.New("trigger: duplicate")

// start creates the run of an accepted message (or of a duplicate whose
// run does not exist yet: the sender retried after a crash).
func (h *Hub) start(ctx context.Context, t *trig, d *Delivery, contentType string, body []byte) error {
	t.mu.Lock()
	def, confirmed := t.def, t.confirmed[d.MessageID]
	t.mu.Unlock()
	if confirmed {
		return nil
	}
	if d.Outcome == Duplicate {
		if _, err := h.runner.Status(ctx, d.RunID); err == nil {
			h.confirm(t, d.MessageID)
			return nil
		}
	}
	task, err := render(def, d.MessageID, d.Received)
	if err == nil {
		err = h.runner.Start(ctx, &schedule.StartParams{
			RunID: d.RunID, Agent: def.Agent, OnBehalfOf: def.OnBehalfOf, Task: task, Run: def.Run, Notify: def.Notify, Owner: def.Owner,
			Labels: map[string]string{LabelTrigger: def.Name, LabelMessage: d.MessageID},
			Input:  &schedule.Input{Source: fmt.Sprintf("webhook trigger %s, message %s", def.Name, d.MessageID), ContentType: contentType, Data: body},
		})
	} else {
		err = fmt.Errorf("%w: %v", schedule.ErrPermanent, err)
	}
	switch {
	case err == nil || errors.Is(err, schedule.ErrRunExists):
		h.confirm(t, d.MessageID)
		return nil
	case errors.Is(err, schedule.ErrPermanent):
		reason := strings.TrimPrefix(err.Error(), schedule.ErrPermanent.Error()+": ")
		if _, aerr := t.s.Append(ctx, RunFailed, &runFailed{MessageID: d.MessageID, Reason: reason}, nil); aerr != nil {
			h.logger.Warn("trigger: record run failure", "err", aerr)
		}
		d.RunError = reason
		if d.Outcome == Accepted {
			d.Outcome = Failed
		}
		return fmt.Errorf("trigger %s: %w", def.Name, err)
	}
	h.logger.Warn("trigger: start run", "trigger", def.Name, "run_id", d.RunID, "err", err)
	return fmt.Errorf("%w: %v", ErrUnavailable, err)
}

func (h *Hub) confirm(t *trig, msg string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.confirmed[msg] = true
}

// refuse journals a refused delivery (within the rate limit) and returns
// its error.
func (h *Hub) refuse(ctx context.Context, t *trig, d *Delivery, reason string) (*Delivery, error) {
	d.Outcome, d.Reason = Refused, reason
	t.mu.Lock()
	if m := d.Received.Truncate(time.Minute); !m.Equal(t.window) {
		t.window, t.refused = m, 0
	}
	t.refused++
	limited := t.refused > h.opts.RefusalsPerMinute
	if limited {
		t.dropped++
	}
	t.mu.Unlock()
	if !limited {
		if _, err := t.s.Append(ctx, Received, d, nil); err != nil {
			return nil, err
		}
	}
	return d, &RefusedError{Reason: reason}
}

// Horizon is how far back [Hub.Tick] looks for ended runs for run
// triggers.
const Horizon = 24 * time.Hour

// Tick fires the run triggers for runs that ended ([Hub.Watch]), and
// records as failed the accepted deliveries whose run was not created
// within [Options.DispatchTimeout] (the process died between accepting a
// message and creating its run, and the sender did not retry). Servers
// call it periodically.
func (h *Hub) Tick(ctx context.Context) error {
	if err := h.Watch(ctx, h.clock().Add(-Horizon)); err != nil {
		return err
	}
	ids, err := h.dir.IDs(ctx)
	if err != nil {
		return err
	}
	now := h.clock()
	var errs []error
	for _, id := range ids {
		t, err := h.get(ctx, id)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		t.mu.Lock()
		var check []*Delivery
		for _, d := range t.order {
			if !t.confirmed[d.MessageID] && d.RunError == "" && now.Sub(d.Received) > h.opts.DispatchTimeout && now.Sub(d.Received) < 2*h.opts.DispatchTimeout+time.Hour {
				check = append(check, d)
			}
		}
		t.mu.Unlock()
		for _, d := range check {
			_, err := h.runner.Status(ctx, d.RunID)
			if err == nil {
				h.confirm(t, d.MessageID)
				continue
			}
			if !errors.Is(err, journal.ErrNotFound) {
				errs = append(errs, err)
				continue
			}
			_, err = t.s.Append(ctx, RunFailed, &runFailed{MessageID: d.MessageID, Reason: "the run was not created and the sender did not retry the message"}, func() error {
				t.mu.Lock()
				defer t.mu.Unlock()
				if d.RunError != "" {
					return errDuplicate
				}
				return nil
			})
			if err != nil && !errors.Is(err, errDuplicate) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

func newID() string { return strings.ToLower(ulid.Make().String()) }
