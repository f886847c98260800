package server

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/checkpoint"
	"github.com/keel-run/keel/internal/view"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/server/token"
	"github.com/keel-run/keel/service"
	"github.com/keel-run/keel/telemetry/cost"
	"github.com/keel-run/keel/visible"
)

//go:embed ui/pages.html
var pagesHTML string

//go:embed ui/static
var staticFS embed.FS

// uiPages holds the web UI's parsed templates.
type uiPages struct {
	t *template.Template
}

func newUIPages(proposed func(api.Approval) *fileDiff) *uiPages {
	funcs := template.FuncMap{
		"short": func(id string) string { return shortID(id) },
		"clip":  clip,
		"cost":  func(c float64) string { return fmt.Sprintf("$%.4f", c) },
		"dur":   func(ms int64) string { return (time.Duration(ms) * time.Millisecond).Round(time.Millisecond).String() },
		"num":   func(n int64) string { return groupDigits(n) },
		"num64": func(n int64) string { return groupDigits(n) },
		"iso":   func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
		"ago": func(t time.Time) string {
			if t.IsZero() {
				return "—"
			}
			return t.Local().Format("2006-01-02 15:04:05")
		},
		"join":   strings.Join,
		"action": approvalAction,
		// forkOf splits a fork's "RUN@SEQ" (api.Run.ForkOf): the page
		// links RUN, which every RUN argument takes, and says the event.
		"forkOf": func(s string) []string {
			run, seq, _ := strings.Cut(s, "@")
			return []string{run, seq}
		},
		// vis shows invisible and reordering characters as escapes;
		// seg escapes one URL path segment (a call id may hold "/", "?"
		// or "#").
		"vis":        visible.String,
		"seg":        url.PathEscape,
		"costGroups": func() []string { return cost.CostGroups },
		"proposed":   proposed,
		"md":         func(s string) template.HTML { return markdown(clip(s, convTextChars)) },
		"summaryOf": func(p *page) *summaryView {
			return &summaryView{Run: p.Run, Elsewhere: p.Elsewhere, CanWrite: p.CanWrite, CanDecide: p.CanDecide, Who: p.Who, Form: p.Form, FormName: p.FormName, LastCheckpoint: p.LastCheckpoint, Completed: p.Completed, LimitStop: p.LimitStop, NotYours: p.NotYours}
		},
		"withForm": func(a api.Approval, s *summaryView) approvalView {
			v := approvalView{A: a}
			if s != nil {
				v.CanDecide, v.Who = s.CanDecide, s.Who
			}
			if s != nil && s.FormName == "decide" && s.Form["call"] == a.CallID {
				v.Reason, v.Prefix = s.Form["reason"], s.Form["prefix"]
			}
			return v
		},
		"withAsker": func(w api.AuthWait, s *summaryView) authWaitView {
			v := authWaitView{W: w}
			if s != nil {
				v.CanDecide, v.Who = s.CanDecide, s.Who
			}
			return v
		},
		"statusIs": func(r api.Run, s ...string) bool { return slices.Contains(s, r.Status) },
		"spend":    treeSpend,
		"left":     treeLeft,
		"pct":      evalPct,
		"optPct": func(f *float64) string {
			if f == nil {
				return "-"
			}
			return evalPct(*f)
		},
		"secs": func(s float64) string { return fmt.Sprintf("%.1fs", s) },
	}
	return &uiPages{t: template.Must(template.New("pages").Funcs(funcs).Parse(pagesHTML))}
}

// page is what every page template gets.
type page struct {
	Title, Nav string
	Who        *caller
	Inbox      int
	Flash      *flash
	CanWrite   bool
	IsAdmin    bool
	// CanDecide: the token may decide approvals and edit memory
	// (approvals:write).
	CanDecide bool
	// Back, on an error page, is the page the request came from.
	Back string
	// Choices is what the new-run form offers (the runs page).
	Choices *choices

	Runs []api.Run
	Run  api.Run
	// Elsewhere: see summaryView.
	Elsewhere string
	Rows      []row
	// Items are the run page's conversation; Files the files the run
	// changed (FilesNote says against what, or why none are shown).
	Items     []item
	Files     []fileDiff
	FilesNote string
	// FilesCounted counts the Files that are the run's change (not files
	// git ignores, which are listed uncounted).
	FilesCounted int
	// LastCheckpoint is the run's newest checkpoint event (0: none);
	// Completed its newest run.completed event (0: none).
	LastCheckpoint int64
	Completed      int64
	// LimitStop: the run stopped at a limit (see limitStop).
	LimitStop *limitStop
	// NotYours says why the viewer may not change the run (another's
	// demo run): its page offers no resume, cancel or rewind.
	NotYours string
	// RewindPlan, on the run page, asks to confirm a rewind; Rewound
	// says what a rewind just did, with its undo.
	RewindPlan *rewindPlan
	Rewound    *rewound
	// FieldErrors are the problems of a refused form's fields, by the
	// field's name (service.FieldError).
	FieldErrors map[string]string
	// Settings are the settings the run page's run was created with
	// (policy, hosts, environment, setup), as every view shows them.
	Settings *view.Settings
	// Form holds what a form on the page sent when it failed, to show
	// it again; FormName names the form.
	Form     map[string]string
	FormName string
	// Filter and Chart are the runs dashboard's filters and its chart.
	Filter    runFilter
	Chart     *runChart
	Next      int64
	Approvals []api.Approval
	AuthWaits []api.AuthWait
	// Schedules, Triggers and Sinks are the schedules page's; Schedule
	// and Fires a schedule's page.
	Schedules []api.Schedule
	Triggers  []api.Trigger
	Sinks     []api.Sink
	Schedule  *api.Schedule
	Fires     []api.Fire
	// Memory are the memory page's entries (MemoryAll: superseded and
	// forgotten ones too), or an entry's versions (MemoryID the one
	// asked for).
	Memory    []api.MemoryEntry
	MemoryAll bool
	MemoryID  string
	// Skills are the skills page's skills of SkillWorkspace ("" for
	// the server's own), Candidates the agent-written candidates; Skill
	// a skill's page.
	Skills         *api.SkillList
	SkillWorkspace string
	Candidates     []api.SkillCandidate
	Skill          *api.SkillDetail
	// Evals are the evaluations page's; EvalReport an evaluation's page.
	Evals      *api.EvalList
	EvalReport *api.EvalReport
	// Connected is the authorization callback's outcome.
	Connected *connected
	// Inputs are the questions the run page's run waits for.
	Inputs []uiInput
	// Tree is the run page's team: the run's child runs, or the tree
	// a child belongs to (nil for a run of one agent).
	Tree      *api.RunTree
	Agents    []api.Agent
	AgentsErr string
	// Grants are the Agents page's standing approvals, by agent (those
	// with any).
	Grants map[string][]policy.Grant
	Report *api.AuditReport
	// Cost is the cost page's report (CostBy its grouping).
	Cost    *api.CostReport
	CostBy  string
	CostErr string

	// The sign-in page: the one-time code of a sign-in link and whom it
	// signs in as, the person already signed in, and where to go next.
	Code     string
	CodeFor  *api.Token
	Current  string
	NextPage string
}

