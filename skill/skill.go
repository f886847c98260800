// Package skill reads, verifies and installs skills in the Agent Skills
// format: a directory with a SKILL.md whose YAML front matter names the
// skill and says when to use it, and optional scripts, references and
// assets. A skill is content-addressed by the digest of the Agent Skills
// discovery specification (a SHA-256 over its files' paths and
// digests), installed from a discovery index
// (/.well-known/agent-skills/index.json) only when every file and the
// skill match the index's digests and the archive-safety rules, pinned
// per project in a lockfile, and, when an agent wrote it and a person
// approved it, signed with a Keel agent's Ed25519 key; loading verifies
// the digest and the signature and refuses a changed skill.
//
// See docs/skills.md.
package skill

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// Limits of one skill.
const (
	MaxFiles       = 256
	MaxFileBytes   = 4 << 20
	MaxSkillBytes  = 32 << 20
	MaxDescription = 1024
)

// ErrRefused wraps every reason a skill is not used: a wrong digest, an
// unsafe path, a changed signed file, a malformed SKILL.md.
var ErrRefused = errors.New("skill: refused")

func refused(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrRefused, fmt.Sprintf(format, args...))
}

// File is one file of a skill.
type File struct {
	Path   string `json:"path"`
	Digest string `json:"digest"`
}

// Skill is a skill read from a directory.
type Skill struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	// Body is SKILL.md after its front matter: the instructions a run
	// reads when it uses the skill.
	Body string `json:"-"`
	// Files are the skill's files sorted by path, SKILL.md among them.
	Files []File `json:"files"`
	// Digest is the skill-level digest ("sha256:HEX").
	Digest string `json:"digest"`
	// Dir is the directory the files are in.
	Dir string `json:"dir"`
}

// Scripts reports whether the skill has files under scripts/.
func (s *Skill) Scripts() bool {
	return slices.ContainsFunc(s.Files, func(f File) bool { return strings.HasPrefix(f.Path, "scripts/") })
}

// FileDigest returns "sha256:HEX" of b.
func FileDigest(b []byte) string {
	h := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(h[:])
}

// Digest returns the skill-level digest of files: SHA-256 over the
// lines "PATH\x00HEX\n" sorted by path, as the discovery specification
// defines it.
func Digest(files []File) string {
	fs := slices.Clone(files)
	slices.SortFunc(fs, func(a, b File) int { return strings.Compare(a.Path, b.Path) })
	h := sha256.New()
	for _, f := range fs {
		fmt.Fprintf(h, "%s\x00%s\n", f.Path, strings.TrimPrefix(f.Digest, "sha256:"))
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// CheckName returns an error unless name is a skill name: 1 to 64
// lowercase letters, digits and hyphens, without a leading, trailing or
// doubled hyphen.
func CheckName(name string) error {
	ok := name != "" && len(name) <= 64 && name[0] != '-' && name[len(name)-1] != '-' && !strings.Contains(name, "--")
	for _, r := range name {
		ok = ok && (r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-')
	}
	if !ok {
		return refused("name %q: want 1 to 64 lowercase letters, digits and single hyphens", name)
	}
	return nil
}

// CheckPath returns an error unless p is a safe relative file path of a
// skill: forward slashes, no leading slash, no "." or ".." segment,
// printable ASCII without \ ? # [ ].
func CheckPath(p string) error {
	if p == "" || strings.HasPrefix(p, "/") || len(p) > 512 {
		return refused("path %q: want a relative path", p)
	}
	for _, r := range p {
		if r < 0x20 || r > 0x7e || strings.ContainsRune(`\?#[]`, r) {
			return refused("path %q: only printable ASCII without \\ ? # [ ]", p)
		}
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return refused("path %q escapes or is not clean", p)
		}
	}
	return nil
}

// frontMatter is the YAML front matter of SKILL.md.
type frontMatter struct {
	Name          string            `yaml:"name"`
	Description   string            `yaml:"description"`
	License       string            `yaml:"license"`
	Compatibility string            `yaml:"compatibility"`
	AllowedTools  any               `yaml:"allowed-tools"`
	Metadata      map[string]string `yaml:"metadata"`
}

// Parse reads SKILL.md: its front matter (name and description are
// required) and the body after it.
func Parse(b []byte) (name, description, body string, err error) {
	if !utf8.Valid(b) {
		return "", "", "", refused("SKILL.md is not UTF-8")
	}
	s := strings.ReplaceAll(string(b), "\r\n", "\n")
	rest, ok := strings.CutPrefix(s, "---\n")
	if !ok {
		return "", "", "", refused("SKILL.md does not start with YAML front matter (---)")
	}
	fm, body, ok := strings.Cut(rest, "\n---")
	if !ok {
		return "", "", "", refused("SKILL.md's front matter has no closing ---")
	}
	body = strings.TrimPrefix(strings.TrimPrefix(body, "\n"), "\n")
	var m frontMatter
	if err := yaml.Unmarshal([]byte(fm), &m); err != nil {
		return "", "", "", refused("SKILL.md front matter: %v", err)
	}
	if err := CheckName(m.Name); err != nil {
		return "", "", "", err
	}
	d := strings.TrimSpace(m.Description)
	if d == "" || len(d) > MaxDescription {
		return "", "", "", refused("skill %s: the description must have 1 to %d characters", m.Name, MaxDescription)
	}
	return m.Name, d, strings.TrimSpace(body), nil
}

// Read reads the skill in dir: every regular file below it (a symbolic
// link, a device or a path [CheckPath] refuses is an error, as are more
// than [MaxFiles] files or more than the size limits), SKILL.md parsed,
// and its name equal to the directory's.
func Read(dir string) (*Skill, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	sk := &Skill{Dir: dir}
	var total int64
	var skillMD []byte
	err = fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == "." {
			return nil
		}
		if d.IsDir() {
			return nil
		}
		if !d.Type().IsRegular() {
			return refused("%s: %s is not a regular file (links and devices are refused)", dir, p)
		}
		if err := CheckPath(p); err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		total += info.Size()
		if info.Size() > MaxFileBytes || total > MaxSkillBytes || len(sk.Files) >= MaxFiles {
			return refused("%s is over the size limits (%d files, %d bytes, %d per file)", dir, MaxFiles, MaxSkillBytes, MaxFileBytes)
		}
		b, err := root.ReadFile(p)
		if err != nil {
			return err
		}
		if p == "SKILL.md" {
			skillMD = b
		}
		sk.Files = append(sk.Files, File{Path: p, Digest: FileDigest(b)})
		return nil
	})
	if err != nil {
		return nil, err
	}
	if skillMD == nil {
		return nil, refused("%s has no SKILL.md", dir)
	}
	if sk.Name, sk.Description, sk.Body, err = Parse(skillMD); err != nil {
		return nil, err
	}
	if base := filepath.Base(dir); base != sk.Name && !isDigestDir(base) {
		return nil, refused("skill %q is in a directory named %q; they must match", sk.Name, base)
	}
	slices.SortFunc(sk.Files, func(a, b File) int { return strings.Compare(a.Path, b.Path) })
	sk.Digest = Digest(sk.Files)
	return sk, nil
}

