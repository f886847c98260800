package server

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/mem"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/service"
)

type openAPIDocument struct {
	Paths      map[string]map[string]openAPIOp `json:"paths"`
	Components struct {
		Schemas map[string]struct {
			Properties map[string]json.RawMessage `json:"properties"`
			Required   []string                   `json:"required"`
		} `json:"schemas"`
	} `json:"components"`
}

type openAPIOp struct {
	OperationID string `json:"operationId"`
	Scope       string `json:"x-keel-scope"`
}

func loadOpenAPI(t *testing.T) *openAPIDocument {
	t.Helper()
	var doc openAPIDocument
	if err := json.Unmarshal(OpenAPI(), &doc); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	return &doc
}

// The document lists exactly the registered routes, each with the scope
// the server enforces.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	doc := loadOpenAPI(t)
	var documented, registered []string
	scopes := map[string]string{}
	for p, ops := range doc.Paths {
		for m, op := range ops {
			if m == "parameters" {
				continue
			}
			k := strings.ToUpper(m) + " " + p
			documented = append(documented, k)
			scopes[k] = op.Scope
			if op.OperationID == "" {
				t.Errorf("%s has no operationId", k)
			}
		}
	}
	for _, r := range routes {
		k := r.method + " " + strings.ReplaceAll(r.pattern, "...}", "}")
		registered = append(registered, k)
		if s, ok := scopes[k]; ok && s != r.scope {
			t.Errorf("%s: documented scope %q, enforced %q", k, s, r.scope)
		}
	}
	sort.Strings(documented)
	sort.Strings(registered)
	if diff := cmp.Diff(registered, documented); diff != "" {
		t.Errorf("routes (-registered +documented):\n%s", diff)
	}
}

