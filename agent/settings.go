package agent

import (
	"fmt"
	"time"
)

// Settings are the options that shape how a run executes beyond its
// limits: how long a command may run or stay silent, how many calls of a
// turn run at once, how much of a result the model sees, and how model
// calls are made and retried. They are fixed in run.created, so that a
// resume, an approval that continues the run, or a server that picks it
// up executes it as it was created; a resume that changes one journals
// the whole new set in run.resumed ([RunResumed].Settings). The runtime
// applies Concurrency and MaxOutputTokens itself; the caller that builds
// the tools and the model client applies the others (a command's
// timeouts, the result size, the model client's timeouts and retries),
// reading them from [State].Settings.
type Settings struct {
	// CommandTimeout is the default wall time of one shell command.
	CommandTimeout Duration `json:"command_timeout"`
	// CommandIdleTimeout ends a command that prints nothing for this
	// long; negative means never, 0 the shell tool's default.
	CommandIdleTimeout Duration `json:"command_idle_timeout"`
	// Concurrency bounds the tool calls of one turn that run at once.
	Concurrency int `json:"concurrency"`
	// MaxResultChars bounds what the model sees of one tool result.
	MaxResultChars int `json:"max_result_chars"`
	// MaxOutputTokens is the completion token limit of one model call; 0
	// means the provider's default.
	MaxOutputTokens int `json:"max_output_tokens"`
	// ModelIdleTimeout abandons a model response that sends no bytes for
	// this long (0: the provider adapter's default); ModelStallRetries is how often such a response is
	// retried before the step fails.
	ModelIdleTimeout  Duration `json:"model_idle_timeout"`
	ModelStallRetries int      `json:"model_stall_retries"`
	// ModelRetries is how often a model request is retried after a rate
	// limit, an overload, a server error or a broken connection; 0 or
	// less means never.
	ModelRetries int `json:"model_retries"`
	// NoCheckpoints turns the workspace checkpoints off: no snapshot of
	// the files is taken, so the run cannot be rewound or forked with
	// its files. The zero value (every journal written before it
	// existed) takes them.
	NoCheckpoints bool `json:"no_checkpoints,omitempty"`
}

// DefaultSettings returns the settings of a run created without any
// (journals written before settings were recorded): Keel's defaults.
func DefaultSettings() Settings {
	return Settings{
		CommandTimeout:     Duration(60 * time.Second),
		CommandIdleTimeout: Duration(2 * time.Minute),
		Concurrency:        4,
		MaxResultChars:     10000,
		ModelIdleTimeout:   Duration(120 * time.Second),
		ModelStallRetries:  2,
		ModelRetries:       4,
	}
}

// Validate reports the first setting that cannot work.
func (s *Settings) Validate() error {
	switch {
	case s.CommandTimeout <= 0:
		return fmt.Errorf("command timeout %s: want a positive duration", time.Duration(s.CommandTimeout))
	case s.Concurrency < 1:
		return fmt.Errorf("concurrency %d: want at least 1", s.Concurrency)
	case s.MaxResultChars < 1000:
		return fmt.Errorf("max result chars %d: want at least 1000", s.MaxResultChars)
	case s.MaxOutputTokens < 0:
		return fmt.Errorf("max output tokens %d: want 0 (provider default) or more", s.MaxOutputTokens)
	case s.ModelIdleTimeout < 0:
		return fmt.Errorf("model idle timeout %s: want 0 (the provider adapter's default) or more", time.Duration(s.ModelIdleTimeout))
	case s.ModelStallRetries < 0:
		return fmt.Errorf("model stall retries %d: want 0 or more", s.ModelStallRetries)
	case s.ModelRetries < 0:
		return fmt.Errorf("model retries %d: want 0 (none) or more", s.ModelRetries)
	}
	return nil
}

// Changes lists, for a person, the settings in which s differs from old,
// as "name old → new", in a fixed order.
func (s Settings) Changes(old Settings) []string {
	var out []string
	add := func(name string, a, b any) {
		if a != b {
			out = append(out, fmt.Sprintf("%s %v → %v", name, a, b))
		}
	}
	d := func(v Duration) time.Duration { return time.Duration(v) }
	add("command_timeout", d(old.CommandTimeout), d(s.CommandTimeout))
	add("command_idle_timeout", d(old.CommandIdleTimeout), d(s.CommandIdleTimeout))
	add("concurrency", old.Concurrency, s.Concurrency)
	add("max_result_chars", old.MaxResultChars, s.MaxResultChars)
	add("max_output_tokens", old.MaxOutputTokens, s.MaxOutputTokens)
	add("model_idle_timeout", d(old.ModelIdleTimeout), d(s.ModelIdleTimeout))
	add("model_stall_retries", old.ModelStallRetries, s.ModelStallRetries)
	add("model_retries", old.ModelRetries, s.ModelRetries)
	add("checkpoints", !old.NoCheckpoints, !s.NoCheckpoints)
	return out
}
