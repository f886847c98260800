package model_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/keel-run/keel/model"
)

func TestParseSpec(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in   string
		want model.Spec
		err  string
	}{
		{in: "openai:gpt-4o", want: model.Spec{Provider: "openai", Name: "gpt-4o"}},
		{in: "anthropic:claude-sonnet-4-5", want: model.Spec{Provider: "anthropic", Name: "claude-sonnet-4-5"}},
		{in: "anthropic:claude-a1@http://127.0.0.1:18604", want: model.Spec{Provider: "anthropic", Name: "claude-a1", BaseURL: "http://127.0.0.1:18604"}},
		{in: "anthropic:claude-3-5-sonnet@20240620", want: model.Spec{Provider: "anthropic", Name: "claude-3-5-sonnet@20240620"}},
		{in: "openai-compatible:qwen2.5-coder@http://127.0.0.1:11434/v1", want: model.Spec{Provider: "openai-compatible", Name: "qwen2.5-coder", BaseURL: "http://127.0.0.1:11434/v1"}},
		{in: "replay:a@b.json", want: model.Spec{Provider: "replay", Name: "a@b.json"}},
		{in: "openai:gpt-4o@http://127.0.0.1:1/v1", err: "use openai-compatible:gpt-4o@http://127.0.0.1:1/v1"},
		{in: "anthropic:x@http://", err: "not an http(s) URL"},
		{in: "openai-compatible:qwen", err: "want openai-compatible:MODEL@BASE_URL"},
		{in: "gpt-4o", err: "want PROVIDER:MODEL"},
		{in: "bedrock:x", err: `unknown provider "bedrock"`},
	} {
		got, err := model.ParseSpec(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("ParseSpec(%q) = %+v, %v; want error with %q", tt.in, got, err, tt.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseSpec(%q): %v", tt.in, err)
			continue
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("ParseSpec(%q) (-want +got):\n%s", tt.in, diff)
		}
		if back := got.String(); back != tt.in {
			t.Errorf("ParseSpec(%q).String() = %q", tt.in, back)
		}
	}
}
