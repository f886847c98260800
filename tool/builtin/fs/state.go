package fs

import (
	"encoding/json"
	"errors"
	iofs "io/fs"

	"github.com/keel-run/keel/tool"
)

// fileState is the [tool.Tool.State] of write_file and edit_file: the
// SHA-256 of the file the call would write ("sha256:HEX"), "absent" when
// there is none, "" when it cannot be read (the call then fails or is
// refused on its own).
func fileState(req *tool.Request) string {
	var in struct {
		Path string `json:"path"`
	}
	if json.Unmarshal(req.Arguments, &in) != nil || in.Path == "" || req.Env == nil || req.Env.Workspace == nil {
		return ""
	}
	ws := req.Env.Workspace
	rel, err := ws.ResolveWrite(in.Path)
	if err != nil {
		return ""
	}
	tgt, err := openTarget(ws, rel, false)
	if errors.Is(err, iofs.ErrNotExist) {
		return "absent"
	}
	if err != nil {
		return ""
	}
	defer tgt.dir.Close()
	if _, err := tgt.dir.Lstat(tgt.base); errors.Is(err, iofs.ErrNotExist) {
		return "absent"
	}
	f, _, res := openRegular(tgt.dir, tgt.base, rel)
	if res != nil {
		return ""
	}
	defer f.Close()
	d, err := tool.Digest(f)
	if err != nil {
		return ""
	}
	return d
}
