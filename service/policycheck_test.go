package service_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal/mem"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/service"
)

// keel policy check decides a file tool's call as a run's gate does
// (report R2): arguments the tool registry refuses are refused in its
// words (exit 2, 400), a path the run's workspace refuses is denied with
// policy id keel.workspace and the workspace's reason, and only then does
// the policy decide. It said ALLOW to all of them.
func TestPolicyCheckDecidesFileToolsAsTheGate(t *testing.T) {
	ws := t.TempDir()
	if err := os.Symlink("/etc", filepath.Join(ws, "etc")); err != nil {
		t.Fatal(err)
	}
	denyPaths, err := policy.Parse("deny.toml", []byte(`version = 1
cedar = '@id("everything") permit(principal, action, resource);'
[paths]
deny = ["secrets"]
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name      string
		req       api.PolicyCheck
		engine    *policy.Engine
		refused   string        // the refusal's words; "" decided
		effect    policy.Effect // the decision's
		policies  string        // its policy ids, comma-separated
		reason    string        // in its reason
		wantPaths []string      // the paths the policy decided (its parts' texts)
	}{
		{name: "absolute path outside", req: api.PolicyCheck{Tool: "read_file", Arguments: json.RawMessage(`{"path":"/etc/passwd"}`)},
			effect: policy.Deny, policies: agent.PolicyWorkspace, reason: "/etc/passwd: path is outside the workspace (the workspace is /workspace)"},
		{name: "escape through ..", req: api.PolicyCheck{Tool: "read_file", Arguments: json.RawMessage(`{"path":"/workspace/../etc/passwd"}`)},
			effect: policy.Deny, policies: agent.PolicyWorkspace, reason: "/workspace/../etc/passwd: path is outside the workspace"},
		{name: "relative escape", req: api.PolicyCheck{Tool: "search_files", Arguments: json.RawMessage(`{"pattern":"x","path":"a/../../b"}`)},
			effect: policy.Deny, policies: agent.PolicyWorkspace, reason: "a/../../b: path is outside the workspace"},
		{name: "outside another mount path", req: api.PolicyCheck{Tool: "read_file", Arguments: json.RawMessage(`{"path":"/workspace/x"}`), MountPath: "/src"},
			effect: policy.Deny, policies: agent.PolicyWorkspace, reason: "/workspace/x: path is outside the workspace (the workspace is /src)"},
		{name: "git hook written", req: api.PolicyCheck{Tool: "write_file", Arguments: json.RawMessage(`{"path":".git/hooks/pre-commit","content":"x"}`)},
			effect: policy.Deny, policies: agent.PolicyWorkspace, reason: ".git/hooks/pre-commit: path is protected (git's hooks"},
		{name: "keel directory edited", req: api.PolicyCheck{Tool: "edit_file", Arguments: json.RawMessage(`{"path":"/workspace/.keel/config.toml","old_string":"a","new_string":"b"}`)},
			effect: policy.Deny, policies: agent.PolicyWorkspace, reason: "/workspace/.keel/config.toml: path is protected (read-only for the agent)"},
		{name: "keel directory written", req: api.PolicyCheck{Tool: "write_file", Arguments: json.RawMessage(`{"path":".keel/config.toml","content":"x"}`)},
			effect: policy.Deny, policies: agent.PolicyWorkspace, reason: ".keel/config.toml: path is protected (read-only for the agent)"},
		{name: "given path outside", req: api.PolicyCheck{Tool: "read_file", Arguments: json.RawMessage(`{"path":"x"}`), Paths: []string{"../x"}},
			effect: policy.Deny, policies: agent.PolicyWorkspace, reason: "../x: path is outside the workspace"},
		{name: "path the policy denies", engine: denyPaths, req: api.PolicyCheck{Tool: "read_file", Arguments: json.RawMessage(`{"path":"secrets/key"}`)},
			effect: policy.Deny, policies: agent.PolicyWorkspace, reason: "secrets/key: path is forbidden by the run's policy"},
		{name: "link out of the run's workspace", req: api.PolicyCheck{Tool: "read_file", Arguments: json.RawMessage(`{"path":"etc/passwd"}`), Workspace: ws},
			effect: policy.Deny, policies: agent.PolicyWorkspace, reason: "etc/passwd: path is outside the workspace"},
		{name: "unknown argument", req: api.PolicyCheck{Tool: "read_file", Arguments: json.RawMessage(`{"pth":"x"}`)},
			refused: `the arguments of read_file do not match its schema: unknown argument "pth"`},
		{name: "duplicate key", req: api.PolicyCheck{Tool: "read_file", Arguments: json.RawMessage(`{"path":"a","path":"b"}`)},
			refused: `the arguments of read_file are ambiguous: the key "path" appears twice`},
		{name: "missing argument", req: api.PolicyCheck{Tool: "write_file", Arguments: json.RawMessage(`{"path":"x"}`)},
			refused: `the arguments of write_file do not match its schema`},
		{name: "bash argument of a wrong type", req: api.PolicyCheck{Arguments: json.RawMessage(`{"command":1}`)},
			refused: `the arguments of bash do not match its schema`},
		{name: "workspace that is no directory", req: api.PolicyCheck{Tool: "read_file", Arguments: json.RawMessage(`{"path":"x"}`), Workspace: filepath.Join(ws, "none")},
			refused: "is not a directory"},
		// What a run's workspace lets through, the policy decides.
		{name: "inside", req: api.PolicyCheck{Tool: "read_file", Arguments: json.RawMessage(`{"path":"/workspace/src/../x.go"}`)},
			effect: policy.Allow, wantPaths: []string{"x.go"}},
		{name: "inside another mount path", req: api.PolicyCheck{Tool: "write_file", Arguments: json.RawMessage(`{"path":"/src/a/b.go","content":""}`), MountPath: "/src"},
			effect: policy.Allow, wantPaths: []string{"a/b.go"}},
		{name: "git config read", req: api.PolicyCheck{Tool: "read_file", Arguments: json.RawMessage(`{"path":".git/config"}`)},
			effect: policy.Allow, wantPaths: []string{".git/config"}},
		{name: "inside the run's workspace", req: api.PolicyCheck{Tool: "read_file", Arguments: json.RawMessage(`{"path":"src/x.go"}`), Workspace: ws},
			effect: policy.Allow, wantPaths: []string{"src/x.go"}},
		{name: "connector tool unchanged", req: api.PolicyCheck{Tool: "shop__sql_query", Arguments: json.RawMessage(`{"sql":"select 1"}`)},
			effect: policy.Allow},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := tt.engine
			if e == nil {
				e = policy.Default()
			}
			d, err := service.DecideCall(t.Context(), e, &tt.req)
			if tt.refused != "" {
				if err == nil || !strings.Contains(err.Error(), tt.refused) {
					t.Fatalf("DecideCall = %+v, %v; want refused saying %q", d, err, tt.refused)
				}
				if err := service.CheckCall(t.Context(), nil, &tt.req); !strings.Contains(tt.refused, "directory") && (err == nil || !strings.Contains(err.Error(), tt.refused)) {
					t.Errorf("CheckCall = %v, want refused saying %q", err, tt.refused)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d.Effect != tt.effect || tt.policies != "" && strings.Join(d.Policies, ",") != tt.policies || !strings.Contains(d.Reason, tt.reason) {
				t.Errorf("decision = %s %v %q, want %s %s %q", d.Effect, d.Policies, d.Reason, tt.effect, tt.policies, tt.reason)
			}
			if tt.wantPaths != nil {
				var got []string
				for _, p := range d.Parts {
					got = append(got, p.Text)
				}
				if strings.Join(got, "|") != strings.Join(tt.wantPaths, "|") {
					t.Errorf("parts = %q, want %q", got, tt.wantPaths)
				}
			}
		})
	}
}

// Through the service (keel --server URL policy check, POST
// /v1/policy/check) the same, and a workspace is one the caller's run
// could have: under the server's workspace roots, where its links are
// followed as a run follows them.
func TestServicePolicyCheckResolvesInTheWorkspace(t *testing.T) {
	ctx := t.Context()
	root := t.TempDir()
	ws := filepath.Join(root, "proj")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc", filepath.Join(ws, "etc")); err != nil {
		t.Fatal(err)
	}
	svc := service.New(agent.NewRuntime(mem.New(), nil), &service.Options{NoExecution: true, Policy: policy.Default(), WorkspaceRoots: []string{root}})
	defer svc.Shutdown(context.WithoutCancel(ctx))
	for _, tt := range []struct {
		name    string
		req     api.PolicyCheck
		refused string
		effect  policy.Effect
		reason  string
	}{
		{name: "outside", req: api.PolicyCheck{Tool: "read_file", Arguments: json.RawMessage(`{"path":"/etc/passwd"}`)},
			effect: policy.Deny, reason: "/etc/passwd: path is outside the workspace"},
		{name: "protected", req: api.PolicyCheck{Tool: "write_file", Arguments: json.RawMessage(`{"path":".git/hooks/x","content":""}`)},
			effect: policy.Deny, reason: ".git/hooks/x: path is protected"},
		{name: "link out", req: api.PolicyCheck{Tool: "read_file", Arguments: json.RawMessage(`{"path":"etc/passwd"}`), Workspace: ws},
			effect: policy.Deny, reason: "etc/passwd: path is outside the workspace"},
		{name: "workspace outside the roots", req: api.PolicyCheck{Tool: "read_file", Arguments: json.RawMessage(`{"path":"x"}`), Workspace: t.TempDir()},
			refused: "is not under one of this server's workspace roots"},
		{name: "unknown argument", req: api.PolicyCheck{Tool: "read_file", Arguments: json.RawMessage(`{"pth":"x"}`)},
			refused: `unknown argument "pth"`},
		{name: "inside", req: api.PolicyCheck{Tool: "read_file", Arguments: json.RawMessage(`{"path":"x"}`), Workspace: ws},
			effect: policy.Allow},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d, err := svc.CheckPolicy(ctx, nil, &tt.req)
			if tt.refused != "" {
				var se *service.Error
				if !errors.As(err, &se) || se.Code != api.CodeInvalidRequest || !strings.Contains(err.Error(), tt.refused) {
					t.Fatalf("CheckPolicy = %+v, %v; want invalid request saying %q", d, err, tt.refused)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d.Effect != tt.effect || !strings.Contains(d.Reason, tt.reason) || tt.effect == policy.Deny && strings.Join(d.Policies, ",") != agent.PolicyWorkspace {
				t.Errorf("decision = %s %v %q, want %s %q", d.Effect, d.Policies, d.Reason, tt.effect, tt.reason)
			}
		})
	}
}