// Every documented route reaches a handler of the real server (not the
// catch-all), so the document cannot describe a path the mux does not
// serve.
func TestOpenAPIRoutesAreServed(t *testing.T) {
	svc := service.New(agent.NewRuntime(mem.New(), nil), nil)
	defer svc.Shutdown(t.Context())
	h := NewHandler(svc, nil)
	for p, ops := range loadOpenAPI(t).Paths {
		for m := range ops {
			path := strings.NewReplacer("{id}", "x", "{call}", "c", "{grant}", "g", "{path}", ".keel/artifacts/x/c.out").Replace(p)
			req := httptest.NewRequest(strings.ToUpper(m), path, nil)
			if _, pat := h.mux.Handler(req); pat == "/v1/" || pat == "" {
				t.Errorf("%s %s is documented but not served", strings.ToUpper(m), p)
			}
		}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/openapi.json", nil))
	if rec.Code != http.StatusOK || !json.Valid(rec.Body.Bytes()) {
		t.Errorf("GET /v1/openapi.json = %d", rec.Code)
	}
}

// The schemas have exactly the JSON fields of the Go types the server
// encodes and decodes.
func TestOpenAPISchemasMatchTypes(t *testing.T) {
	types := map[string]any{
		"Error": api.Error{}, "ErrorBody": api.ErrorBody{}, "Limits": api.Limits{}, "CreateRun": api.CreateRun{},
		"Run": api.Run{}, "RunList": api.RunList{}, "ResumeRun": api.ResumeRun{}, "Settings": api.Settings{}, "ForkRun": api.ForkRun{},
		"Approval": api.Approval{}, "ApprovalList": api.ApprovalList{}, "Decide": api.Decide{},
		"Agent": api.Agent{}, "AgentList": api.AgentList{}, "CreateAgent": api.CreateAgent{}, "Revoke": api.Revoke{},
		"VerifyAudit": api.VerifyAudit{}, "AuditReport": api.AuditReport{}, "AuditProblem": api.AuditProblem{}, "AuditJournal": api.AuditJournal{},
		"PolicyPart": policy.Part{}, "PolicyCheck": api.PolicyCheck{}, "PolicyDecision": api.PolicyDecision{}, "Grant": policy.Grant{}, "GrantList": api.GrantList{},
		"Token": api.Token{}, "TokenList": api.TokenList{}, "CreateToken": api.CreateToken{}, "NewToken": api.NewToken{},
		"Whoami": api.Whoami{}, "Event": journal.Event{}, "CostReport": api.CostReport{}, "CostRow": api.CostRow{},
		"RewindRun": api.RewindRun{}, "Rewound": api.Rewound{}, "FileChange": api.FileChange{}, "RunDiff": api.RunDiff{}, "FileDiff": api.FileDiff{}, "ProposedEdit": api.ProposedEdit{}, "RunTree": api.RunTree{}, "RunTreeSpend": api.RunTreeSpend{}, "RunTreeLeft": api.RunTreeLeft{},
		"AuthWait": api.AuthWait{}, "AuthWaitList": api.AuthWaitList{}, "AuthStarted": api.AuthStarted{},
		"Connectors": api.Connectors{}, "Input": api.Input{}, "InputList": api.InputList{}, "AnswerInput": api.AnswerInput{},
		"Delta":          api.Delta{},
		"CreateSchedule": api.CreateSchedule{}, "Schedule": api.Schedule{}, "ScheduleList": api.ScheduleList{}, "Fire": api.Fire{}, "FireList": api.FireList{},
		"PauseSchedule": api.PauseSchedule{}, "TriggerSchedule": api.TriggerSchedule{}, "Backfill": api.Backfill{},
		"CreateTrigger": api.CreateTrigger{}, "RunEvents": api.RunEvents{}, "Trigger": api.Trigger{}, "NewTrigger": api.NewTrigger{}, "TriggerList": api.TriggerList{},
		"Delivery": api.Delivery{}, "DeliveryList": api.DeliveryList{}, "TriggerAnswer": api.TriggerAnswer{},
		"Sink": api.Sink{}, "SinkList": api.SinkList{}, "Notification": api.Notification{}, "NotificationList": api.NotificationList{},
		"MemoryEntry": api.MemoryEntry{}, "MemoryLabels": api.MemoryLabels{}, "MemorySource": api.MemorySource{}, "MemoryForgotten": api.MemoryForgotten{},
		"MemoryList": api.MemoryList{}, "MemoryHistory": api.MemoryHistory{}, "EditMemory": api.EditMemory{}, "ForgetMemory": api.ForgetMemory{},
		"SkillCandidate": api.SkillCandidate{}, "SkillCandidateList": api.SkillCandidateList{},
		"Skill": api.Skill{}, "SkillSignature": api.SkillSignature{}, "SkillList": api.SkillList{}, "SkillDetail": api.SkillDetail{}, "SkillFile": api.SkillFile{}, "InstallSkill": api.InstallSkill{},
		"Eval": api.Eval{}, "EvalStats": api.EvalStats{}, "EvalSummary": api.EvalSummary{}, "EvalList": api.EvalList{}, "EvalReport": api.EvalReport{},
		"EvalCase": api.EvalCase{}, "EvalTrial": api.EvalTrial{}, "EvalAttempt": api.EvalAttempt{},
	}
	doc := loadOpenAPI(t)
	var names []string
	for name, s := range doc.Components.Schemas {
		names = append(names, name)
		v, ok := types[name]
		if !ok {
			t.Errorf("schema %s has no Go type in this test", name)
			continue
		}
		var props []string
		for p := range s.Properties {
			props = append(props, p)
		}
		sort.Strings(props)
		fields := jsonFields(reflect.TypeOf(v))
		if diff := cmp.Diff(fields, props); diff != "" {
			t.Errorf("schema %s vs %T (-go +schema):\n%s", name, v, diff)
		}
		for _, r := range s.Required {
			if !slices.Contains(fields, r) {
				t.Errorf("schema %s requires unknown field %s", name, r)
			}
		}
	}
	for name := range types {
		if _, ok := doc.Components.Schemas[name]; !ok {
			t.Errorf("type for %s is not documented", name)
		}
	}
	// Every reference resolves.
	for _, ref := range refs(OpenAPI()) {
		name := strings.TrimPrefix(ref, "#/components/schemas/")
		if _, ok := doc.Components.Schemas[name]; !ok {
			t.Errorf("dangling $ref %s", ref)
		}
	}
	_ = names
}

// jsonFields returns the JSON names of t's fields, embedded structs
// flattened, sorted.
func jsonFields(t reflect.Type) []string {
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("json")
		name, _, _ := strings.Cut(tag, ",")
		if name == "-" {
			continue
		}
		if f.Anonymous && name == "" {
			out = append(out, jsonFields(f.Type)...)
			continue
		}
		if name == "" {
			name = f.Name
		}
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

func refs(b []byte) []string {
	var out []string
	s := string(b)
	for {
		i := strings.Index(s, `"$ref": "`)
		if i < 0 {
			return out
		}
		s = s[i+len(`"$ref": "`):]
		j := strings.IndexByte(s, '"')
		out = append(out, s[:j])
		s = s[j:]
	}
}
