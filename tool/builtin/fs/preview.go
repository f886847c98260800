package fs

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"strings"

	"github.com/keel-run/keel/tool"
)

// maxPreview bounds the file a preview reads.
const maxPreview = 8 << 20

// PreviewIn is [Preview] on the file of the call in ws: it returns the
// file's path, its content now (nil for a new file) and after the call,
// without writing. A call that would fail says why in problem (as the
// tool would); other tools return ok false. It reads only inside the
// workspace, as the tools do.
func PreviewIn(ws *tool.Workspace, name string, args json.RawMessage) (path string, before, after []byte, problem string, ok bool) {
	var in struct {
		Path       string  `json:"path"`
		Content    *string `json:"content"`
		OldString  string  `json:"old_string"`
		NewString  string  `json:"new_string"`
		ReplaceAll bool    `json:"replace_all"`
	}
	if name != WriteName && name != EditName {
		return "", nil, nil, "", false
	}
	if err := json.Unmarshal(args, &in); err != nil {
		return "", nil, nil, fmt.Sprintf("invalid arguments: %v", err), true
	}
	path = in.Path
	rel, err := ws.ResolveWrite(in.Path)
	if err != nil {
		return path, nil, nil, describeErr(err), true
	}
	before, err = readCurrent(ws, rel)
	switch {
	case errors.Is(err, iofs.ErrNotExist):
		before = nil
		if name == EditName {
			return path, nil, nil, "no such file; to create a file use write_file", true
		}
	case err != nil:
		return path, nil, nil, describeErr(err), true
	}
	if name == WriteName && in.Content == nil {
		return path, before, nil, "no content", true
	}
	after, problem = Preview(name, args, before)
	return path, before, after, problem, true
}

// readCurrent reads the regular file rel of ws, at most maxPreview bytes.
func readCurrent(ws *tool.Workspace, rel string) ([]byte, error) {
	tgt, err := openTarget(ws, rel, false)
	if err != nil {
		return nil, err
	}
	defer tgt.dir.Close()
	f, _, res := openRegular(tgt.dir, tgt.base, rel)
	if res != nil {
		if strings.Contains(res.Content, "no such file") {
			return nil, iofs.ErrNotExist
		}
		return nil, errors.New(res.Content)
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, maxPreview))
}
