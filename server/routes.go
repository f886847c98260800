package server

import "github.com/keel-run/keel/server/api"

// routes is the API. The OpenAPI document (openapi.json) describes exactly
// these; TestOpenAPIMatchesRoutes keeps the two in step.
var routes = []route{
	{"GET", "/v1/openapi.json", "", (*Handler).openAPI},
	{"GET", "/v1/whoami", api.ScopeRunsRead, (*Handler).whoami},

	{"GET", "/v1/runs", api.ScopeRunsRead, (*Handler).listRuns},
	{"POST", "/v1/runs", api.ScopeRunsWrite, (*Handler).createRun},
	{"GET", "/v1/runs/{id}", api.ScopeRunsRead, (*Handler).getRun},
	{"POST", "/v1/runs/{id}/cancel", api.ScopeRunsWrite, (*Handler).cancelRun},
	{"POST", "/v1/runs/{id}/resume", api.ScopeRunsWrite, (*Handler).resumeRun},
	{"POST", "/v1/runs/{id}/fork", api.ScopeRunsWrite, (*Handler).forkRun},
	{"POST", "/v1/runs/{id}/rewind", api.ScopeRunsWrite, (*Handler).rewindRun},
	{"GET", "/v1/runs/{id}/events", api.ScopeRunsRead, (*Handler).runEvents},
	{"GET", "/v1/runs/{id}/artifacts/{path...}", api.ScopeRunsRead, (*Handler).artifact},
	{"GET", "/v1/runs/{id}/diff", api.ScopeRunsRead, (*Handler).runDiff},
	{"GET", "/v1/runs/{id}/tree", api.ScopeRunsRead, (*Handler).runTree},

	{"GET", "/v1/approvals", api.ScopeRunsRead, (*Handler).listApprovals},
	{"POST", "/v1/runs/{id}/approvals/{call}/approve", api.ScopeApprovalsWrite, (*Handler).approve},
	{"POST", "/v1/runs/{id}/approvals/{call}/deny", api.ScopeApprovalsWrite, (*Handler).deny},
	{"GET", "/v1/runs/{id}/approvals/{call}/diff", api.ScopeRunsRead, (*Handler).proposedEdit},

	{"GET", "/v1/auth/waits", api.ScopeRunsRead, (*Handler).listAuthWaits},
	{"POST", "/v1/runs/{id}/auth/{call}/connect", api.ScopeApprovalsWrite, (*Handler).startConnect},
	{"GET", "/v1/auth/callback", "", (*Handler).authCallback},
	{"GET", "/v1/inputs", api.ScopeRunsRead, (*Handler).listInputs},
	{"POST", "/v1/runs/{id}/inputs/{input}/answer", api.ScopeApprovalsWrite, (*Handler).answerInput},

	{"GET", "/v1/agents", api.ScopeRunsRead, (*Handler).listAgents},
	{"POST", "/v1/agents", api.ScopeAdmin, (*Handler).createAgent},
	{"POST", "/v1/agents/{id}/revoke", api.ScopeAdmin, (*Handler).revokeAgent},
	{"POST", "/v1/agents/{id}/restore", api.ScopeAdmin, (*Handler).restoreAgent},
	{"GET", "/v1/agents/{id}/grants", api.ScopeRunsRead, (*Handler).listGrants},
	{"POST", "/v1/agents/{id}/grants/{grant}/revoke", api.ScopeApprovalsWrite, (*Handler).revokeGrant},

	{"POST", "/v1/audit/verify", api.ScopeRunsRead, (*Handler).verifyAudit},
	{"GET", "/v1/cost", api.ScopeAdmin, (*Handler).cost},
	{"POST", "/v1/policy/check", api.ScopeRunsRead, (*Handler).checkPolicy},

	{"GET", "/v1/schedules", api.ScopeRunsRead, (*Handler).listSchedules},
	{"POST", "/v1/schedules", api.ScopeRunsWrite, (*Handler).createSchedule},
	{"GET", "/v1/schedules/{id}", api.ScopeRunsRead, (*Handler).getSchedule},
	{"DELETE", "/v1/schedules/{id}", api.ScopeRunsWrite, (*Handler).deleteSchedule},
	{"GET", "/v1/schedules/{id}/fires", api.ScopeRunsRead, (*Handler).listFires},
	{"POST", "/v1/schedules/{id}/pause", api.ScopeRunsWrite, (*Handler).pauseSchedule},
	{"POST", "/v1/schedules/{id}/resume", api.ScopeRunsWrite, (*Handler).resumeSchedule},
	{"POST", "/v1/schedules/{id}/trigger", api.ScopeRunsWrite, (*Handler).triggerSchedule},
	{"POST", "/v1/schedules/{id}/backfill", api.ScopeRunsWrite, (*Handler).backfillSchedule},

	{"GET", "/v1/triggers", api.ScopeRunsRead, (*Handler).listTriggers},
	{"POST", "/v1/triggers", api.ScopeRunsWrite, (*Handler).createTrigger},
	{"GET", "/v1/triggers/{id}", api.ScopeRunsRead, (*Handler).getTrigger},
	{"DELETE", "/v1/triggers/{id}", api.ScopeRunsWrite, (*Handler).deleteTrigger},
	// A webhook's delivery: no token, the signature authenticates it.
	{"POST", "/v1/triggers/{id}", "", (*Handler).deliver},
	{"GET", "/v1/triggers/{id}/deliveries", api.ScopeRunsRead, (*Handler).listDeliveries},
	{"POST", "/v1/triggers/{id}/pause", api.ScopeRunsWrite, (*Handler).pauseTrigger},
	{"POST", "/v1/triggers/{id}/resume", api.ScopeRunsWrite, (*Handler).resumeTrigger},

	{"GET", "/v1/sinks", api.ScopeRunsRead, (*Handler).listSinks},
	{"GET", "/v1/notifications", api.ScopeRunsRead, (*Handler).listNotifications},

	{"GET", "/v1/memory", api.ScopeRunsRead, (*Handler).listMemory},
	{"GET", "/v1/memory/{id}", api.ScopeRunsRead, (*Handler).getMemory},
	{"POST", "/v1/memory/{id}/edit", api.ScopeApprovalsWrite, (*Handler).editMemory},
	{"POST", "/v1/memory/{id}/forget", api.ScopeApprovalsWrite, (*Handler).forgetMemory},
	{"GET", "/v1/skills/candidates", api.ScopeRunsRead, (*Handler).listSkillCandidates},
	{"GET", "/v1/skills", api.ScopeRunsRead, (*Handler).listSkills},
	{"POST", "/v1/skills", api.ScopeAdmin, (*Handler).installSkill},
	{"GET", "/v1/skills/{name}", api.ScopeRunsRead, (*Handler).getSkill},

	{"GET", "/v1/evals", api.ScopeAdmin, (*Handler).listEvals},
	{"GET", "/v1/evals/{id}", api.ScopeAdmin, (*Handler).getEval},

	{"GET", "/v1/tokens", api.ScopeAdmin, (*Handler).listTokens},
	{"POST", "/v1/tokens", api.ScopeAdmin, (*Handler).createToken},
	{"POST", "/v1/tokens/{id}/revoke", api.ScopeAdmin, (*Handler).revokeToken},
}