type flash struct{ Kind, Text string }

// Field returns what the form name sent for key, when that form failed.
// FieldErr is the problem of field key of the page's refused form
// (service.FieldError's names), "" if none.
func (p *page) FieldErr(key string) string { return p.FieldErrors[key] }

func (p *page) Field(name, key string) string {
	if p.FormName != name {
		return ""
	}
	return p.Form[key]
}

// choices are what the new-run form offers to pick from: the models, the
// workspaces and the agents this server knows.
type choices = service.Choices

// summaryView is the run page's header: the run's facts, its approvals
// and the actions that apply to its state (sent again over the stream
// as the run changes). Form keeps what a failed form sent.
// authWaitView is an authorization wait's card: the wait and whether
// the viewer may answer it (approvals:write), as approvalView is an
// approval's.
type authWaitView struct {
	W         api.AuthWait
	CanDecide bool
	Who       *caller
}

type summaryView struct {
	Run api.Run
	// Elsewhere, for a paused run waiting for nothing, says why this
	// server does not continue it and where it goes on.
	Elsewhere      string
	CanWrite       bool
	CanDecide      bool
	Who            *caller
	Form           map[string]string
	FormName       string
	LastCheckpoint int64
	Completed      int64
	// LimitStop: the run stopped at a limit (see limitStop).
	LimitStop *limitStop
	// NotYours says why the viewer may not change the run (another's
	// demo run): its page offers no resume, cancel or rewind.
	NotYours string
	// RewindPlan, on the run page, asks to confirm a rewind; Rewound
	// says what a rewind just did, with its undo.
	RewindPlan *rewindPlan
	Rewound    *rewound
}

// limitStop is a run stopped at its step, token or cost limit, as the
// Resume form says it: a resume under the same limit stops again at
// once, so the form proposes Value (service.RaisedLimit) in the field of
// the limit (Field, the name of api.Limits' field).
type limitStop struct{ Field, Message, Value string }

// LimitValue is the value the Resume form proposes for limit field.
func (s *summaryView) LimitValue(field string) string {
	if s.LimitStop == nil || s.LimitStop.Field != field {
		return ""
	}
	return s.LimitStop.Value
}

// ForkAt is the event the Fork form offers: the newest, or for a
// completed run the one before its completion (a run cannot be forked
// and started from the event that completes it).
func (s *summaryView) ForkAt() int64 {
	if s.Run.Status == string(journal.StatusCompleted) && s.Completed > 1 {
		return s.Completed - 1
	}
	return s.Run.Events
}

// Field returns what the form name sent for key, when that form failed.
func (s *summaryView) Field(name, key string) string {
	if s.FormName != name {
		return ""
	}
	return s.Form[key]
}

// approvalView is an approval card, with the reason typed into it when
// its decision failed.
type approvalView struct {
	A      api.Approval
	Reason string
	// Prefix is the word prefix typed into it when its decision failed.
	Prefix string
	// CanDecide: the viewer's token may decide it; Who is the viewer.
	CanDecide bool
	Who       *caller
}

// registerUI adds the web UI's routes to mux.
func (h *Handler) registerUI(mux *http.ServeMux) {
	static, _ := fs.Sub(staticFS, "ui/static")
	mux.Handle("GET /ui/static/", http.StripPrefix("/ui/static/", staticHandler(static)))
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/ui/runs", http.StatusSeeOther) })
	mux.HandleFunc("GET /ui/{$}", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/ui/runs", http.StatusSeeOther) })
	mux.HandleFunc("GET /ui/login", h.uiLogin)
	mux.HandleFunc("POST /ui/login", h.uiLogin)
	mux.HandleFunc("POST /ui/logout", h.uiLogout)
	for _, p := range []struct {
		pattern, scope string
		serve          func(w http.ResponseWriter, r *http.Request, who *caller) error
	}{
		{"GET /ui/runs", api.ScopeRunsRead, h.uiRuns},
		{"POST /ui/runs/demo", api.ScopeRunsWrite, h.uiDemo},
		{"POST /ui/runs/new", api.ScopeRunsWrite, h.uiNewRun},
		{"GET /ui/runs/new", api.ScopeRunsRead, h.uiNewRunForm},
		{"GET /ui/runs/{id}", api.ScopeRunsRead, h.uiRun},
		{"GET /ui/runs/{id}/stream", api.ScopeRunsRead, h.uiStream},
		{"GET /ui/runs/{id}/artifacts/{path...}", api.ScopeRunsRead, h.uiArtifact},
		{"POST /ui/runs/{id}/cancel", api.ScopeRunsWrite, h.uiCancel},
		{"POST /ui/runs/{id}/resume", api.ScopeRunsWrite, h.uiResume},
		{"POST /ui/runs/{id}/fork", api.ScopeRunsWrite, h.uiFork},
		{"POST /ui/runs/{id}/rewind", api.ScopeRunsWrite, h.uiRewind},
		{"GET /ui/runs/{id}/files", api.ScopeRunsRead, h.uiFiles},
		{"GET /ui/runs/{id}/tree", api.ScopeRunsRead, h.uiTree},
		{"GET /ui/approvals", api.ScopeRunsRead, h.uiApprovals},
		{"POST /ui/approvals/{id}/{call}", api.ScopeApprovalsWrite, h.uiDecide},
		{"POST /ui/runs/{id}/auth/{call}/connect", api.ScopeApprovalsWrite, h.uiConnect},
		{"POST /ui/inputs/{id}/{input}", api.ScopeApprovalsWrite, h.uiAnswer},
		{"GET /ui/agents", api.ScopeRunsRead, h.uiAgents},
		{"POST /ui/agents", api.ScopeAdmin, h.uiCreateAgent},
		{"POST /ui/agents/{name}/revoke", api.ScopeAdmin, h.uiRevokeAgent},
		{"POST /ui/agents/{name}/restore", api.ScopeAdmin, h.uiRestoreAgent},
		{"POST /ui/agents/{name}/grants/{grant}/revoke", api.ScopeApprovalsWrite, h.uiUngrant},
		{"GET /ui/schedules", api.ScopeRunsRead, h.uiSchedules},
		{"POST /ui/schedules", api.ScopeRunsWrite, h.uiCreateSchedule},
		{"GET /ui/schedules/{id}", api.ScopeRunsRead, h.uiSchedule},
		{"POST /ui/schedules/{id}/{action}", api.ScopeRunsWrite, h.uiScheduleAction},
		{"GET /ui/memory", api.ScopeRunsRead, h.uiMemory},
		{"GET /ui/memory/{id}", api.ScopeRunsRead, h.uiMemoryEntry},
		{"POST /ui/memory/{id}/{action}", api.ScopeApprovalsWrite, h.uiMemoryAction},
		{"GET /ui/skills", api.ScopeRunsRead, h.uiSkills},
		{"POST /ui/skills", api.ScopeAdmin, h.uiInstallSkill},
		{"GET /ui/skills/{name}", api.ScopeRunsRead, h.uiSkill},
		{"GET /ui/cost", api.ScopeAdmin, h.uiCost},
		{"GET /ui/evals", api.ScopeAdmin, h.uiEvals},
		{"GET /ui/evals/{id}", api.ScopeAdmin, h.uiEval},
		{"GET /ui/evals/{id}/report.html", api.ScopeAdmin, h.uiEvalHTML},
		{"GET /ui/audit", api.ScopeRunsRead, h.uiAudit},
		{"POST /ui/audit", api.ScopeRunsRead, h.uiAudit},
	} {
		mux.Handle(p.pattern, h.uiEndpoint(p.scope, p.serve))
	}
	// Any other page: the UI's own "not found", behind sign-in like the
	// rest, rather than the mux's bare text.
	mux.Handle("/ui/", h.uiEndpoint(api.ScopeRunsRead, func(_ http.ResponseWriter, r *http.Request, _ *caller) error {
		return notFound("no page %s %s", r.Method, visible.String(r.URL.Path))
	}))
}

func staticHandler(static fs.FS) http.Handler {
	fsrv := http.FileServerFS(static)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		fsrv.ServeHTTP(w, r)
	})
}

