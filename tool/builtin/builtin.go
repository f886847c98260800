// Package builtin registers Keel's built-in tools in one call:
//
//	bash            run a command in the sandbox          ([shell])
//	read_file       read a text file, line-numbered, or   ([fs])
//	                list a directory
//	write_file      create or replace a file atomically   ([fs])
//	edit_file       replace exact text in a file          ([fs])
//	search_files    regex search, .gitignore-aware        ([fs])
//	fetch_url       HTTP GET of an allowlisted URL        ([web])
//	http_request    an API request, credentials injected  ([httpreq])
//	python          persistent Python interpreter          ([python])
//	todo            the model's plan                       ([todo])
//
// The file tools also register list_directory, retired and unlisted: it
// runs for the runs that were offered it, and no new run is. Each tool's
// package documents its arguments and can register it alone.
package builtin

import (
	"github.com/keel-run/keel/tool"
	"github.com/keel-run/keel/tool/builtin/fs"
	"github.com/keel-run/keel/tool/builtin/httpreq"
	"github.com/keel-run/keel/tool/builtin/python"
	"github.com/keel-run/keel/tool/builtin/shell"
	"github.com/keel-run/keel/tool/builtin/todo"
	"github.com/keel-run/keel/tool/builtin/web"
)

// Options configures the built-in tools. The zero value registers all of
// them with their defaults.
type Options struct {
	// Shell configures bash; nil means defaults.
	Shell *shell.Options
	// FS configures the file tools; nil means defaults.
	FS *fs.Options
	// Web configures fetch_url; nil means defaults.
	Web *web.Options
	// NoShell leaves bash out (for a run that must not run commands).
	NoShell bool
	// NoWeb leaves fetch_url out. Even when registered it fetches only
	// what the run's network policy allows, which by default is nothing.
	NoWeb bool
	// HTTP configures http_request (its credential vault); nil means
	// defaults: requests without credentials.
	HTTP *httpreq.Options
	// NoHTTP leaves http_request out. Like fetch_url, it reaches only
	// the hosts the run's network policy allows.
	NoHTTP bool
	// Python configures python; nil means defaults.
	Python *python.Options
	// NoPython leaves python out (no persistent interpreter).
	NoPython bool
	// NoTodo leaves todo (the plan) out.
	NoTodo bool
}

// Register adds the built-in tools to r. opts may be nil. It panics if r
// already has a tool of one of their names.
func Register(r *tool.Registry, opts *Options) {
	var o Options
	if opts != nil {
		o = *opts
	}
	fs.Register(r, o.FS)
	if !o.NoShell {
		shell.Register(r, o.Shell)
	}
	if !o.NoWeb {
		web.Register(r, o.Web)
	}
	if !o.NoHTTP {
		httpreq.Register(r, o.HTTP)
	}
	if !o.NoPython {
		// Its kernels end with the run's sandbox, and forget themselves.
		python.Register(r, o.Python)
	}
	if !o.NoTodo {
		todo.Register(r)
	}
}
