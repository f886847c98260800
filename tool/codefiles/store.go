package codefiles

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/google/renameio/v2"

	"github.com/keel-run/keel/tool"
)

// Store keeps, per workspace, the digests of the files Keel last
// started code from (a setup script ran them, a stdio MCP server was
// started with them, or a person trusted them as they are): what the
// next run's first start of that code is held against. It lives in
// Keel's home, which no sandbox sees, never in the workspace, which a
// run can write. A nil Store keeps nothing.
type Store struct {
	// File is the workspace's record (a JSON file, written whole).
	File string
}

// record is a workspace's file of the store.
type record struct {
	Workspace string                  `json:"workspace"`
	Roots     map[string]recordedRoot `json:"roots"`
}

type recordedRoot struct {
	Root  Root              `json:"root"`
	Files map[string]string `json:"files"`
}

// digest is the root's digest as [Fingerprint] takes it.
func (r recordedRoot) digest() string {
	if r.Root.File != "" {
		return r.Files[r.Root.File]
	}
	return digestOf(r.Files)
}

var storeMu sync.Mutex

func (s *Store) path(*tool.Workspace) string { return s.File }

func (s *Store) read(ws *tool.Workspace) (*record, error) {
	rec := &record{Workspace: ws.Root(), Roots: map[string]recordedRoot{}}
	b, err := os.ReadFile(s.path(ws))
	if errors.Is(err, fs.ErrNotExist) {
		return rec, nil
	}
	if err != nil {
		return nil, fmt.Errorf("codefiles: %w", err)
	}
	if err := json.Unmarshal(b, rec); err != nil {
		return nil, fmt.Errorf("codefiles: %s: %w", s.path(ws), err)
	}
	if rec.Workspace != ws.Root() {
		return &record{Workspace: ws.Root(), Roots: map[string]recordedRoot{}}, nil
	}
	if rec.Roots == nil {
		rec.Roots = map[string]recordedRoot{}
	}
	return rec, nil
}

// Load returns the digests recorded for the workspace ws, by root and
// file (an empty set when none are).
func (s *Store) Load(ws *tool.Workspace) (*Set, error) {
	out := &Set{Roots: map[string]string{}, Files: map[string]map[string]string{}}
	if s == nil {
		return out, nil
	}
	storeMu.Lock()
	rec, err := s.read(ws)
	storeMu.Unlock()
	if err != nil {
		return nil, err
	}
	for k, r := range rec.Roots {
		out.Roots[k], out.Files[k] = r.digest(), r.Files
	}
	return out, nil
}

// Update records set, the digests of roots as Keel started code from
// them, for the workspace ws; the other roots recorded stay.
func (s *Store) Update(ws *tool.Workspace, roots []Root, set *Set) error {
	if s == nil || set == nil || set.Files == nil {
		return nil
	}
	storeMu.Lock()
	defer storeMu.Unlock()
	rec, err := s.read(ws)
	if err != nil {
		return err
	}
	for _, r := range roots {
		if files, ok := set.Files[r.Key()]; ok {
			rec.Roots[r.Key()] = recordedRoot{Root: r, Files: maps.Clone(files)}
		}
	}
	return s.write(ws, rec)
}

func (s *Store) write(ws *tool.Workspace, rec *record) error {
	if err := os.MkdirAll(filepath.Dir(s.File), 0o700); err != nil {
		return fmt.Errorf("codefiles: %w", err)
	}
	b, err := json.MarshalIndent(rec, "", " ")
	if err != nil {
		return err
	}
	if err := renameio.WriteFile(s.path(ws), b, 0o600); err != nil {
		return fmt.Errorf("codefiles: %w", err)
	}
	return nil
}

// Trust records every root recorded for the workspace ws as its files
// are now (a person read them and trusts them), and returns what
// changed since they were recorded.
func (s *Store) Trust(ws *tool.Workspace) ([]string, error) {
	if s == nil {
		return nil, nil
	}
	storeMu.Lock()
	defer storeMu.Unlock()
	rec, err := s.read(ws)
	if err != nil {
		return nil, err
	}
	keys := slices.Sorted(maps.Keys(rec.Roots))
	roots := make([]Root, 0, len(keys))
	was := &Set{Roots: map[string]string{}, Files: map[string]map[string]string{}}
	for _, k := range keys {
		r := rec.Roots[k]
		roots = append(roots, r.Root)
		was.Roots[k], was.Files[k] = r.digest(), r.Files
	}
	now := Fingerprint(ws, roots)
	for _, r := range roots {
		rec.Roots[r.Key()] = recordedRoot{Root: r, Files: now.Files[r.Key()]}
	}
	if len(roots) == 0 {
		return nil, nil
	}
	return Changes(was, now), s.write(ws, rec)
}
