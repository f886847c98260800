// Package fs provides Keel's file tools: read_file (which lists a
// directory), write_file, edit_file and search_files, and, unlisted,
// list_directory, retired: it runs for the runs that were offered it
// (see [tool.Tool.Unlisted]). They run on the host side,
// in Go, over the run's [tool.Workspace], never through the shell.
//
// Every path goes through [tool.Workspace.Resolve] (reads) or
// [tool.Workspace.ResolveWrite] (writes): symbolic links are followed, a
// path whose real location is outside the workspace is refused (dangling
// links and new files under linked directories included), writes to
// protected paths are refused, and names are used byte for byte (NFC and
// NFD spellings are different files). Files are then opened only through
// the workspace's [os.Root], so a link swapped in between the check and
// the use cannot escape.
//
// Writes are atomic: the new content goes to a temporary file in the same
// directory, is synced and renamed over the old file, so a full disk or a
// permission error leaves the old file intact and becomes a tool error.
// The mode of an existing file is kept.
//
// Arguments (JSON objects):
//
//	read_file      {"path": string, "offset"?: integer ≥ 1, "limit"?: integer ≥ 1}
//	write_file     {"path": string, "content": string}
//	edit_file      {"path": string, "old_string": string, "new_string": string, "replace_all"?: boolean}
//	list_directory {"path"?: string, "depth"?: integer 1-10} (unlisted)
//	search_files   {"pattern": string, "path"?: string, "glob"?: string}
package fs

import (
	"encoding/json"
	"errors"
	iofs "io/fs"
	"net/http"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/keel-run/keel/tool"
)

// Tool names, as the model calls them.
const (
	ReadName   = "read_file"      // read a text file, line-numbered
	WriteName  = "write_file"     // create or replace a file atomically
	EditName   = "edit_file"      // replace exact text in a file
	ListName   = "list_directory" // list a directory (unlisted)
	SearchName = "search_files"   // regex search of file contents
)

// Defaults of [Options].
const (
	DefaultReadLines      = 2000     // lines per read_file page
	DefaultMaxLineChars   = 2000     // characters shown of one line
	DefaultMaxEditBytes   = 10 << 20 // largest file edit_file loads
	DefaultMaxListEntries = 500      // entries a listing shows
	DefaultMaxMatches     = 200      // matching lines search_files shows
	DefaultMaxSearchBytes = 10 << 20 // largest file search_files reads
)

// Options configures the file tools. The zero value is valid; each zero
// field takes its default.
type Options struct {
	// ReadLines is how many lines read_file shows when the call gives no
	// limit; default [DefaultReadLines]. The result bound
	// ([tool.Env].MaxResultChars) may cut a page shorter.
	ReadLines int
	// MaxLineChars clips longer lines in read_file and search_files
	// views; default [DefaultMaxLineChars].
	MaxLineChars int
	// MaxEditBytes is the largest file edit_file loads; default
	// [DefaultMaxEditBytes] (10 MiB).
	MaxEditBytes int64
	// MaxListEntries bounds a directory's listing; default
	// [DefaultMaxListEntries].
	MaxListEntries int
	// MaxMatches bounds the matching lines search_files shows (it still
	// counts them all); default [DefaultMaxMatches].
	MaxMatches int
	// MaxSearchBytes is the largest file search_files reads; larger files
	// are skipped and counted; default [DefaultMaxSearchBytes] (10 MiB).
	MaxSearchBytes int64
}

func (o *Options) withDefaults() Options {
	var c Options
	if o != nil {
		c = *o
	}
	if c.ReadLines <= 0 {
		c.ReadLines = DefaultReadLines
	}
	if c.MaxLineChars <= 0 {
		c.MaxLineChars = DefaultMaxLineChars
	}
	if c.MaxEditBytes <= 0 {
		c.MaxEditBytes = DefaultMaxEditBytes
	}
	if c.MaxListEntries <= 0 {
		c.MaxListEntries = DefaultMaxListEntries
	}
	if c.MaxMatches <= 0 {
		c.MaxMatches = DefaultMaxMatches
	}
	if c.MaxSearchBytes <= 0 {
		c.MaxSearchBytes = DefaultMaxSearchBytes
	}
	return c
}

// Register adds the five file tools to r. opts may be nil. It panics if r
// already has a tool of one of their names.
func Register(r *tool.Registry, opts *Options) {
	o := opts.withDefaults()
	for _, t := range Tools(&o) {
		r.Add(t.Tool, t.Handler)
	}
}

// Entry is a tool with its handler, as [Tools] returns them.
type Entry struct {
	// Tool describes the tool.
	Tool *tool.Tool
	// Handler runs a validated call.
	Handler tool.Handler
}