// uiEndpoint authenticates a UI request by its cookie (redirecting to the
// sign-in page without one), checks the scope and renders errors as a
// page.
func (h *Handler) uiEndpoint(scope string, serve func(http.ResponseWriter, *http.Request, *caller) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'")
		w.Header().Set("Referrer-Policy", "same-origin")
		who, err := h.authenticate(r)
		if err != nil {
			e, _ := classify(err)
			if e.status == http.StatusUnauthorized {
				next := ""
				if r.Method == http.MethodGet {
					next = "?next=" + url.QueryEscape(r.URL.RequestURI())
				}
				http.Redirect(w, r, "/ui/login"+next, http.StatusSeeOther)
				return
			}
			h.uiError(w, r, nil, e)
			return
		}
		if err := service.NeedScope(&who.Token, scope); err != nil {
			e, _ := classify(err)
			h.uiError(w, r, who, e)
			return
		}
		err = h.resolveRun(r)
		if err == nil {
			err = serve(w, r, who)
		}
		if err != nil {
			e, internal := classify(err)
			if internal {
				h.logger.Error("ui request failed", "path", r.URL.Path, "err", err)
			}
			h.uiError(w, r, who, e)
		}
	})
}

func (h *Handler) uiError(w http.ResponseWriter, r *http.Request, who *caller, e *apiError) {
	p := h.newPage(r.Context(), who, "Error", "")
	p.Flash = &flash{"bad", e.msg}
	// A form of a run's (its approvals, inputs, actions) that failed
	// links back to the run it came from.
	path := r.URL.Path
	if id := r.PathValue("id"); id != "" && e.status != http.StatusNotFound && (strings.HasPrefix(path, "/ui/approvals/") ||
		strings.HasPrefix(path, "/ui/inputs/") || r.Method == http.MethodPost && strings.HasPrefix(path, "/ui/runs/")) {
		p.Back = "/ui/runs/" + url.PathEscape(id)
	}
	h.render(w, e.status, "error", p)
}

// newPage fills the parts of a page every template shows.
func (h *Handler) newPage(ctx context.Context, who *caller, title, nav string) *page {
	p := &page{Title: title, Nav: nav, Who: who}
	if who != nil {
		p.CanWrite = token.HasScope(&who.Token, api.ScopeRunsWrite)
		p.IsAdmin = token.HasScope(&who.Token, api.ScopeAdmin)
		p.CanDecide = token.HasScope(&who.Token, api.ScopeApprovalsWrite)
		// The count of what waits for a person, for a token that may list
		// it (GET /v1/approvals and /v1/auth/waits need runs:read).
		if token.HasScope(&who.Token, api.ScopeRunsRead) {
			if list, err := h.svc.Approvals(ctx, who); err == nil {
				p.Inbox = len(list)
			}
			if list, err := h.svc.AuthWaits(ctx, who); err == nil {
				p.Inbox += len(list)
			}
		}
	}
	return p
}

