// Package openai is Keel's [model.Model] for the OpenAI Chat Completions API
// with function calling, and for every OpenAI-compatible endpoint (Ollama,
// vLLM, llama.cpp, DeepSeek, Qwen, OpenRouter...) through [Options.BaseURL].
//
// It is built on github.com/openai/openai-go/v3. A call whose context
// carries a [model.Observer] streams (stream_options.include_usage on) and
// tells the observer each piece of text, tool call and retry as it comes;
// other calls send whole answers. Either way Generate returns the whole
// response, which is what the runtime journals. Retries of 429, 408/409, 5xx and connection errors are the SDK's
// own (with backoff and the provider's Retry-After); a response that stalls
// is abandoned and repeated by [idle.Transport]. Every failure is an
// [*model.Error].
//
// Mapping (Keel → wire): [model.Request.System] becomes the first system
// message; assistant messages carry tool_calls with their ids and raw
// argument strings; tool messages carry tool_call_id. OpenAI has no
// is_error flag, so an error tool result is sent as its text. Arguments that
// are not valid JSON are sent as "{}" so that one malformed call recorded in
// the history cannot make every later request fail (the runtime has already
// answered that call with an error result). Usage (wire → Keel):
// prompt_tokens → InputTokens, completion_tokens → OutputTokens,
// prompt_tokens_details.cached_tokens → CachedInputTokens, or DeepSeek's
// prompt_cache_hit_tokens when cached_tokens is absent.
//
// The package never reads the environment: the API key and base URL come
// from [Options] (internal/cli reads OPENAI_API_KEY).
package openai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/model/idle"
	"github.com/keel-run/keel/model/internal/httperr"
)

// ErrNoAPIKey is returned by [New] when the api.openai.com endpoint is used
// without a key. Its text names the environment variable the CLI reads.
var ErrNoAPIKey = errors.New("openai: no API key: set OPENAI_API_KEY")

// ErrNoModel is returned by [New] when [Options.Model] is empty.
var ErrNoModel = errors.New("openai: no model name")

// provider is the [model.Error.Provider] of this package's errors.
const provider = "openai"

// Options configures [New].
type Options struct {
	// APIKey is sent as a bearer token. Required for api.openai.com (an
	// empty key gives [ErrNoAPIKey]); optional with BaseURL, since local
	// servers such as Ollama need none.
	APIKey string
	// BaseURL selects an OpenAI-compatible endpoint, for example
	// "http://127.0.0.1:11434/v1" or "https://api.deepseek.com". Empty
	// means https://api.openai.com/v1.
	BaseURL string
	// Model is the model name sent with each request ("gpt-4o",
	// "deepseek-chat"). Required.
	Model string
	// HTTPClient is the client to send with; its Transport is wrapped in a
	// [idle.Transport]. nil means a client on a clone of
	// http.DefaultTransport.
	HTTPClient *http.Client
	// MaxRetries is how many times the SDK repeats a request after 429,
	// 408, 409, 5xx or a connection error, with exponential backoff and
	// the provider's Retry-After. 0 means the SDK default (2); negative
	// means no retry.
	MaxRetries int
	// IdleTimeout abandons a response that sends no byte for this long.
	// 0 means [idle.DefaultTimeout] (2 minutes); negative disables.
	// A long non-streaming generation sends nothing until it is done, so
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
	// RetryBackoff is the wait before the n-th (from 0) repeat of a
	// request whose HTTP 200 answer was unusable (no choices, an error
	// object, a body that is not JSON), which the SDK does not retry;
	// such answers are repeated as often as MaxRetries says. nil means
	// 0.5 s doubling, at most 8 s (the SDK's own backoff).
	RetryBackoff func(n int) time.Duration
}

// Model is an OpenAI or OpenAI-compatible chat model. It is safe for
// concurrent use.
type Model struct {
	svc        openai.ChatCompletionService
	name       string
	baseURL    string
	compatible bool
	logger     *slog.Logger
	retries    int
	backoff    func(int) time.Duration
}

