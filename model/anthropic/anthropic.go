// Package anthropic is Keel's [model.Model] for the Anthropic Messages API
// with tool use, built on github.com/anthropics/anthropic-sdk-go/v2. A call
// whose context carries a [model.Observer] streams and tells the observer
// each piece of text, tool call and retry as it comes; other calls send
// whole answers. Either way Generate returns the whole message, which is
// what the runtime journals.
//
// Mapping (Keel → wire): [model.Request.System] goes in the system field;
// assistant tool calls become tool_use blocks; tool messages become
// tool_result blocks (with is_error), and consecutive tool results, like any
// consecutive messages of one role, are grouped into one message as the API
// requires (tool results first, then any user text). max_tokens defaults to
// 8192. Arguments that are not a JSON object are sent as {} so that one
// malformed call recorded in the history cannot make every later request
// fail. Empty text blocks, which the API rejects, are left out.
//
// Prompt caching: an ephemeral cache_control breakpoint is set on the system
// prompt, on the last tool spec and on the last block of the last message,
// so the stable prefix (tools, system, the conversation so far) is read from
// the cache on the next turn of an agent loop.
//
// Usage (wire → Keel): Anthropic's input_tokens counts only the uncached part
// of the prompt, so InputTokens = input_tokens + cache_read_input_tokens +
// cache_creation_input_tokens (every prompt token, as [model.Usage] defines
// it); CachedInputTokens = cache_read_input_tokens; CacheWriteTokens =
// cache_creation_input_tokens; OutputTokens = output_tokens.
//
// Retries of 429, 529, 5xx and connection errors are the SDK's own; a
// stalled response is abandoned and repeated by [idle.Transport]. Every
// failure is an [*model.Error]. The package never reads the environment.
package anthropic

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/model/idle"
	"github.com/keel-run/keel/model/internal/httperr"
)

// ErrNoAPIKey is returned by [New] without an API key. Its text names the
// environment variable the CLI reads.
var ErrNoAPIKey = errors.New("anthropic: no API key: set ANTHROPIC_API_KEY")

// ErrNoModel is returned by [New] when [Options.Model] is empty.
var ErrNoModel = errors.New("anthropic: no model name")

// DefaultMaxTokens is the max_tokens sent when neither the request nor
// [Options.MaxTokens] sets one (the API requires a value).
const DefaultMaxTokens = 8192

const provider = "anthropic"

// Options configures [New].
type Options struct {
	// APIKey is the API key (the SDK sends it as a bearer token).
	// Required.
	APIKey string
	// BaseURL replaces https://api.anthropic.com (a proxy or gateway).
	BaseURL string
	// Model is the model name ("claude-sonnet-4-5"). Required.
	Model string
	// MaxTokens is max_tokens when the request sets none. 0 means
	// [DefaultMaxTokens].
	MaxTokens int
	// HTTPClient is the client to send with; its Transport is wrapped in a
	// [idle.Transport]. nil means a client on a clone of
	// http.DefaultTransport.
	HTTPClient *http.Client
	// MaxRetries is how many times the SDK repeats a request after 429,
	// 529, 408, 409, 5xx or a connection error, with backoff and the
	// provider's retry-after. 0 means the SDK default (2); negative means
	// no retry.
	MaxRetries int
	// IdleTimeout abandons a response that sends no byte for this long.
	// 0 means [idle.DefaultTimeout] (2 minutes); negative disables.
	// A non-streaming response sends nothing until it is complete, so
	// raise this for very long outputs.
	IdleTimeout time.Duration
	// ResponseTimeout bounds one attempt, headers and whole body, however
	// steadily bytes arrive (a keepalive trickle). 0 means
	// [idle.DefaultResponseTimeout] (10 minutes); negative disables.
	ResponseTimeout time.Duration
	// StallRetries is how many times a stalled request is repeated before
	// [model.KindStalled]. 0 means [idle.DefaultStallRetries] (2);
	// negative means none.
	StallRetries int
	// Logger receives stall warnings and SDK retry attempts (debug). nil
	// discards.
	Logger *slog.Logger
}