// render executes template name into a buffer first, so that a template
// error becomes a clean 500 rather than half a page.
func (h *Handler) render(w http.ResponseWriter, status int, name string, p *page) {
	var b bytes.Buffer
	if err := h.ui.t.ExecuteTemplate(&b, name, p); err != nil {
		h.logger.Error("render page", "page", name, "err", err)
		http.Error(w, "internal error rendering the page", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(b.Bytes())
}

// fragment renders one named template alone (for the pages' refreshes).
func (h *Handler) fragment(w http.ResponseWriter, name string, data any) error {
	var b bytes.Buffer
	if err := h.ui.t.ExecuteTemplate(&b, name, data); err != nil {
		return err
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(b.Bytes())
	return nil
}

func (h *Handler) uiRuns(w http.ResponseWriter, r *http.Request, who *caller) error {
	runs, err := h.svc.Runs(r.Context(), who, &service.ListRuns{Limit: 200})
	if err != nil {
		return err
	}
	shown, filter := dashboard(r, runs)
	if r.URL.Query().Get("fragment") != "" {
		return h.fragment(w, "runrows", &page{Runs: shown})
	}
	p := h.runsPage(r, who, shown, filter)
	if r.URL.Query().Get("new") != "" {
		p.FormName = "new" // opens the New-run form
	}
	h.render(w, http.StatusOK, "runs", p)
	return nil
}

// runsPage is the runs page showing runs with the dashboard's filter.
func (h *Handler) runsPage(r *http.Request, who *caller, runs []api.Run, filter runFilter) *page {
	p := h.newPage(r.Context(), who, "Runs", "runs")
	p.Runs, p.Filter = runs, filter
	p.Chart = newRunChart(runs, h.svc.Clock()())
	if p.CanWrite {
		p.Choices = h.svc.NewRunChoices(r.Context(), who)
	}
	return p
}

func (h *Handler) uiDemo(w http.ResponseWriter, r *http.Request, who *caller) error {
	run, err := h.svc.Create(r.Context(), who, &service.CreateRun{CreateRun: api.CreateRun{Demo: true}})
	if err != nil {
		return err
	}
	http.Redirect(w, r, "/ui/runs/"+url.PathEscape(run.ID), http.StatusSeeOther)
	return nil
}

// uiNewRunForm answers a reload of a refused New-run form's page (the
// browser's address is then /ui/runs/new): the runs page, with the form
// open.
func (h *Handler) uiNewRunForm(w http.ResponseWriter, r *http.Request, _ *caller) error {
	http.Redirect(w, r, "/ui/runs?new=1#new-run", http.StatusSeeOther)
	return nil
}

func (h *Handler) uiNewRun(w http.ResponseWriter, r *http.Request, who *caller) error {
	req := &api.CreateRun{Task: formText(r.PostFormValue("task")), Model: strings.TrimSpace(r.PostFormValue("model")),
		Workspace: strings.TrimSpace(r.PostFormValue("workspace")), MountPath: strings.TrimSpace(r.PostFormValue("mount_path")),
		Agent:   strings.TrimSpace(r.PostFormValue("agent")),
		Sandbox: r.PostFormValue("sandbox"), Setup: strings.TrimSpace(formText(r.PostFormValue("setup"))),
		Policy: strings.TrimSpace(r.PostFormValue("policy")), Env: formLines(r.PostFormValue("env")),
		Network: strings.FieldsFunc(r.PostFormValue("network"), func(c rune) bool { return c == ',' || unicode.IsSpace(c) }),
		Team:    r.PostFormValue("team") != ""}
	formSecrets(r, req)
	limits, problems := formLimits(r)
	if limits != nil {
		req.Limits = *limits
	}
	// Every field's problem at once, each at its field, not one per try.
	if problems = append(h.svc.CheckFields(r.Context(), who, req), problems...); len(problems) > 0 {
		return h.newRunFailed(w, r, who, badRequest("%s", fieldsText(problems)), problems...)
	}
	run, err := h.svc.Create(r.Context(), who, &service.CreateRun{CreateRun: *req})
	if err != nil {
		return h.newRunFailed(w, r, who, err)
	}
	http.Redirect(w, r, "/ui/runs/"+url.PathEscape(run.ID), http.StatusSeeOther)
	return nil
}

// formSecrets reads the New-run form's secrets, offered by name
// (service.Choices): a box secret_env:NAME asks for NAME in the sandbox,
// a box secret_host:NAME=HOST for NAME on requests to HOST, which the
// run may then reach. Their values are the server's, never the form's.
func formSecrets(r *http.Request, req *api.CreateRun) {
	for k := range r.PostForm {
		if r.PostFormValue(k) == "" {
			continue
		}
		if name, ok := strings.CutPrefix(k, "secret_env:"); ok {
			req.SecretEnv = append(req.SecretEnv, name)
		} else if nh, ok := strings.CutPrefix(k, "secret_host:"); ok {
			name, host, _ := strings.Cut(nh, "=")
			req.SecretHosts = append(req.SecretHosts, api.SecretHost{Name: name, Host: host})
			if !slices.Contains(req.Network, host) {
				req.Network = append(req.Network, host)
			}
		}
	}
	slices.Sort(req.SecretEnv)
	slices.SortFunc(req.SecretHosts, func(a, b api.SecretHost) int { return strings.Compare(a.Name+"="+a.Host, b.Name+"="+b.Host) })
}

// formLimits reads a form's limit fields (max_steps, max_tool_calls,
// max_tokens, max_cost, timeout; empty: not given) into the limits the API takes,
// nil when none is given. Not a number is the form's to say; a negative
// value or a bad timeout the service's (service.ApplyLimits), in the
// words every front end uses.
func formLimits(r *http.Request) (*api.Limits, []service.FieldError) {
	var l api.Limits
	var problems []service.FieldError
	given := false
	bad := func(name, s, want string) {
		problems = append(problems, service.FieldError{Field: "limits", Message: fmt.Sprintf("%s %q: want %s (0: no limit)", name, s, want)})
	}
	field := func(key string) string {
		v := strings.TrimSpace(r.PostFormValue(key))
		given = given || v != ""
		return v
	}
	if s := field("max_steps"); s != "" {
		if n, err := strconv.Atoi(s); err != nil {
			bad("max steps", s, "a number")
		} else {
			l.MaxSteps = &n
		}
	}
	if s := field("max_tool_calls"); s != "" {
		if n, err := strconv.Atoi(s); err != nil {
			bad("max tool calls", s, "a number")
		} else {
			l.MaxToolCalls = &n
		}
	}
	if s := field("max_tokens"); s != "" {
		if n, err := strconv.ParseInt(s, 10, 64); err != nil {
			bad("max tokens", s, "a number")
		} else {
			l.MaxTokens = &n
		}
	}
	if s := field("max_cost"); s != "" {
		if c, err := strconv.ParseFloat(strings.TrimPrefix(s, "$"), 64); err != nil {
			bad("max cost", s, "a number of US dollars")
		} else {
			l.MaxCost = &c
		}
	}
	l.Timeout = field("timeout")
	if !given {
		return nil, problems
	}
	return &l, problems
}

// fieldsText says the problems of a form's fields in one text.
func fieldsText(problems []service.FieldError) string {
	if len(problems) == 1 {
		return problems[0].Message
	}
	msgs := make([]string, len(problems))
	for i, p := range problems {
		msgs[i] = p.Message
	}
	return fmt.Sprintf("%d fields need a change (each is marked): %s", len(problems), strings.Join(msgs, "; "))
}

// newRunFailed shows the runs page again with the New-run form open and
// holding what was typed, and the error above it (and each field's
// problem at the field): nothing typed is lost.
func (h *Handler) newRunFailed(w http.ResponseWriter, r *http.Request, who *caller, err error, problems ...service.FieldError) error {
	runs, lerr := h.svc.Runs(r.Context(), who, &service.ListRuns{Limit: 200})
	if lerr != nil {
		runs = nil
	}
	shown, filter := dashboard(r, runs)
	p := h.runsPage(r, who, shown, filter)
	e, internal := classify(err)
	if internal {
		h.logger.Error("ui request failed", "path", r.URL.Path, "err", err)
	}
	p.Flash = &flash{"bad", e.msg}
	p.FormName, p.Form = "new", map[string]string{}
	for _, f := range problems {
		if p.FieldErrors == nil {
			p.FieldErrors = map[string]string{}
		}
		p.FieldErrors[f.Field] = f.Message
	}
	for k, v := range r.PostForm {
		if len(v) > 0 {
			p.Form[k] = v[0]
		}
	}
	h.render(w, e.status, "runs", p)
	return nil
}

// formText is a text area's value with the line breaks browsers send
// as CRLF (the HTML form encoding) turned back into newlines.
func formText(s string) string { return strings.ReplaceAll(s, "\r\n", "\n") }

// formLines returns the non-empty lines of a text area, trimmed.
func formLines(s string) []string {
	var out []string
	for line := range strings.Lines(s) {
		if line = strings.TrimSpace(line); line != "" {
			out = append(out, line)
		}
	}
	return out
}

func (h *Handler) uiRun(w http.ResponseWriter, r *http.Request, who *caller) error {
	p, err := h.runPage(r.Context(), who, r.PathValue("id"))
	if err != nil {
		return err
	}
	if seq, err := strconv.ParseInt(r.URL.Query().Get("rewound"), 10, 64); err == nil {
		if p.Rewound = h.rewoundAt(r.Context(), r.PathValue("id"), seq); p.Rewound != nil {
			p.Rewound.Note = service.RewindNote(p.Run.Status)
		}
	}
	h.render(w, http.StatusOK, "run", p)
	return nil
}

// runPage builds the run page of run id: its summary, the conversation,
// the raw events and the files it changed.
func (h *Handler) runPage(ctx context.Context, who *caller, id string) (*page, error) {
	run, err := h.svc.Run(ctx, who, id)
	if err != nil {
		return nil, err
	}
	events, err := h.svc.Events(ctx, who, id, 1)
	if err != nil {
		return nil, err
	}
	notYours := h.notYours(ctx, who, id)
	rr, cr := newRowRenderer(id), convFor(&run, who, notYours == "")
	p := h.newPage(ctx, who, "Run "+shortID(id), "runs")
	p.Run, p.NotYours = run, notYours
	at := map[string]int{}
	for i := range events {
		p.Rows = append(p.Rows, rr.render(&events[i]))
		for _, it := range cr.render(&events[i]) {
			if k, ok := at[it.ID]; ok {
				p.Items[k] = it
				continue
			}
			at[it.ID] = len(p.Items)
			p.Items = append(p.Items, it)
		}
		if events[i].Type == journal.RunCompleted {
			p.Completed = events[i].Seq
		}
		if journal.KeepsStatus(events[i].Type) {
			p.LastCheckpoint = events[i].Seq
		}
	}
	p.Next = int64(len(events)) + 1
	if len(events) > 0 {
		if v, err := agent.Decode(&events[0]); err == nil {
			if c, ok := v.(*agent.RunCreated); ok {
				p.Settings = view.SettingsOf(c)
			}
		}
	}
	p.Elsewhere = h.elsewhere(ctx, run)
	p.LimitStop = h.limitStop(ctx, run)
	if st, _, err := h.rt.Load(ctx, id); err == nil {
		for _, in := range st.PendingInputs() {
			p.Inputs = append(p.Inputs, newUIInput(service.InputView(in)))
		}
	}
	p.Files, p.FilesCounted, p.FilesNote = h.runFiles(ctx, events)
	if t, err := h.svc.Tree(ctx, who, id); err == nil && (len(t.Children) > 0 || t.Parent != "") {
		p.Tree = &t
	}
	return p, nil
}

// elsewhere says, for a run paused for a decision that was made (none
// waits), why the
// server does not continue it and where it goes on (service.Elsewhere;
// "" otherwise): a keel run on the server's journal, decided here.
func (h *Handler) elsewhere(ctx context.Context, run api.Run) string {
	if run.Status != string(journal.StatusPaused) || run.Reason != "" && run.Reason != agent.ReasonApproval && run.Reason != agent.ReasonAuth || len(run.Pending) > 0 || len(run.AuthWaits) > 0 || run.Executing || run.Queued {
		return ""
	}
	return h.svc.Elsewhere(ctx, run.ID)
}

// limitStop says how run stopped at its step, token or cost limit, nil
// when it did not.
func (h *Handler) limitStop(ctx context.Context, run api.Run) *limitStop {
	if run.Status != string(journal.StatusFailed) {
		return nil
	}
	switch run.Reason {
	case agent.ReasonMaxSteps, agent.ReasonMaxTokens, agent.ReasonMaxCost, agent.ReasonMaxToolCalls:
	default:
		return nil
	}
	st, _, err := h.rt.Load(ctx, run.ID)
	if err != nil {
		return nil
	}
	return &limitStop{Field: run.Reason, Message: run.Message, Value: service.RaisedLimit(run.Reason, st)}
}

// treeSpend says a node's spend in a few words.
func treeSpend(s api.RunTreeSpend) string {
	d := fmt.Sprintf("%d steps, %s tok, %d tool calls", s.Steps, groupDigits(s.Tokens), s.ToolCalls)
	if s.Cost > 0 {
		d += fmt.Sprintf(", $%.4f", s.Cost)
	}
	if s.Children > 0 {
		d += fmt.Sprintf(", %d children", s.Children)
	}
	return d
}

// treeLeft says what is left of a node's limited axes.
func treeLeft(t api.RunTree) string {
	l, r := t.Limits, t.Left
	var parts []string
	if r.Steps != nil {
		parts = append(parts, fmt.Sprintf("%d of %d steps", *r.Steps, l.Steps))
	}
	if r.Tokens != nil {
		parts = append(parts, fmt.Sprintf("%s of %s tok", groupDigits(*r.Tokens), groupDigits(l.Tokens)))
	}
	if r.Cost != nil {
		parts = append(parts, fmt.Sprintf("$%.4f of $%.4f", *r.Cost, l.Cost))
	}
	if r.ToolCalls != nil {
		parts = append(parts, fmt.Sprintf("%d of %d tool calls", *r.ToolCalls, l.ToolCalls))
	}
	if r.Children != nil {
		parts = append(parts, fmt.Sprintf("%d of %d children", *r.Children, l.Children))
	}
	if len(parts) == 0 {
		return "no limits"
	}
	return strings.Join(parts, ", ")
}

// uiTree is the run page's team panel alone (refreshed while the tree
// runs).
func (h *Handler) uiTree(w http.ResponseWriter, r *http.Request, who *caller) error {
	t, err := h.svc.Tree(r.Context(), who, r.PathValue("id"))
	if err != nil {
		return err
	}
	return h.fragment(w, "tree", &page{Run: api.Run{ID: t.ID}, Tree: &t})
}

// runFiles returns the files a run changed (checkpoint.Changed, as keel
// runs diff and keel run's summary tell them), how many of them count
// as the run's change (not files git ignores), and what they are
// compared with, with the notes on what is not the run's.
func (h *Handler) runFiles(ctx context.Context, events []journal.Event) ([]fileDiff, int, string) {
	if len(events) == 0 {
		return nil, 0, ""
	}
	c, err := agent.Created(events)
	if err != nil {
		return nil, 0, "the run's start cannot be read: " + err.Error()
	}
	var changes []checkpoint.Change
	var note string
	sum, err := checkpoint.Changed(ctx, c, events)
	var he *checkpoint.HistoryError
	switch {
	case errors.As(err, &he) && he.From > 0:
		changes, note = he.Changes, fmt.Sprintf("%v: shown instead, from the run's own checkpoints: the checkpoint of event %d to that of event %d", he.Cause, he.From, he.To)
	case errors.Is(err, checkpoint.ErrNone) && c.Git == nil:
		return nil, 0, "no workspace checkpoints and no git commit to compare with"
	case err != nil:
		return nil, 0, "the workspace cannot be compared: " + err.Error()
	default:
		sum = sum.Seal(h.svc.RunSecrets(c))
		changes = sum.Changes
		note = "Changed " + sum.What(c) + "."
		if ignored := checkpoint.Unreviewed(changes); ignored > 0 {
			note += fmt.Sprintf(" %d file(s) git ignores were written too (build output, caches: listed, not counted).", ignored)
		}
		for _, n := range sum.Notes(c) {
			note += " Note: " + n + "."
		}
	}
	changes = checkpoint.SealSecrets(changes, h.svc.RunSecrets(c))
	out := make([]fileDiff, 0, len(changes))
	for _, c := range changes {
		out = append(out, newFileDiff(c))
	}
	return out, checkpoint.Reviewed(changes), note
}

// uiFiles is the run page's files panel alone (refreshed as the run
// changes files).
func (h *Handler) uiFiles(w http.ResponseWriter, r *http.Request, who *caller) error {
	p, err := h.runPage(r.Context(), who, r.PathValue("id"))
	if err != nil {
		return err
	}
	return h.fragment(w, "files", p)
}

// formFailed shows the run page again after a form on it failed: the
// error on top and what the person typed still in the form.
func (h *Handler) formFailed(w http.ResponseWriter, r *http.Request, who *caller, form string, err error) error {
	p, perr := h.runPage(r.Context(), who, r.PathValue("id"))
	if perr != nil {
		return err
	}
	e, internal := classify(err)
	if internal {
		h.logger.Error("ui request failed", "path", r.URL.Path, "err", err)
	}
	p.Flash = &flash{"bad", e.msg}
	p.FormName = form
	p.Form = map[string]string{}
	for k, v := range r.PostForm {
		if len(v) > 0 {
			p.Form[k] = v[0]
		}
	}
	h.render(w, e.status, "run", p)
	return nil
}

// uiRewind rewinds a run's files in two steps, as a person would want
// before files are replaced: without confirm it changes nothing and
// shows the run page with what the rewind would change (the files, and
// which of them changed after the run's last checkpoint: someone's later
// work); with confirm it rewinds and shows the run page with what it
// did and a button that undoes it.
func (h *Handler) uiRewind(w http.ResponseWriter, r *http.Request, who *caller) error {
	to, err := formSeq(r, "to")
	if err != nil {
		return h.formFailed(w, r, who, "rewind", err)
	}
	id := r.PathValue("id")
	if r.PostFormValue("confirm") != "1" {
		plan, err := h.svc.RewindPlan(r.Context(), who, id, to)
		if err != nil {
			return h.formFailed(w, r, who, "rewind", err)
		}
		p, err := h.runPage(r.Context(), who, id)
		if err != nil {
			return err
		}
		p.RewindPlan = newRewindPlan(to, plan)
		h.render(w, http.StatusOK, "run", p)
		return nil
	}
	// Confirmed: the files the plan marked as changed both by the run
	// and outside it are put back too (the person saw them listed).
	res, err := h.svc.Rewind(r.Context(), who, id, &api.RewindRun{To: to, Force: r.PostFormValue("force") == "1"})
	if err != nil {
		return h.formFailed(w, r, who, "rewind", err)
	}
	seq := strconv.FormatInt(res.Seq, 10)
	http.Redirect(w, r, "/ui/runs/"+url.PathEscape(id)+"?rewound="+seq+"#i"+seq, http.StatusSeeOther)
	return nil
}

// rewindPlan is the run page's confirmation of a rewind: the event
// asked, what the rewind restores (Note), the files it would change and
// those it leaves as they are (Kept: changed only outside the run).
type rewindPlan struct {
	Asked int64
	Note  string
	Files []api.PlannedChange
	Kept  []api.PlannedChange
	// Both counts the files changed both by the run and outside it: the
	// confirmation forces the rewind.
	Both int
}

func newRewindPlan(asked int64, p *api.RewindPlan) *rewindPlan {
	out := &rewindPlan{Asked: asked, Files: p.Files, Kept: p.Kept}
	for _, f := range p.Files {
		if f.Both {
			out.Both++
		}
	}
	switch {
	case p.Asked > 0 && p.To > p.Asked:
		out.Note = fmt.Sprintf("Event %d is in a step whose checkpoint is event %d: the files would be those of that checkpoint, with the effect of the calls up to event %d.", p.Asked, p.To, p.Asked)
	case p.Asked > 0 && p.Missing > 0:
		out.Note = fmt.Sprintf("The files would be those of the checkpoint of event %d, without the effects of %d calls that finished after it.", p.To, p.Missing)
	default:
		out.Note = fmt.Sprintf("The files would be those of the checkpoint of event %d.", p.To)
	}
	return out
}

// rewound is the run page's account of a rewind just made (the
// workspace.restored event Seq), with its undo: a rewind to the event
// before it.
type rewound struct {
	Seq, To, Undo int64
	By            string
	Files         []agent.FileChange
	More          int
	// Kept are the files it left as they were (changed only outside
	// the run since the checkpoint).
	Kept []string
	// Note says what became of the run (service.RewindNote).
	Note string
}

// rewoundAt reads the rewind journaled as event seq of run id (nil when
// that event is not one).
func (h *Handler) rewoundAt(ctx context.Context, id string, seq int64) *rewound {
	if seq < 2 {
		return nil
	}
	evs, err := h.rt.Store().Read(ctx, id, 1)
	if err != nil || int64(len(evs)) < seq || evs[seq-1].Seq != seq || evs[seq-1].Type != journal.WorkspaceRestored {
		return nil
	}
	v, err := agent.Decode(&evs[seq-1])
	if err != nil {
		return nil
	}
	r := v.(*agent.WorkspaceRestored)
	undo := checkpoint.UndoOf(evs, seq)
	if undo == 0 {
		undo = seq - 1
	}
	return &rewound{Seq: seq, To: r.To, Undo: undo, By: r.By, Files: r.Files, More: r.MoreFiles, Kept: r.Kept}
}

// uiStream is the timeline's live feed: Server-Sent Events whose "row"
// messages carry rendered table rows and whose "summary" messages carry
// the run's rendered header, after each burst of events and whenever the
// run starts or stops executing (which appends no event of its own).
// Browsers reconnect with Last-Event-ID and get only what they missed.
// When the session's token is revoked the feed sends "end" and stops
// (the page then reloads, to the sign-in page).
func (h *Handler) uiStream(w http.ResponseWriter, r *http.Request, who *caller) error {
	ctx := r.Context()
	id := r.PathValue("id")
	run, err := h.svc.Run(ctx, who, id)
	if err != nil {
		return err
	}
	from, _ := strconv.ParseInt(r.URL.Query().Get("from"), 10, 64)
	from, err = resumeFrom(r, from)
	if err != nil {
		return err
	}
	from = max(from, 1)
	out, err := startSSE(w)
	if err != nil {
		return err
	}
	rr, cr := newRowRenderer(id), convFor(&run, who, h.notYours(ctx, who, id) == "")
	// busy is closed when the run's place in the pool changes while the
	// last summary sent showed it executing or queued; nil otherwise.
	var busy <-chan struct{}
	var last []byte
	var lastCheckpoint, completed int64
	summary := func() {
		for {
			// Watch before reading, so that a change in between is not
			// missed: it closes the channel and the next turn sends again.
			ch := h.svc.Watch(id)
			run, err := h.svc.Run(ctx, who, id)
			if err != nil {
				return
			}
			var b bytes.Buffer
			view := &summaryView{Run: run, Elsewhere: h.elsewhere(ctx, run), LimitStop: h.limitStop(ctx, run), NotYours: h.notYours(ctx, who, id), CanWrite: token.HasScope(&who.Token, api.ScopeRunsWrite),
				CanDecide: token.HasScope(&who.Token, api.ScopeApprovalsWrite), Who: who, LastCheckpoint: lastCheckpoint, Completed: completed}
			if err := h.ui.t.ExecuteTemplate(&b, "summary", view); err == nil && !bytes.Equal(b.Bytes(), last) {
				_ = out.send("", "summary", b.Bytes())
				last = b.Bytes()
			}
			out.flush()
			busy = ch
			if ch != nil || !run.Executing && !run.Queued {
				return
			}
			// It became busy after the watch: watch again.
		}
	}
	// Follow from the first event so that the renderer knows the run
	// (step numbers, calls), but send only the rows from `from` on.
	write := func(e *journal.Event) error {
		row, items := rr.render(e), cr.render(e)
		if journal.KeepsStatus(e.Type) {
			lastCheckpoint = e.Seq
		}
		if e.Type == journal.RunCompleted {
			completed = e.Seq
		}
		if e.Seq < from {
			return nil
		}
		for _, it := range items {
			var b bytes.Buffer
			if err := h.ui.t.ExecuteTemplate(&b, "item", it); err != nil {
				return err
			}
			if err := out.send("", "item", b.Bytes()); err != nil {
				return err
			}
		}
		var b bytes.Buffer
		if err := h.ui.t.ExecuteTemplate(&b, "row", row); err != nil {
			return err
		}
		return out.send(strconv.FormatInt(e.Seq, 10), "row", b.Bytes())
	}
	// The model's text as it streams (live.go): "delta" messages, the
	// text escaped as the conversation's is, with the byte range of the
	// call's raw text it covers, so that the page can tell a reconnect's
	// restart (offset 0) from the next piece.
	var seen int64
	delta := func(d *api.Delta) error {
		b, err := json.Marshal(uiDelta{After: d.After, Call: d.ModelCall, Offset: d.Offset, End: d.End,
			Text: visible.String(d.Text), Tool: visible.String(d.Tool), Retry: d.Retry, CallID: d.CallID, Output: visible.String(d.Output)})
		if err != nil {
			return err
		}
		return out.send("", "delta", b)
	}
	// Follow from the first event (see write); the stream ends when the
	// session's token is revoked.
	return h.follow(ctx, out, id, 1, h.newTokenGuard(who), &follower{
		live: h.svc.Subscribe(id), delta: delta, seen: func() int64 { return seen },
		revoked: "event: end\ndata: unauthenticated\n\n",
		event: func(e *journal.Event, more bool) (bool, error) {
			if err := write(e); err != nil {
				return true, err
			}
			seen = e.Seq
			if !more && e.Seq >= from {
				summary()
			}
			return false, nil
		},
		wake:   func() <-chan struct{} { return busy },
		onWake: func() bool { summary(); return false },
	})
}

func (h *Handler) uiArtifact(w http.ResponseWriter, r *http.Request, who *caller) error {
	b, err := h.svc.Artifact(r.Context(), who, r.PathValue("id"), r.PathValue("path"))
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "sandbox")
	_, _ = w.Write(b)
	return nil
}

func (h *Handler) uiCancel(w http.ResponseWriter, r *http.Request, who *caller) error {
	rec := &discardWriter{h: http.Header{}}
	if err := h.cancelRun(rec, r, who); err != nil {
		return err
	}
	id := r.PathValue("id")
	http.Redirect(w, r, "/ui/runs/"+url.PathEscape(id), http.StatusSeeOther)
	return nil
}

func (h *Handler) uiResume(w http.ResponseWriter, r *http.Request, who *caller) error {
	// The limits go to the service as the API's do: it checks them
	// (service.CheckResume) and journals them in run.resumed.
	limits, problems := formLimits(r)
	if len(problems) > 0 {
		return h.formFailed(w, r, who, "resume", badRequest("%s", fieldsText(problems)))
	}
	if _, err := h.svc.Resume(r.Context(), who, r.PathValue("id"), &api.ResumeRun{Message: r.PostFormValue("message"), Limits: limits}); err != nil {
		return h.formFailed(w, r, who, "resume", err)
	}
	http.Redirect(w, r, "/ui/runs/"+url.PathEscape(r.PathValue("id")), http.StatusSeeOther)
	return nil
}

func (h *Handler) uiFork(w http.ResponseWriter, r *http.Request, who *caller) error {
	seq, err := formSeq(r, "seq")
	if err != nil {
		return h.formFailed(w, r, who, "fork", err)
	}
	// "start it" is checked by default; unchecked, the fork waits, paused
	// and "not started", with a Start button.
	req := &api.ForkRun{Seq: seq, Workspace: strings.TrimSpace(r.PostFormValue("workspace")), Start: r.PostFormValue("start") != ""}
	req.Message = strings.TrimSpace(r.PostFormValue("message"))
	run, err := h.svc.Fork(r.Context(), who, r.PathValue("id"), req)
	if err != nil {
		return h.formFailed(w, r, who, "fork", err)
	}
	http.Redirect(w, r, "/ui/runs/"+url.PathEscape(run.ID), http.StatusSeeOther)
	return nil
}

// formSeq reads a form's event field key, checked as the API checks its
// (service.CheckSeqGiven): empty is required, not a default.
func formSeq(r *http.Request, key string) (int64, error) {
	s := strings.TrimSpace(r.PostFormValue(key))
	if s == "" {
		return 0, service.CheckSeqGiven(key, nil)
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, badRequest("event %q is not a number", s)
	}
	return n, service.CheckSeqGiven(key, &n)
}

func (h *Handler) uiApprovals(w http.ResponseWriter, r *http.Request, who *caller) error {
	list, err := h.svc.Approvals(r.Context(), who)
	if err != nil {
		return err
	}
	auths, err := h.svc.AuthWaits(r.Context(), who)
	if err != nil {
		return err
	}
	if r.URL.Query().Get("fragment") != "" {
		return h.fragment(w, "inbox", &page{Approvals: list, AuthWaits: auths, Who: who, CanDecide: token.HasScope(&who.Token, api.ScopeApprovalsWrite)})
	}
	p := h.newPage(r.Context(), who, "Approvals", "approvals")
	p.Approvals, p.AuthWaits = list, auths
	h.render(w, http.StatusOK, "approvals", p)
	return nil
}

func (h *Handler) uiDecide(w http.ResponseWriter, r *http.Request, who *caller) error {
	var d policy.Effect
	remember := ""
	switch r.PostFormValue("decision") {
	case "allow":
		d = policy.Allow
	case "allow-run":
		d, remember = policy.Allow, policy.ScopeRun
	case "allow-agent":
		d, remember = policy.Allow, policy.ScopeAgent
	case "deny":
		d = policy.Deny // the service refuses it without a reason
	default:
		return badRequest("decision must be allow, allow-run, allow-agent or deny")
	}
	// The call id comes from the path, escaped as one segment by the
	// card's form; the form also carries it, and the two must agree, so a
	// path a browser normalised (a call id with "/../") decides nothing.
	id, call := r.PathValue("id"), r.PathValue("call")
	if c := r.PostFormValue("call"); c != call {
		return badRequest("the form is for call %q but was posted for call %q; reload the inbox", visible.String(c), visible.String(call))
	}
	// prefix: with an "Always", commands starting with these words (as
	// keel approvals approve --prefix and the API's prefix); the service
	// checks it.
	prefix := strings.Fields(r.PostFormValue("prefix"))
	if _, err := h.svc.Decide(r.Context(), who, &service.Decision{RunID: id, CallID: call, Effect: d, Decide: api.Decide{Reason: r.PostFormValue("reason"), Remember: remember, Prefix: prefix}}); err != nil {
		if r.PostFormValue("from") == "run" {
			r.SetPathValue("id", id)
			return h.formFailed(w, r, who, "decide", err)
		}
		return err
	}
	http.Redirect(w, r, "/ui/runs/"+url.PathEscape(id), http.StatusSeeOther)
	return nil
}

// uiConnect is the Connect button of a call waiting for an
// authorization: it starts the authorization and sends the browser to
// the authorization server, which sends it back to the callback.
func (h *Handler) uiConnect(w http.ResponseWriter, r *http.Request, who *caller) error {
	id, call := r.PathValue("id"), r.PathValue("call")
	if c := r.PostFormValue("call"); c != call {
		return badRequest("the form is for call %q but was posted for call %q; reload the page", visible.String(c), visible.String(call))
	}
	st, err := h.svc.BeginConnect(r.Context(), who, id, call)
	if err != nil {
		return err
	}
	http.Redirect(w, r, st.URL, http.StatusSeeOther)
	return nil
}

func (h *Handler) uiAgents(w http.ResponseWriter, r *http.Request, who *caller) error {
	p := h.newPage(r.Context(), who, "Agents", "agents")
	list, err := h.svc.Agents(r.Context(), who)
	if err != nil {
		e, _ := classify(err)
		p.AgentsErr = e.msg
	}
	p.Agents = list
	// Each agent's standing approvals (an approval card's "Always for
	// agent"), as GET /v1/agents/{id}/grants lists them.
	for _, a := range list {
		if a.Grants == 0 {
			continue
		}
		g, err := h.svc.Grants(r.Context(), who, a.Name)
		if err != nil {
			e, _ := classify(err)
			p.AgentsErr = e.msg
			break
		}
		if p.Grants == nil {
			p.Grants = map[string][]policy.Grant{}
		}
		p.Grants[a.Name] = g.Grants
	}
	h.render(w, http.StatusOK, "agents", p)
	return nil
}

// uiRestoreAgent undoes the revocation of a built-in agent or a
// sub-agent (the service's restore, as keel agents restore and POST
// /v1/agents/{id}/restore).
func (h *Handler) uiRestoreAgent(w http.ResponseWriter, r *http.Request, who *caller) error {
	if _, err := h.svc.RestoreAgent(r.Context(), who, r.PathValue("name"), r.PostFormValue("reason")); err != nil {
		return err
	}
	http.Redirect(w, r, "/ui/agents", http.StatusSeeOther)
	return nil
}

// uiUngrant revokes a standing approval of an agent (the service's, as
// keel agents ungrant and POST /v1/agents/{id}/grants/{grant}/revoke).
func (h *Handler) uiUngrant(w http.ResponseWriter, r *http.Request, who *caller) error {
	if _, err := h.svc.RevokeGrant(r.Context(), who, r.PathValue("name"), r.PathValue("grant"), r.PostFormValue("reason")); err != nil {
		return err
	}
	http.Redirect(w, r, "/ui/agents", http.StatusSeeOther)
	return nil
}

func (h *Handler) uiCreateAgent(w http.ResponseWriter, r *http.Request, who *caller) error {
	req := &api.CreateAgent{Name: r.PostFormValue("name"), Kind: r.PostFormValue("kind"), Description: r.PostFormValue("description")}
	if _, err := h.svc.CreateAgent(r.Context(), who, req); err != nil {
		return err
	}
	http.Redirect(w, r, "/ui/agents", http.StatusSeeOther)
	return nil
}

func (h *Handler) uiRevokeAgent(w http.ResponseWriter, r *http.Request, who *caller) error {
	if _, err := h.svc.RevokeAgent(r.Context(), who, r.PathValue("name"), r.PostFormValue("reason")); err != nil {
		return err
	}
	http.Redirect(w, r, "/ui/agents", http.StatusSeeOther)
	return nil
}

func (h *Handler) uiAudit(w http.ResponseWriter, r *http.Request, who *caller) error {
	p := h.newPage(r.Context(), who, "Audit", "audit")
	if r.Method == http.MethodPost {
		rep, err := h.svc.Audit(r.Context(), who, nil)
		if err != nil {
			return err
		}
		p.Report = rep
	}
	h.render(w, http.StatusOK, "audit", p)
	return nil
}

// discardWriter is a ResponseWriter for reusing an API handler's logic
// from a UI form handler that redirects instead.
type discardWriter struct{ h http.Header }

func (d *discardWriter) Header() http.Header         { return d.h }
func (d *discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (d *discardWriter) WriteHeader(int)             {}

// approvalAction renders the raw action a person approves: the action
// as the policy saw it (the command line, the URL, the tool and path),
// then the tool and its arguments, indented.
// Invisible and reordering characters are shown as escapes ([visible.String]).
func approvalAction(a api.Approval) string {
	var b bytes.Buffer
	if a.Action != "" {
		b.WriteString(a.Action)
		b.WriteString("\n\n")
	}
	b.WriteString(a.Tool + " ")
	if err := json.Indent(&b, a.Arguments, "", "  "); err != nil {
		b.Write(a.Arguments)
	}
	return visible.String(b.String())
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:4] + "…" + id[len(id)-6:]
	}
	return id
}

func clip(s string, n int) string {
	s = strings.TrimSpace(s)
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "…"
}

// groupDigits writes n with thousands separators.
var groupDigits = agent.Num

// uiDelta is a "delta" message of the run page's feed: api.Delta with
// the text and output escaped for display (visible.String; the page sets
// them as text, never as HTML); Offset and End are the raw bytes' range.
type uiDelta struct {
	After  int64  `json:"after"`
	Call   int    `json:"call"`
	Offset int    `json:"offset"`
	End    int    `json:"end"`
	Text   string `json:"text,omitempty"`
	Tool   string `json:"tool,omitempty"`
	Retry  string `json:"retry,omitempty"`
	CallID string `json:"call_id,omitempty"`
	Output string `json:"output,omitempty"`
}

// notYours says why who may not change run id (service.MayChange), ""
// when it may.
func (h *Handler) notYours(ctx context.Context, who *caller, id string) string {
	if err := h.svc.MayChange(ctx, who, id); err != nil {
		e, _ := classify(err)
		return e.msg
	}
	return ""
}