var (
	_ model.Model = (*Model)(nil)
	_ model.Namer = (*Model)(nil)
)

// New returns a [Model] for opts. It returns [ErrNoModel] without a model
// name and [ErrNoAPIKey] when the official endpoint has no key.
func New(opts *Options) (*Model, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Model == "" {
		return nil, ErrNoModel
	}
	if o.APIKey == "" && o.BaseURL == "" {
		return nil, ErrNoAPIKey
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
	client.Transport = idle.NewTransport(base, &idle.Options{
		IdleTimeout: o.IdleTimeout, ResponseTimeout: o.ResponseTimeout, StallRetries: o.StallRetries, Logger: o.Logger,
	})
	// NewChatCompletionService, unlike openai.NewClient, reads no
	// environment variables: the library takes its settings from Options.
	ropts := []option.RequestOption{
		option.WithEnvironmentProduction(),
		option.WithHTTPClient(client),
	}
	if o.BaseURL != "" {
		ropts = append(ropts, option.WithBaseURL(o.BaseURL))
	}
	if o.APIKey != "" {
		ropts = append(ropts, option.WithAPIKey(o.APIKey))
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
	if o.RetryBackoff == nil {
		o.RetryBackoff = func(n int) time.Duration { return min(500*time.Millisecond<<n, 8*time.Second) }
	}
	return &Model{
		retries:    retries,
		backoff:    o.RetryBackoff,
		svc:        openai.NewChatCompletionService(ropts...),
		name:       o.Model,
		baseURL:    o.BaseURL,
		compatible: o.BaseURL != "",
		logger:     o.Logger,
	}, nil
}

// Name returns the model in spec syntax: "openai:MODEL", or
// "openai-compatible:MODEL@BASE_URL" when a base URL was given.
func (m *Model) Name() string {
	if m.compatible {
		return model.Spec{Provider: "openai-compatible", Name: m.name, BaseURL: m.baseURL}.String()
	}
	return model.Spec{Provider: provider, Name: m.name}.String()
}

// Generate sends req as one Chat Completions request and returns the
// assistant message. Errors are [*model.Error]: a request Keel cannot map is
// KindInvalidRequest before anything is sent; HTTP failures are classified
// by status and code (429 rate limited with RetryAfter from retry-after-ms
// or retry-after; 401/403 auth; code context_length_exceeded, a "maximum
// context length" message or 413 context overflow; 408/409/5xx and
// connection errors retryable, after the SDK's own retries; other 4xx
// invalid request); a stall is KindStalled; a cancelled ctx gives
// KindUnknown wrapping its cause.
func (m *Model) Generate(ctx context.Context, req *model.Request) (*model.Response, error) {
	params, err := m.params(req)
	if err != nil {
		return nil, &model.Error{Kind: model.KindInvalidRequest, Provider: provider, Message: err.Error(), Err: err}
	}
	obs := model.ObserverOf(ctx)
	for attempt := 0; ; attempt++ {
		var stall error
		mw := httperr.Observe(obs, m.retries, sdkMaxRetryAfter, httperr.StopStallRetry(&stall, m.logger, m.name))
		var cc *openai.ChatCompletion
		var err error
		if obs != nil {
			var whole []byte
			cc, err = m.stream(ctx, params, obs, &whole, option.WithMiddleware(httperr.Chain(mw, httperr.WholeAnswer(&whole))))
		} else {
			cc, err = m.svc.New(ctx, params, option.WithMiddleware(mw))
		}
		var resp *model.Response
		var merr *model.Error
		switch {
		case err != nil && unusableBody(err) && stall == nil && ctx.Err() == nil:
			merr = &model.Error{Kind: model.KindRetryable, Provider: provider, StatusCode: 200, Message: "the answer is not a JSON chat completion: " + err.Error(), Err: err}
		case err != nil:
			return nil, classify(ctx, err, stall)
		default:
			var rerr error
			if resp, rerr = response(cc); rerr == nil {
				return resp, nil
			}
			if !errors.As(rerr, &merr) || merr.StatusCode != 200 {
				return nil, rerr
			}
		}
		// HTTP 200 with nothing usable: the SDK does not repeat it.
		if attempt >= m.retries {
			merr.Message += fmt.Sprintf(" (after %d attempts)", attempt+1)
			return nil, merr
		}
		m.logger.Debug("model answer unusable, retrying", "model", m.name, "attempt", attempt+1, "error", merr.Message)
		obs.OnRetry(model.Retry{Attempt: attempt + 2, Wait: m.backoff(attempt), Reason: "unusable answer"})
		t := time.NewTimer(m.backoff(attempt))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, classify(ctx, ctx.Err(), nil)
		case <-t.C:
		}
	}
}

// sdkMaxRetryAfter is the longest Retry-After the SDK waits out; above
// it the SDK gives up at once (openai-go's internal limit).
const sdkMaxRetryAfter = 2 * time.Minute

// stream sends params as a streaming request (with usage in the last
// chunk), tells obs each piece of text and each tool call as it arrives,
// and returns the accumulated chat completion. A server that ignores
// "stream" and sends a whole chat completion (*whole, kept by
// httperr.WholeAnswer) is taken at its word, its text told at once; a
// body that is neither is unusable.
func (m *Model) stream(ctx context.Context, params openai.ChatCompletionNewParams, obs *model.Observer, whole *[]byte, opts ...option.RequestOption) (*openai.ChatCompletion, error) {
	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	s := m.svc.NewStreaming(ctx, params, opts...)
	defer s.Close()
	var acc openai.ChatCompletionAccumulator
	var usage *openai.CompletionUsage
	chunks := 0
	for s.Next() {
		ch := s.Current()
		chunks++
		acc.AddChunk(ch)
		if ch.JSON.Usage.Valid() {
			// The last chunk's usage, as sent: DeepSeek's cache field is
			// an extra field the accumulator does not keep.
			u := ch.Usage
			usage = &u
		}
		for _, c := range ch.Choices {
			if c.Index != 0 {
				continue
			}
			obs.OnText(c.Delta.Content)
			for _, tc := range c.Delta.ToolCalls {
				if tc.Function.Name != "" {
					obs.OnCall(tc.Function.Name)
				}
			}
		}
	}
	if err := s.Err(); err != nil {
		return nil, err
	}
	if chunks == 0 && *whole != nil {
		var cc openai.ChatCompletion
		if err := cc.UnmarshalJSON(*whole); err != nil {
			return nil, err
		}
		if len(cc.Choices) > 0 {
			obs.OnText(cc.Choices[0].Message.Content)
		}
		return &cc, nil
	}
	if chunks == 0 {
		return nil, errNoChunks
	}
	cc := acc.ChatCompletion
	if usage != nil {
		cc.Usage = *usage
	}
	return &cc, nil
}

// errNoChunks is a streamed answer that held no chat completion chunk
// (an HTML page, an empty body): retried like an unusable answer.
var errNoChunks = errors.New("the answer holds no chat completion chunk")

// unusableBody reports whether err is the SDK failing to decode a whole
// answer body (HTTP 200 with an HTML page, typically a proxy's). A body
// cut short by the connection is a connection error, which the SDK
// itself retries.
func unusableBody(err error) bool {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	return errors.Is(err, errNoChunks) || (errors.As(err, &se) || errors.As(err, &te)) && !errors.Is(err, io.ErrUnexpectedEOF)
}

// classify maps an SDK error to an [*model.Error].
func classify(ctx context.Context, err, stall error) *model.Error {
	if stall != nil && ctx.Err() == nil {
		return httperr.Transport(ctx, provider, stall)
	}
	var ae *openai.Error
	if errors.As(err, &ae) {
		p := httperr.Problem{Provider: provider, Status: ae.StatusCode, Type: ae.Type, Code: ae.Code, Message: ae.Message, Err: err}
		if ae.Response != nil {
			p.Header = ae.Response.Header
		}
		return httperr.Classify(p)
	}
	return httperr.Transport(ctx, provider, err)
}
