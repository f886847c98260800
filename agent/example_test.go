package agent_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/mem"
	"github.com/keel-run/keel/model/modeltest"
	"github.com/keel-run/keel/tool"
	"github.com/keel-run/keel/tool/builtin/fs"
)

// A run from the library alone: a journal (here in memory; journal/sqlite
// for one that survives the process), a model (here scripted; model/openai
// or model/anthropic for a real one), tools and a workspace. Execute
// drives the loop until the run ends; everything it did is in the
// journal, and executing the run again after a crash resumes it.
func ExampleRuntime() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "keel-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ws, err := tool.NewWorkspace(dir, "/workspace", nil)
	if err != nil {
		log.Fatal(err)
	}
	defer ws.Close()

	tools := tool.NewRegistry()
	fs.Register(tools, nil) // read_file, write_file, edit_file, list_directory, search_files
	m := modeltest.NewScripted([]modeltest.Turn{
		modeltest.Calls("I will write the note.", modeltest.Call("c1", "write_file", map[string]string{"path": "note.txt", "content": "hello\n"})),
		modeltest.Text("The note is written."),
	}, nil)

	store := mem.New()
	rt := agent.NewRuntime(store, nil)
	id, err := rt.Create(ctx, &agent.RunCreated{Task: "Write hello into note.txt.", Tools: agent.ToolInfos(tools)})
	if err != nil {
		log.Fatal(err)
	}
	out, err := rt.Execute(ctx, id, &agent.ExecParams{Wiring: agent.Wiring{Model: m, Tools: tools, Env: &tool.Env{Workspace: ws}}})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s (%s): %s\n", out.Status, out.End.Reason, out.End.Output)
	note, _ := os.ReadFile(filepath.Join(dir, "note.txt"))
	fmt.Printf("note.txt: %q\n", note)

	events, err := journal.ReadVerified(ctx, store, id)
	if err != nil {
		log.Fatal(err)
	}
	for _, e := range events {
		fmt.Println(e.Seq, e.Type)
	}
	// Output:
	// completed (answer): The note is written.
	// note.txt: "hello\n"
	// 1 run.created
	// 2 model.responded
	// 3 gate.decided
	// 4 tool.started
	// 5 tool.finished
	// 6 model.responded
	// 7 run.completed
}