// Tools returns the file tools without registering them, sorted by name,
// for callers that wrap handlers. opts may be nil.
func Tools(opts *Options) []Entry {
	o := opts.withDefaults()
	return []Entry{
		{editTool(), (&editor{o}).handle},
		{listTool(), (&lister{o}).handle},
		{readTool(), (&reader{o}).handle},
		{searchTool(), (&searcher{o}).handle},
		{writeTool(), (&writer{o}).handle},
	}
}

// pathScope returns a Scope func that reports the "path" argument, or def
// when it is absent.
func pathScope(def string) func(json.RawMessage) []string {
	return func(args json.RawMessage) []string {
		var a struct {
			Path string `json:"path"`
		}
		json.Unmarshal(args, &a)
		if a.Path == "" {
			if def == "" {
				return []string{}
			}
			return []string{def}
		}
		return []string{a.Path}
	}
}

// maxChars is the result bound of a call.
func maxChars(env *tool.Env) int {
	if env != nil && env.MaxResultChars > 0 {
		return env.MaxResultChars
	}
	return tool.DefaultMaxResultChars
}

// workspace returns the call's workspace or an error result.
func workspace(req *tool.Request) (*tool.Workspace, *tool.Result) {
	if req.Env == nil || req.Env.Workspace == nil {
		return nil, tool.Errorf("no workspace is configured for this run")
	}
	return req.Env.Workspace, nil
}

// describeErr turns a file-system error into words for the model: the
// cause without Go's operation prefixes, and a hint for the common ones.
func describeErr(err error) string {
	var errno syscall.Errno
	var pe *iofs.PathError
	msg := err.Error()
	if errors.As(err, &pe) {
		msg = pe.Err.Error()
	}
	switch {
	case errors.Is(err, tool.ErrOutside):
		return msg + "; file tools work only inside the workspace"
	case errors.Is(err, tool.ErrProtected):
		return msg
	case errors.Is(err, tool.ErrHidden):
		return "the run's policy forbids this path ([paths] deny); it is not readable or writable by any tool"
	case errors.Is(err, iofs.ErrNotExist):
		return "no such file or directory"
	case errors.Is(err, iofs.ErrPermission):
		return "permission denied"
	case errors.As(err, &errno):
		switch errno {
		case syscall.ENOSPC:
			return "no space left on device"
		case syscall.EDQUOT:
			return "disk quota exceeded"
		case syscall.EROFS:
			return "read-only file system"
		case syscall.EFBIG:
			return "file too large for this file system or limit"
		case syscall.ENAMETOOLONG:
			return "file name too long"
		}
	}
	return msg
}

// isBinary reports whether sample (the start of a file) looks binary: it
// has a NUL byte, or more than 30% of it is invalid UTF-8 or control
// characters other than whitespace.
func isBinary(sample []byte) bool {
	if len(sample) == 0 {
		return false
	}
	bad := 0
	for i := 0; i < len(sample); {
		c := sample[i]
		if c == 0 {
			return true
		}
		if c < 0x80 {
			if c < 0x20 && c != '\n' && c != '\r' && c != '\t' && c != '\f' && c != '\v' && c != 0x1b && c != '\b' {
				bad++
			}
			i++
			continue
		}
		if !utf8.FullRune(sample[i:]) { // cut at the end of the sample
			break
		}
		r, n := utf8.DecodeRune(sample[i:])
		if r == utf8.RuneError && n == 1 {
			bad++
		}
		i += n
	}
	return bad*10 > len(sample)*3
}

// fileType names the type of binary content from its magic number.
func fileType(sample []byte) string {
	for _, m := range magics {
		if strings.HasPrefix(string(sample), m.prefix) {
			return m.name
		}
	}
	if ct := http.DetectContentType(sample); ct != "application/octet-stream" {
		return ct
	}
	return "binary data"
}

var magics = []struct{ prefix, name string }{
	{"\x7fELF", "ELF executable or library"},
	{"\xcf\xfa\xed\xfe", "Mach-O executable"},
	{"\xfe\xed\xfa\xcf", "Mach-O executable"},
	{"\xca\xfe\xba\xbe", "Java class or Mach-O universal binary"},
	{"MZ", "Windows executable"},
	{"\x00asm", "WebAssembly module"},
	{"SQLite format 3\x00", "SQLite database"},
	{"\x89PNG", "PNG image"},
	{"GIF8", "GIF image"},
	{"\xff\xd8\xff", "JPEG image"},
	{"%PDF", "PDF document"},
	{"PK\x03\x04", "ZIP archive (or jar, docx, xlsx)"},
	{"\x1f\x8b", "gzip archive"},
	{"BZh", "bzip2 archive"},
	{"\xfd7zXZ\x00", "xz archive"},
	{"\x28\xb5\x2f\xfd", "zstd archive"},
	{"7z\xbc\xaf\x27\x1c", "7-Zip archive"},
}
