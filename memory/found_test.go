package memory_test

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/keel-run/keel/journal/sqlite"
	"github.com/keel-run/keel/memory"
	"github.com/keel-run/keel/tool"
)

// ParseSearch reads back what memory_search returned (its entries' ids,
// scopes and texts, also a text of several lines) and HideSearch hides
// the entries asked for, whole, leaving the others as the tool wrote
// them; WrittenIDs names what memory_write kept and superseded. Readers
// of a run's journal rely on these to know what the run holds, so they
// are tested on the tools' own output.
func TestFoundInResults(t *testing.T) {
	ctx := t.Context()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "keel.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	m := memory.New(st, nil)
	mine, err := m.Write(ctx, &memory.WriteParams{Scope: memory.AgentScope("bot"), Text: "deploy notes:\nrun make ship\n\nthen tag the release",
		Source: memory.Source{Run: "r0", Call: "c0"}})
	if err != nil {
		t.Fatal(err)
	}
	team, err := m.Write(ctx, &memory.WriteParams{Scope: memory.TeamScope, Text: "deploy from the staging host", Source: memory.Source{By: "ann"}})
	if err != nil {
		t.Fatal(err)
	}
	reg := tool.NewRegistry()
	memory.AddTools(reg, &memory.ToolParams{Store: m, Scopes: memory.Scopes{Agent: "bot"}})
	run := func(name, args string) string {
		t.Helper()
		res, err := reg.Run(ctx, name, &tool.Request{RunID: "r1", CallID: "c1", Arguments: []byte(args), Principal: "bot", Env: &tool.Env{}})
		if err != nil || res.IsError {
			t.Fatalf("%s %s = %+v, %v", name, args, res, err)
		}
		return res.Content
	}

	content := run(memory.SearchTool, `{"query":"deploy"}`)
	found := memory.ParseSearch(content)
	slices.SortFunc(found, func(a, b memory.Found) int { return strings.Compare(a.ID, b.ID) })
	want := []memory.Found{{ID: mine.ID, Scope: mine.Scope, Text: mine.Text}, {ID: team.ID, Scope: team.Scope, Text: team.Text}}
	slices.SortFunc(want, func(a, b memory.Found) int { return strings.Compare(a.ID, b.ID) })
	if !slices.Equal(found, want) {
		t.Fatalf("ParseSearch =\n%+v\nwant\n%+v\nof\n%s", found, want, content)
	}
	hidden, changed := memory.HideSearch(content, func(f memory.Found) bool { return f.ID == mine.ID }, "hidden", "NOTE")
	if !changed || strings.Contains(hidden, mine.ID) || strings.Contains(hidden, "ship") || strings.Contains(hidden, "tag the release") ||
		!strings.Contains(hidden, "[memory:hidden] (agent:bot;") || !strings.Contains(hidden, "> NOTE\n") ||
		!strings.Contains(hidden, team.ID) || !strings.Contains(hidden, "> "+team.Text+"\n") {
		t.Errorf("HideSearch hid %s:\n%s\nof\n%s", mine.ID, hidden, content)
	}
	if same, changed := memory.HideSearch(content, func(memory.Found) bool { return false }, "hidden", "NOTE"); changed || same != content {
		t.Errorf("HideSearch hiding nothing changed the result:\n%s", same)
	}

	kept := run(memory.WriteTool, `{"text":"deploy notes: make ship, then tag","supersedes":"`+mine.ID+`"}`)
	ids := memory.WrittenIDs(kept)
	if len(ids) != 2 || ids[1] != mine.ID || !strings.HasPrefix(ids[0], "mem_") || ids[0] == mine.ID {
		t.Errorf("WrittenIDs(%q) = %v, want the new entry's and %s", kept, ids, mine.ID)
	}
}