// Model is an Anthropic Messages model. It is safe for concurrent use.
type Model struct {
	svc       anthropic.MessageService
	name      string
	maxTokens int
	logger    *slog.Logger
	retries   int // the SDK's retries of one request
	// stallBudget is the longest the idle transport can take within one
	// SDK attempt (every stall retry timing out), 0 when unbounded.
	stallBudget time.Duration
}

var (
	_ model.Model = (*Model)(nil)
	_ model.Namer = (*Model)(nil)
)

// New returns a [Model] for opts. It returns [ErrNoModel] without a model
// name and [ErrNoAPIKey] without a key.
func New(opts *Options) (*Model, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Model == "" {
		return nil, ErrNoModel
	}
	if o.APIKey == "" {
		return nil, ErrNoAPIKey
	}
	if o.MaxTokens <= 0 {
		o.MaxTokens = DefaultMaxTokens
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	client := &http.Client{}
	if o.HTTPClient != nil {
		c := *o.HTTPClient
		client = &c
	}
	base := client.Transport
	if base == nil {
		base = http.DefaultTransport.(*http.Transport).Clone()
	}
	it := idle.NewTransport(base, &idle.Options{
		IdleTimeout: o.IdleTimeout, ResponseTimeout: o.ResponseTimeout, StallRetries: o.StallRetries, Logger: o.Logger,
	})
	client.Transport = it
	var budget time.Duration
	if it.Timeout() > 0 {
		budget = time.Duration(it.StallRetries()+1)*it.Timeout() + time.Minute
	}
	ropts := []option.RequestOption{
		// No ANTHROPIC_* environment lookups: settings come from Options.
		option.WithoutEnvironmentDefaults(),
		option.WithAPIKey(o.APIKey),
		option.WithHTTPClient(client),
	}
	if o.BaseURL != "" {
		ropts = append(ropts, option.WithBaseURL(o.BaseURL))
	}
	switch {
	case o.MaxRetries > 0:
		ropts = append(ropts, option.WithMaxRetries(o.MaxRetries))
	case o.MaxRetries < 0:
		ropts = append(ropts, option.WithMaxRetries(0))
	}
	retries := 2 // the SDK's default
	switch {
	case o.MaxRetries > 0:
		retries = o.MaxRetries
	case o.MaxRetries < 0:
		retries = 0
	}
	c := anthropic.NewClient(ropts...)
	return &Model{svc: c.Messages, name: o.Model, maxTokens: o.MaxTokens, logger: o.Logger, retries: retries, stallBudget: budget}, nil
}

// Name returns "anthropic:MODEL".
func (m *Model) Name() string { return model.Spec{Provider: provider, Name: m.name}.String() }

// Generate sends req as one Messages request and returns the assistant
// message. Errors are [*model.Error]: a request Keel cannot map is
// KindInvalidRequest before anything is sent; HTTP failures are classified
// by status (429/529 rate limited with RetryAfter, 401/403 auth, 400
// "prompt is too long" and 413 context overflow, 5xx retryable, other 4xx
// invalid request); a cancelled ctx gives KindUnknown wrapping its cause.
func (m *Model) Generate(ctx context.Context, req *model.Request) (*model.Response, error) {
	params, err := m.params(req)
	if err != nil {
		return nil, &model.Error{Kind: model.KindInvalidRequest, Provider: provider, Message: err.Error(), Err: err}
	}
	var stall error
	obs := model.ObserverOf(ctx)
	opts := []option.RequestOption{
		option.WithMiddleware(httperr.Observe(obs, m.retries, 0, httperr.StopStallRetry(&stall, m.logger, m.name))),
		// An explicit timeout per attempt also stops the SDK from refusing
		// large max_tokens without streaming; the idle watchdog is what
		// catches a dead connection, so the timeout leaves it room for
		// all its stall retries.
		option.WithRequestTimeout(max(requestTimeout(params.MaxTokens), m.stallBudget)),
	}
	if req.Temperature != nil {
		opts = append(opts, option.WithJSONSet("temperature", *req.Temperature))
	}
	var msg *anthropic.Message
	if obs != nil {
		var whole []byte
		opts[0] = option.WithMiddleware(httperr.Chain(httperr.Observe(obs, m.retries, 0, httperr.StopStallRetry(&stall, m.logger, m.name)), httperr.WholeAnswer(&whole)))
		msg, err = m.stream(ctx, params, obs, &whole, opts...)
	} else {
		msg, err = m.svc.New(ctx, params, opts...)
	}
	if err != nil {
		return nil, classify(ctx, err, stall)
	}
	if msg == nil || msg.Type != "message" && len(msg.Content) == 0 && msg.StopReason == "" {
		// HTTP 200 whose body is not a message (null, another object):
		// a provider or gateway fault the runtime cannot use.
		return nil, &model.Error{Kind: model.KindRetryable, Provider: provider, StatusCode: 200, Message: "the answer is not a Messages API message"}
	}
	return response(msg), nil
}

// stream sends params as a streaming request, tells obs each piece of
// text and each tool call as it arrives, and returns the message the
// events add up to (the SDK's own accumulation). A server that ignores
// "stream" and sends a whole message (*whole, kept by
// httperr.WholeAnswer) is taken at its word, its text told at once.
func (m *Model) stream(ctx context.Context, params anthropic.MessageNewParams, obs *model.Observer, whole *[]byte, opts ...option.RequestOption) (*anthropic.Message, error) {
	s := m.svc.NewStreaming(ctx, params, opts...)
	defer s.Close()
	var msg anthropic.Message
	events, texts := 0, 0
	for s.Next() {
		ev := s.Current()
		events++
		if err := msg.Accumulate(ev); err != nil {
			return nil, &model.Error{Kind: model.KindRetryable, Provider: provider, StatusCode: 200, Message: "the event stream does not add up to a message: " + err.Error(), Err: err}
		}
		switch ev.Type {
		case "content_block_start":
			switch ev.ContentBlock.Type {
			case "text":
				if texts > 0 {
					obs.OnText("\n\n") // as response joins text blocks
				}
				texts++
			case "tool_use":
				obs.OnCall(ev.ContentBlock.Name)
			}
		case "content_block_delta":
			if ev.Delta.Type == "text_delta" {
				obs.OnText(ev.Delta.Text)
			}
		}
	}
	if err := s.Err(); err != nil {
		return nil, err
	}
	if events == 0 && *whole != nil {
		var msg anthropic.Message
		if err := msg.UnmarshalJSON(*whole); err != nil {
			return nil, &model.Error{Kind: model.KindRetryable, Provider: provider, StatusCode: 200, Message: "the answer is neither an event stream nor a Messages API message: " + err.Error(), Err: err}
		}
		for _, b := range msg.Content {
			if b.Type == "text" {
				obs.OnText(b.Text)
			}
		}
		return &msg, nil
	}
	if events == 0 {
		return nil, nil // not a message: Generate says so
	}
	return &msg, nil
}

// requestTimeout is the SDK's own estimate for a non-streaming request (one
// hour per 128k output tokens, at least ten minutes).
func requestTimeout(maxTokens int64) time.Duration {
	d := time.Duration(float64(time.Hour) * float64(maxTokens) / 128000)
	return max(d, 10*time.Minute)
}

func classify(ctx context.Context, err, stall error) *model.Error {
	if stall != nil && ctx.Err() == nil {
		return httperr.Transport(ctx, provider, stall)
	}
	var ae *anthropic.Error
	if errors.As(err, &ae) {
		p := httperr.Problem{
			Provider: provider, Status: ae.StatusCode, Type: string(ae.Type()),
			Code: string(ae.ErrorCode()), Message: ae.Message, Err: err,
		}
		if ae.Response != nil {
			p.Header = ae.Response.Header
		}
		return httperr.Classify(p)
	}
	return httperr.Transport(ctx, provider, err)
}
