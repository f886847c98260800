package service

import (
	_ "embed"
	"fmt"

	"github.com/keel-run/keel/policy"
)

//go:embed demo_policy.toml
var demoPolicySource []byte

// DemoPolicyName is the name recorded in the demo run's policy reference.
const DemoPolicyName = "keel:demo"

// DemoPolicy returns the policy of the demo run a server starts for
// api.CreateRun.Demo: Keel's default policy plus a rule that asks a
// person before the agent edits or writes a file, so that the demo shows
// an approval. Its test cases pass (TestDemoPolicy).
func DemoPolicy() *policy.Engine {
	e, err := policy.Parse(DemoPolicyName, demoPolicySource)
	if err != nil {
		panic(fmt.Sprintf("server: the demo policy does not compile: %v", err))
	}
	return e
}
