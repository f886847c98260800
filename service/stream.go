package service

import "github.com/keel-run/keel/journal"

// ActionStream is the system stream (see journal.SystemPrefix) that
// holds one api.action event per state-changing API request: who did
// what to which run.
const ActionStream = journal.SystemPrefix + "api"

// APIAction is the event type of the action stream.
const APIAction journal.Type = "api.action"
