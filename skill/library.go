package skill

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Library locates the skills a run may be offered.
type Library struct {
	// UserDir holds the user's own skills (NAME/SKILL.md), trusted as
	// the user's files.
	UserDir string
	// StoreDir holds installed and approved skills at NAME/HEX.
	StoreDir string
	// Workspace is the project; its lockfile pins what it uses.
	Workspace string
	// LockTrusted says the person trusts the lockfile's content (keel
	// config trust, or a keel skills command of theirs wrote it): only
	// then are its pins used.
	LockTrusted func(content []byte) bool
	// Key verifies signatures.
	Key KeyFunc
}

// Found is a skill a run may be offered, verified.
type Found struct {
	*Skill
	Source string
	// Pinned is its lockfile entry (nil for a user skill).
	Pinned *Pinned
}

// Find returns the user's skills and the lockfile's pinned skills,
// each read and verified: a pinned skill whose files do not have its
// pinned digest, whose signature does not verify, or that cannot be read
// is left out and reported in errs, never offered. A pinned skill
// replaces a user skill of the same name.
func (l *Library) Find() (found []Found, errs []error) {
	byName := map[string]int{}
	add := func(f Found) {
		if i, ok := byName[f.Name]; ok {
			found[i] = f
			return
		}
		byName[f.Name] = len(found)
		found = append(found, f)
	}
	if l.UserDir != "" {
		user, uerrs := Discover(l.UserDir)
		errs = append(errs, uerrs...)
		for _, s := range user {
			add(Found{Skill: s, Source: SourceUser})
		}
	}
	if l.Workspace == "" {
		return found, errs
	}
	lock, content, err := ReadLock(l.Workspace)
	if err != nil {
		return found, append(errs, err)
	}
	if len(lock.Skills) == 0 {
		return found, errs
	}
	if l.LockTrusted == nil || !l.LockTrusted(content) {
		return found, append(errs, fmt.Errorf("skill: %s is not trusted: its skills are not offered (keel config trust --workspace %s)", filepath.Join(l.Workspace, LockFile), l.Workspace))
	}
	for i := range lock.Skills {
		p := &lock.Skills[i]
		s, err := l.pinned(p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		add(Found{Skill: s, Source: p.Source, Pinned: p})
	}
	return found, errs
}

// pinned reads and verifies one pinned skill.
func (l *Library) pinned(p *Pinned) (*Skill, error) {
	if err := CheckName(p.Name); err != nil {
		return nil, err
	}
	var dir string
	switch p.Source {
	case SourceProject:
		dir = filepath.Join(l.Workspace, ".keel", "skills", p.Name)
	default:
		dir = filepath.Join(l.StoreDir, p.Name, strings.TrimPrefix(p.Digest, "sha256:"))
	}
	if _, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("skill %s pinned at %s is not installed: %w", p.Name, p.Digest, err)
	}
	s, err := Read(dir)
	if err != nil {
		return nil, err
	}
	if s.Name != p.Name {
		return nil, refused("%s holds skill %q, pinned as %q", dir, s.Name, p.Name)
	}
	if s.Digest != p.Digest {
		return nil, refused("skill %s changed: its files have digest %s, the lockfile pins %s", p.Name, s.Digest, p.Digest)
	}
	if p.Signature != nil || p.Source == SourceAgent {
		if l.Key == nil {
			return nil, refused("skill %s is signed and no key is at hand to verify it", p.Name)
		}
		if err := VerifySignature(p.Name, p.Digest, p.Signature, l.Key); err != nil {
			return nil, err
		}
	}
	return s, nil
}
