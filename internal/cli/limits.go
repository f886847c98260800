package cli

import (
	"time"

	"github.com/dustin/go-humanize"
	"github.com/spf13/pflag"

	"github.com/keel-run/keel/sandbox"
)

// Default resource limits of every sandboxed command: generous for builds
// and test suites, small enough that a runaway command cannot take the
// machine down.
const (
	defaultMemory    = "4GiB"
	defaultProcesses = 1024
	defaultFileSize  = "8GiB"
	defaultOpenFiles = 4096
	defaultOutput    = "1GiB"
)

// Default limits of a run (docs/limits.md says why): high enough that a
// run of hours finishes (real coding runs take 100-190 model calls and
// 1-7 million tokens), low enough that a runaway stops within a working
// day and a bounded bill. Loop detection (agent.DefaultMaxRepeats) stops
// a model repeating itself long before any of them.
// defaultModelRetries is --model-retries' default: with the SDKs'
// exponential backoff (0.5 s doubling, at most 8 s, or the provider's
// Retry-After) four retries wait about 7.5 s in all before a step fails.
const defaultModelRetries = 4

const (
	defaultMaxSteps  = 500
	defaultMaxTokens = 100_000_000
	defaultMaxCost   = 50.0
	defaultTimeout   = 12 * time.Hour
)

// limitFlags are the resource-limit flags of `keel run`.
type limitFlags struct {
	memory, fileSize, output string
	processes, openFiles     int
	cpu                      float64
	cpuTime                  time.Duration
}

func (l *limitFlags) register(fl *pflag.FlagSet) {
	fl.StringVar(&l.memory, "memory", defaultMemory, "memory limit of each command (e.g. 512MiB, 4GiB; 0: none)")
	fl.IntVar(&l.processes, "processes", defaultProcesses, "process limit of each command (0: none)")
	fl.Float64Var(&l.cpu, "cpus", 0, "CPU share of each command in cores, e.g. 1.5 (0: no limit)")
	fl.DurationVar(&l.cpuTime, "cpu-time", 0, "CPU time limit of each command (0: none)")
	fl.StringVar(&l.fileSize, "file-size", defaultFileSize, "largest file a command may write (0: none)")
	fl.IntVar(&l.openFiles, "open-files", defaultOpenFiles, "open file limit of each command (0: none)")
	fl.StringVar(&l.output, "output-limit", defaultOutput, "bytes of output after which a command is killed (0: none)")
}

func (l *limitFlags) parse() (sandbox.Limits, error) {
	size := func(name, v string) (int64, error) {
		if v == "" || v == "0" {
			return 0, nil
		}
		n, err := humanize.ParseBytes(v)
		if err != nil {
			return 0, usagef("--%s %q: want a size such as 512MiB or 4GiB", name, v)
		}
		return int64(n), nil
	}
	var lim sandbox.Limits
	var err error
	if lim.Memory, err = size("memory", l.memory); err != nil {
		return lim, err
	}
	if lim.FileSize, err = size("file-size", l.fileSize); err != nil {
		return lim, err
	}
	if lim.OutputBytes, err = size("output-limit", l.output); err != nil {
		return lim, err
	}
	if l.processes < 0 || l.openFiles < 0 || l.cpu < 0 || l.cpuTime < 0 {
		return lim, usagef("limits must not be negative")
	}
	lim.Processes, lim.OpenFiles, lim.CPUShare, lim.CPUTime = l.processes, l.openFiles, l.cpu, l.cpuTime
	if lim.Memory != 0 && lim.Memory < 16<<20 {
		return lim, usagef("--memory %s is too small to start a shell (minimum 16MiB)", l.memory)
	}
	return lim, nil
}
