package builder

import (
	"encoding/json"
	"fmt"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/assemble"
	"github.com/keel-run/keel/model/codeact"
	"github.com/keel-run/keel/service"
)

// ContextSettings are a new run's settings of the context window,
// compaction, memory files and the action mode (keel run's flags, or a
// request's; docs/context.md).
type ContextSettings struct {
	// Window is the model's context window in tokens: 0 takes the model
	// family's, a negative one never compacts.
	Window int
	// Threshold is the fraction of the window past which the context is
	// compacted, in (0, 1].
	Threshold float64
	// HandoffAfter continues in a fresh context after that many
	// compactions (0: never), carrying the notes of NotesFile.
	HandoffAfter int
	NotesFile    string
	// ActionMode is how the model acts: "tools" ("" too) or "text".
	ActionMode string
	// NoMemory leaves out the memory files and the memory tools.
	NoMemory bool
	// Creator is the id of the API token that creates the run ("" for
	// the command line): memory files a run of another token wrote are
	// loaded as untrusted (assemble.ReadMemory).
	Creator string
}

// Apply fixes the context configuration, memory and action mode in c.
// modelName is the model's name for the family table (the recorded
// model of a replay). A window too small for the run's fixed part is a
// usage error (see assemble.CheckContextWindow).
func (f *ContextSettings) Apply(a *assemble.Assembler, c *agent.RunCreated, modelName string) error {
	if f.Threshold <= 0 || f.Threshold > 1 {
		return usagef("--compact-threshold %g: want a fraction in (0, 1]", f.Threshold)
	}
	if f.HandoffAfter < 0 {
		return usagef("--handoff-after %d: want 0 or more", f.HandoffAfter)
	}
	switch f.ActionMode {
	case "tools", "":
	case "text":
		// A run in text mode completes only through its marker: the
		// convention of mini-swe-agent unless the user set another.
		if c.CompletionMarker == "" {
			c.CompletionMarker = service.DefaultCompletionMarker
		}
		c.FormatError = codeact.FormatError(nil, c.CompletionMarker)
	default:
		return usagef("--action-mode %q: want tools or text", f.ActionMode)
	}
	if !f.NoMemory {
		max := assemble.DefaultMemoryBytes
		if a.Config != nil && a.Config.MemoryMaxBytes > 0 {
			max = a.Config.MemoryMaxBytes
		}
		mem, untrusted, warns, err := assemble.ReadMemory(a.Home, c.Workspace, f.Creator, max)
		if err != nil {
			return err
		}
		for _, w := range warns {
			if a.Notes != nil {
				fmt.Fprintln(a.Notes, "keel: "+w)
			}
		}
		c.Memory, c.MemoryUntrusted = mem, untrusted
	}
	fam := agent.LookupFamily(modelName)
	if f.Window >= 0 {
		w := f.Window
		if w == 0 {
			w = fam.Window
		}
		c.Context = &agent.ContextConfig{Window: w, Threshold: f.Threshold, Family: fam.Name, HandoffAfter: f.HandoffAfter, NotesFile: f.NotesFile}
		probe := *c
		if len(probe.Tools) == 0 {
			// The tools are recorded when the run is wired; they are the
			// same set, estimated as the journal will hold them
			// (run.created re-encodes their schemas).
			r := assemble.ToolRegistry(agent.DefaultSettings(), assemble.NetworkTools(c))
			if !f.NoMemory {
				AddMemoryTools(r, &agent.RunCreated{Recall: &agent.Recall{}}, nil)
			}
			b, err := json.Marshal(agent.ToolInfos(r))
			if err == nil {
				err = json.Unmarshal(b, &probe.Tools)
			}
			if err != nil {
				return fmt.Errorf("tool schemas: %w", err)
			}
		}
		if err := assemble.CheckContextWindow(&probe, w, f.Window == 0); err != nil {
			return err
		}
	}
	return nil
}
