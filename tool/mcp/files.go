package mcp

import (
	"fmt"
	"maps"
	"strings"

	"github.com/keel-run/keel/tool"
	"github.com/keel-run/keel/tool/codefiles"
)

// A stdio server is code the run's own commands may be able to change:
// a script in the workspace, the modules it imports from there, a
// node_modules package, a virtual environment. Keel takes the digests
// of those files when it first starts the server in a run, and does not
// start it again (after it exited or was stopped, or on a resume) with
// other files unless a person approves: a hijacked model that rewrites
// the server and makes it restart would otherwise run its code with the
// server's environment, the secrets the operator gave the server
// included.

// FilesState prefixes the [tool.Tool].State of a stdio server's tool:
// the digest of the files the server was started with, or would be
// started with now.
const FilesState = "mcp-files:"

type (
	root    = codefiles.Root
	fileSet = codefiles.Set
)

var (
	serverRoots = codefiles.ServerRoots
	fingerprint = codefiles.Fingerprint
	changes     = codefiles.Changes
	journaled   = codefiles.Journaled
)

// maxJournaledFiles bounds the digests of single files journaled with a
// server's roots ([Client.FileDigests]): enough to name the files that
// changed on a resume; past it, the roots are named.
const maxJournaledFiles = 200

// stateOf is the set as a tool's State ("" when it has no root).
func stateOf(s *fileSet) string {
	if sum := s.Sum(); sum != "" {
		return FilesState + "sha256:" + sum
	}
	return ""
}

// Files returns the digests of what a stdio server runs from the
// workspace (by root: a file, or a directory's modules) as Keel first
// started it in this run, for run.created ([Options].Files of a later
// execution); nil when it runs nothing from the workspace.
func (c *Client) Files() map[string]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started == nil {
		return nil
	}
	return maps.Clone(c.started.Roots)
}

// FileDigests returns the digest of each file of [Client.Files] when
// there are at most 200 (nil otherwise), for run.created: a later
// execution names the files that changed, not only their roots.
func (c *Client) FileDigests() map[string]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.started.FileDigests(maxJournaledFiles)
}

// notStarted reports whether a stdio server has not been started in
// this process (its files changed since the run started it).
func (c *Client) notStarted() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.srv.Command) > 0 && c.session == nil && !c.closed
}

// pending reports whether a stdio server must be started before its
// next call runs (it never was in this process, it exited, or Keel
// stopped it). c.mu is held.
func (c *Client) pending() bool {
	return len(c.srv.Command) > 0 && (c.session == nil || c.proc == nil || !c.proc.alive())
}

// filesHold is the reason a call of a stdio server's tools waits for a
// person ("" when it need not): the server must be started for it, and
// the files it runs from the workspace changed since Keel started it.
func (c *Client) filesHold() string {
	if len(c.roots) == 0 {
		return ""
	}
	c.mu.Lock()
	pending, was := c.pending(), c.started
	c.mu.Unlock()
	if !pending || was == nil {
		return ""
	}
	now := fingerprint(c.opts.Workspace, c.roots)
	if now.Sum() == was.Sum() {
		return ""
	}
	env := "the server's environment"
	if len(c.srv.SecretEnv) > 0 {
		env = "the server's environment, which holds the run's secrets " + strings.Join(c.srv.SecretEnv, ", ")
	}
	return fmt.Sprintf("the files the MCP server %s runs from the workspace changed since Keel started it, and it must start again for this call: %s; starting it runs that code in the sandbox with %s. Approve to start it with these files (%s)",
		c.srv.Name, strings.Join(changes(was, now), ", "), env, stateOf(now))
}

// filesState is the State of a stdio server's tools: the files it runs
// with, or would start with now. A call approved when they were other
// files does not run.
func (c *Client) filesState(*tool.Request) string {
	c.mu.Lock()
	pending, was := c.pending(), c.started
	c.mu.Unlock()
	if !pending || was == nil {
		return stateOf(was)
	}
	return stateOf(fingerprint(c.opts.Workspace, c.roots))
}

// mayStart is asked before a call starts the server: nil when the files
// it runs from the workspace are those it was started with, or those a
// person approved for this very call ([tool.Request].Approved); else
// the call's result, and the server is not started.
func (c *Client) mayStart(req *tool.Request) *tool.Result {
	if len(c.roots) == 0 {
		return nil
	}
	now := fingerprint(c.opts.Workspace, c.roots)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started == nil || now.Sum() == c.started.Sum() {
		return nil
	}
	if req.Approved != "" && req.Approved == stateOf(now) {
		c.started = now
		return nil
	}
	return tool.Errorf("not called: the files the MCP server %s runs from the workspace changed since Keel started it (%s), and it is not running; Keel starts it again with other files only when a person approves them. A new call of its tools asks a person for that approval (in a run nobody attends, none comes).",
		c.srv.Name, strings.Join(changes(c.started, now), ", "))
}

// Started reports whether the server runs (a stdio server whose files
// changed since the run started it is not started by [Connect]).
func (c *Client) Started() bool { return !c.notStarted() }
