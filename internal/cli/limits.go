package cli

import (
	"fmt"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/spf13/pflag"

	"github.com/keel-run/keel/sandbox"
	"github.com/keel-run/keel/service"
)

// defaultModelRetries is --model-retries' default: with the SDKs'
// exponential backoff (0.5 s doubling, at most 8 s, or the provider's
// Retry-After) four retries wait about 7.5 s in all before a step fails.
const defaultModelRetries = 4

// limitFlags are the resource-limit flags of `keel run`.
type limitFlags struct {
	memory, fileSize, output string
	processes, openFiles     int
	cpu                      float64
	cpuTime                  time.Duration
}

func (l *limitFlags) register(fl *pflag.FlagSet) {
	fl.StringVar(&l.memory, "memory", flagSize(service.DefaultMemory), "memory limit of each command (e.g. 512MiB, 4GiB; 0: none)")
	fl.IntVar(&l.processes, "processes", service.DefaultProcesses, "process limit of each command (0: none)")
	fl.Float64Var(&l.cpu, "cpus", 0, "CPU share of each command in cores, e.g. 1.5 (0: no limit)")
	fl.DurationVar(&l.cpuTime, "cpu-time", 0, "CPU time limit of each command (0: none)")
	fl.StringVar(&l.fileSize, "file-size", flagSize(service.DefaultFileSize), "largest file a command may write (0: none)")
	fl.IntVar(&l.openFiles, "open-files", service.DefaultOpenFiles, "open file limit of each command (0: none)")
	fl.StringVar(&l.output, "output-limit", flagSize(service.DefaultOutput), "bytes of output after which a command is killed (0: none)")
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
	// The service checks them, as for every front end.
	lim.Processes, lim.OpenFiles, lim.CPUShare, lim.CPUTime = l.processes, l.openFiles, l.cpu, l.cpuTime
	return lim, nil
}

// flagSize writes a size in bytes as a flag value: 4GiB, 16MiB, 100.
func flagSize(n int64) string {
	switch {
	case n != 0 && n%(1<<30) == 0:
		return fmt.Sprintf("%dGiB", n>>30)
	case n != 0 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	}
	return fmt.Sprint(n)
}
