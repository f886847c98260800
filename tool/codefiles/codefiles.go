// Package codefiles takes the digests of the workspace files that code
// Keel starts outside the gate runs: a stdio MCP server's script and
// modules, the files a run's setup script runs. A run's own commands
// can change those files, so a start with other files than the ones
// Keel last started them with (in this run, or in an earlier run of the
// same workspace, [Store]) waits for a person.
package codefiles

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"path"
	"slices"
	"strings"

	"github.com/keel-run/keel/tool"
)

// Root is a part of what some code runs from the workspace: one file,
// or the files of a directory tree whose names match globs (every file
// when Globs is nil).
type Root struct {
	File  string   `json:"file,omitempty"`  // workspace-relative, or
	Dir   string   `json:"dir,omitempty"`   // workspace-relative ("." is the workspace)
	Globs []string `json:"globs,omitempty"` // of a Dir's file names
}

// Key names the root as journaled and shown: "srv/server.py",
// "srv/**/{*.py,*.pyc,*.so}", "node_modules/**".
func (r Root) Key() string {
	if r.File != "" {
		return r.File
	}
	p := ""
	if r.Dir != "." {
		p = r.Dir + "/"
	}
	if len(r.Globs) == 0 {
		return p + "**"
	}
	return p + "**/{" + strings.Join(r.Globs, ",") + "}"
}

// Has reports whether the workspace file rel is one of r's.
func (r Root) Has(rel string) bool {
	if r.File != "" {
		return rel == r.File
	}
	if r.Dir != "." && !strings.HasPrefix(rel, r.Dir+"/") {
		return false
	}
	in := strings.TrimPrefix(rel, r.Dir+"/")
	if slices.Contains(strings.Split(path.Dir(in), "/"), ".git") {
		return false
	}
	return len(r.Globs) == 0 || slices.ContainsFunc(r.Globs, func(g string) bool {
		ok, _ := path.Match(g, path.Base(rel))
		return ok
	})
}

// Set is the digests of what some code runs: per root, and (when
// taken in this process, or journaled file by file) per file of each
// root.
type Set struct {
	Roots map[string]string            // root key → digest
	Files map[string]map[string]string // root key → file → digest; nil: not known
}

// Sum is the digest of the whole set ("" when it has no root).
func (s *Set) Sum() string {
	if s == nil || len(s.Roots) == 0 {
		return ""
	}
	return digestOf(s.Roots)
}

// FileDigests returns the digest of each file of the set, or nil when
// they are not known or there are more than max.
func (s *Set) FileDigests(max int) map[string]string {
	if s == nil || s.Files == nil {
		return nil
	}
	out := map[string]string{}
	for _, files := range s.Files {
		maps.Copy(out, files)
	}
	if len(out) > max {
		return nil
	}
	return out
}

// digestOf hashes a map of names to digests, in name order.
func digestOf(m map[string]string) string {
	keys := slices.Sorted(maps.Keys(m))
	h := sha256.New()
	for _, k := range keys {
		fmt.Fprintf(h, "%s\x00%s\n", k, m[k])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Fingerprint takes the digests of roots in ws, through its [os.Root]
// (a link never leads Keel out of the workspace). A symbolic link counts
// by its target's name and, when it stays in the workspace, by the
// content it leads to; the .git directory is not walked. A file whose
// identity, size and times are those of a file hashed before (in this
// process) is not read again.
func Fingerprint(ws *tool.Workspace, roots []Root) *Set {
	s := &Set{Roots: map[string]string{}, Files: map[string]map[string]string{}}
	for _, r := range roots {
		files := map[string]string{}
		if r.File != "" {
			files[r.File] = fileDigest(ws, r.File, nil)
			s.Roots[r.Key()], s.Files[r.Key()] = files[r.File], files
			continue
		}
		_ = fs.WalkDir(ws.FS().FS(), r.Dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				if p != r.Dir {
					files[p] = "unreadable"
				}
				return nil
			}
			if d.IsDir() {
				if d.Name() == ".git" && p != r.Dir {
					return fs.SkipDir
				}
				return nil
			}
			if len(r.Globs) > 0 && !slices.ContainsFunc(r.Globs, func(g string) bool {
				ok, _ := path.Match(g, d.Name())
				return ok
			}) {
				return nil
			}
			files[p] = fileDigest(ws, p, d)
			return nil
		})
		s.Roots[r.Key()], s.Files[r.Key()] = digestOf(files), files
	}
	return s
}