// isDigestDir reports whether a directory is named by a digest (an
// installed version: NAME/HEX).
func isDigestDir(base string) bool {
	if len(base) != 64 {
		return false
	}
	_, err := hex.DecodeString(base)
	return err == nil
}

// ReadFile returns the content of one file of the skill, verified
// against its recorded digest.
func (s *Skill) ReadFile(p string) ([]byte, error) {
	if err := CheckPath(p); err != nil {
		return nil, err
	}
	i := slices.IndexFunc(s.Files, func(f File) bool { return f.Path == p })
	if i < 0 {
		return nil, fmt.Errorf("skill %s has no file %s", s.Name, p)
	}
	root, err := os.OpenRoot(s.Dir)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	b, err := root.ReadFile(p)
	if err != nil {
		return nil, err
	}
	if FileDigest(b) != s.Files[i].Digest {
		return nil, refused("skill %s: %s changed since it was read", s.Name, p)
	}
	return b, nil
}

// Verify checks that s's files still have the digest want: every file
// read again from disk, none missing and none added.
func (s *Skill) Verify(want string) error {
	again, err := Read(s.Dir)
	if err != nil {
		return err
	}
	if again.Digest != want {
		return refused("skill %s changed: its files have digest %s, not %s", s.Name, again.Digest, want)
	}
	return nil
}

// Discover reads the skills in the subdirectories of root (each with a
// SKILL.md), sorted by name. A missing root is no skill; a directory
// that is not a valid skill is reported in errs and left out.
func Discover(root string) (skills []*Skill, errs []error) {
	ents, err := os.ReadDir(root)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, []error{err}
	}
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		dir := filepath.Join(root, e.Name())
		if _, err := os.Lstat(filepath.Join(dir, "SKILL.md")); err != nil {
			continue
		}
		sk, err := Read(dir)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", dir, err))
			continue
		}
		skills = append(skills, sk)
	}
	slices.SortFunc(skills, func(a, b *Skill) int { return strings.Compare(a.Name, b.Name) })
	return skills, errs
}

// write stores files (path → content) as a skill directory under dir,
// refusing any path [CheckPath] refuses; dir must not exist.
func write(dir string, files map[string][]byte) error {
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), ".tmp-"+filepath.Base(dir))
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if err := os.Chmod(tmp, 0o755); err != nil { // MkdirTemp makes it 0700: runs read skills as another user
		return err
	}
	root, err := os.OpenRoot(tmp)
	if err != nil {
		return err
	}
	defer root.Close()
	for p, b := range files {
		if err := CheckPath(p); err != nil {
			return err
		}
		if d := path.Dir(p); d != "." {
			if err := root.MkdirAll(d, 0o755); err != nil {
				return err
			}
		}
		mode := os.FileMode(0o644)
		if strings.HasPrefix(p, "scripts/") || bytes.HasPrefix(b, []byte("#!")) {
			mode = 0o755
		}
		if err := root.WriteFile(p, b, mode); err != nil {
			return err
		}
	}
	if err := os.Rename(tmp, dir); err != nil {
		if _, serr := os.Stat(dir); serr == nil {
			return nil // installed by someone else meanwhile: content-addressed, the same
		}
		return err
	}
	return nil
}

// Store copies s into store at its immutable path NAME/HEX and returns
// the stored skill, read back and verified.
func Store(s *Skill, store string) (*Skill, error) {
	files := map[string][]byte{}
	for _, f := range s.Files {
		b, err := s.ReadFile(f.Path)
		if err != nil {
			return nil, err
		}
		files[f.Path] = b
	}
	dir := filepath.Join(store, s.Name, strings.TrimPrefix(s.Digest, "sha256:"))
	if err := write(dir, files); err != nil {
		return nil, err
	}
	got, err := Read(dir)
	if err != nil {
		return nil, err
	}
	if got.Digest != s.Digest {
		return nil, refused("skill %s at %s has digest %s, not %s", s.Name, dir, got.Digest, s.Digest)
	}
	return got, nil
}
