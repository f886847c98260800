// Package keel is the root of the Keel agent runtime module. It holds no
// code of its own: the library lives in the packages below it (agent,
// journal, model, tool, sandbox, policy), the command in cmd/keel. Its
// tests are meta tests that keep the module honest: every package has a
// doc comment, and the dependency boundaries of docs/architecture.md hold.
package keel