// fileDigest is the SHA-256 of a workspace file's content, "absent", or
// for a link "link:TARGET" and the digest of what it leads to. d, when
// set, is the file's entry in the walk of its directory.
func fileDigest(ws *tool.Workspace, rel string, d fs.DirEntry) string {
	var fi fs.FileInfo
	var err error
	if d != nil {
		fi, err = d.Info()
	} else {
		fi, err = ws.FS().Lstat(rel)
	}
	if err != nil {
		return "absent"
	}
	prefix := ""
	if fi.Mode()&fs.ModeSymlink != 0 {
		target, _ := ws.FS().Readlink(rel)
		prefix = "link:" + target + ":"
		fi = nil // what it leads to is not the link's own identity
	} else if !fi.Mode().IsRegular() {
		return "special:" + fi.Mode().Type().String()
	}
	if sum, ok := cached(fi); ok {
		return sum
	}
	f, err := ws.FS().Open(rel)
	if err != nil {
		return prefix + "unreadable"
	}
	defer f.Close()
	if fi != nil {
		// The identity of the file read, which may have been replaced
		// since the walk saw it.
		if ofi, err := f.Stat(); err != nil || !sameFile(fi, ofi) {
			fi = nil
		}
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return prefix + "unreadable"
	}
	hashed.Add(1)
	sum := hex.EncodeToString(h.Sum(nil))
	remember(fi, sum)
	return prefix + sum
}

// Changes names what differs from was to now, for a person: the files
// when both sets know them, else the roots; at most ten, then a count.
func Changes(was, now *Set) []string {
	keys := slices.Collect(maps.Keys(was.Roots))
	for k := range now.Roots {
		if _, ok := was.Roots[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var out []string
	for _, k := range keys {
		if was.Roots[k] == now.Roots[k] {
			continue
		}
		wf, nf := was.Files[k], now.Files[k]
		if wf == nil || nf == nil {
			out = append(out, "a file of "+k)
			continue
		}
		names := slices.Collect(maps.Keys(wf))
		for f := range nf {
			if _, ok := wf[f]; !ok {
				names = append(names, f)
			}
		}
		slices.Sort(names)
		for _, f := range names {
			w, n := wf[f], nf[f]
			switch {
			case w == n:
			case w == "" || w == "absent":
				out = append(out, f+" (new)")
			case n == "" || n == "absent":
				out = append(out, f+" (removed)")
			default:
				out = append(out, f+" (changed)")
			}
		}
	}
	seen := map[string]bool{}
	out = slices.DeleteFunc(out, func(s string) bool {
		dup := seen[s]
		seen[s] = true
		return dup
	})
	if len(out) > 10 {
		out = append(out[:10], fmt.Sprintf("and %d more", len(out)-10))
	}
	return out
}

// Journaled is the set of digests journaled by root and, when known,
// by file (byFile nil: by root only).
func Journaled(roots []Root, byRoot, byFile map[string]string) *Set {
	s := &Set{Roots: maps.Clone(byRoot)}
	if byFile == nil {
		return s
	}
	s.Files = map[string]map[string]string{}
	for _, r := range roots {
		files := map[string]string{}
		for f, d := range byFile {
			if r.Has(f) {
				files[f] = d
			}
		}
		if digestOf(files) != byRoot[r.Key()] && r.File == "" {
			return &Set{Roots: s.Roots} // not the same files: name roots only
		}
		s.Files[r.Key()] = files
	}
	return s
}

// Since is what now would be held against, given base, the digests of
// the same workspace's files when Keel last started code from them
// ([Store]): base's digests for the roots base knows, now's for the
// others (their first start). Its [Set.Sum] differs from now's when a
// root known to base changed.
func Since(base, now *Set) *Set {
	out := &Set{Roots: maps.Clone(now.Roots), Files: map[string]map[string]string{}}
	for k := range now.Roots {
		out.Files[k] = now.Files[k]
		if d, ok := base.Roots[k]; ok {
			out.Roots[k] = d
			out.Files[k] = base.Files[k]
		}
	}
	return out
}
