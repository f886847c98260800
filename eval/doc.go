// Package eval measures agents from their journals: suites of cases
// (a task, a workspace, the checks that decide success), trials that are
// ordinary journaled runs tagged with their suite, case, trial and
// configuration, a classification of each trial from its journal (passed,
// failed its checks, hit a limit, or an infrastructure error that is
// retried and reported apart), and the statistics a comparison needs:
// success rate with a Wilson 95% interval, pass@k and pass^k, tool-call
// validity, tokens, cost, wall time and steps; [Compare] says whether a
// difference between two configurations exceeds the noise of repeated
// trials. Reports are text, JSON and a static HTML page with inline SVG
// plots.
//
// Suites are read from an [fs.FS] ([Load]): a directory of case files
// (TOML), SWE-bench-style instance directories (spec.json with recorded
// trajectories) and Harbor task directories (task.toml, instruction.md,
// tests/). [Runner] executes trials through an [Executor] (the command
// line's, which creates and executes each run in this process with Keel's
// sandbox, policy and model) and reads each trial's journal from a
// [journal.Store]. [Trajectory] turns a journal into a recording the
// replay model answers from (keel eval freeze, keel runs replay), [ATIF]
// into the Agent Trajectory Interchange Format, and [Diverge] finds the
// first event where a re-execution differs from its original.
//
// See docs/eval.md.
package eval
