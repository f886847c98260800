package skill

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
)

// IndexPath is where a publisher's discovery index lives.
const IndexPath = "/.well-known/agent-skills/index.json"

// Index is a discovery index (version 0.2.x).
type Index struct {
	Version string       `json:"version"`
	Skills  []IndexEntry `json:"skills"`
}

// IndexEntry is one skill of an index.
type IndexEntry struct {
	Name        string   `json:"name"`
	Description string   `json:"description"`
	Digest      string   `json:"digest"`
	Files       []File   `json:"files"`
	Package     *Package `json:"package,omitempty"`
}

// Package is a skill's optional archive (.tar.gz).
type Package struct {
	URL    string `json:"url"`
	Digest string `json:"digest"`
}

// maxIndexBytes bounds an index.
const maxIndexBytes = 4 << 20

// InstallParams say what [Install] fetches.
type InstallParams struct {
	// URL is the index's URL, or the publisher's origin (IndexPath is
	// appended to a URL without a path).
	URL string
	// Name is the skill to install.
	Name string
	// Dir is the store the skill is installed in, as Dir/NAME/HEX
	// (HEX: the skill digest), never changed once written.
	Dir string
	// Client fetches; nil means http.DefaultClient.
	Client *http.Client
}

// Install fetches skill p.Name from a discovery index, verifies every
// file against its digest, the skill against its digest and the
// archive-safety rules (relative clean paths only, regular files only,
// the files the index lists and no others, size limits), and stores it
// at its immutable, content-addressed path. Anything that does not
// verify is refused with [ErrRefused] and nothing is stored.
func Install(ctx context.Context, p *InstallParams) (*Skill, error) {
	c := p.Client
	if c == nil {
		c = http.DefaultClient
	}
	iu, err := url.Parse(p.URL)
	if err != nil || (iu.Scheme != "https" && iu.Scheme != "http") || iu.Host == "" {
		return nil, fmt.Errorf("skill: index URL %q: want http(s)://HOST[/path/index.json]", p.URL)
	}
	if iu.Path == "" || iu.Path == "/" {
		iu.Path = IndexPath
	}
	b, err := fetch(ctx, c, iu.String(), maxIndexBytes)
	if err != nil {
		return nil, err
	}
	var ix Index
	if err := json.Unmarshal(b, &ix); err != nil {
		return nil, refused("index %s: %v", iu, err)
	}
	if ix.Version != "" && !strings.HasPrefix(ix.Version, "0.") {
		return nil, refused("index %s has version %s; this keel reads 0.x", iu, ix.Version)
	}
	var e *IndexEntry
	for i := range ix.Skills {
		if ix.Skills[i].Name == p.Name {
			e = &ix.Skills[i]
		}
	}
	if e == nil {
		return nil, fmt.Errorf("skill: index %s has no skill %q", iu, p.Name)
	}
	if err := CheckName(e.Name); err != nil {
		return nil, err
	}
	if len(e.Files) == 0 || len(e.Files) > MaxFiles {
		return nil, refused("skill %s lists %d files", e.Name, len(e.Files))
	}
	want := map[string]string{}
	for _, f := range e.Files {
		if err := CheckPath(f.Path); err != nil {
			return nil, err
		}
		if _, dup := want[f.Path]; dup {
			return nil, refused("skill %s lists %s twice", e.Name, f.Path)
		}
		if !strings.HasPrefix(f.Digest, "sha256:") || len(f.Digest) != 71 {
			return nil, refused("skill %s: %s has no sha256 digest (a v0.1 index cannot be verified)", e.Name, f.Path)
		}
		want[f.Path] = f.Digest
	}
	if _, ok := want["SKILL.md"]; !ok {
		return nil, refused("skill %s lists no SKILL.md", e.Name)
	}
	if Digest(e.Files) != e.Digest {
		return nil, refused("skill %s: the index's skill digest %s does not match its files (%s)", e.Name, e.Digest, Digest(e.Files))
	}
	files := map[string][]byte{}
	if e.Package != nil {
		if files, err = fetchPackage(ctx, c, iu, e); err != nil {
			return nil, err
		}
	} else {
		base := iu.ResolveReference(&url.URL{Path: e.Name + "/"})
		var total int
		for _, f := range e.Files {
			b, err := fetch(ctx, c, base.ResolveReference(&url.URL{Path: f.Path}).String(), MaxFileBytes)
			if err != nil {
				return nil, err
			}
			total += len(b)
			if total > MaxSkillBytes {
				return nil, refused("skill %s is larger than %d bytes", e.Name, MaxSkillBytes)
			}
			files[f.Path] = b
		}
	}
	var got []File
	for pth, b := range files {
		d, ok := want[pth]
		if !ok {
			return nil, refused("skill %s: the archive holds %s, which the index does not list", e.Name, pth)
		}
		if FileDigest(b) != d {
			return nil, refused("skill %s: %s has digest %s, the index says %s", e.Name, pth, FileDigest(b), d)
		}
		got = append(got, File{Path: pth, Digest: d})
	}
	if len(got) != len(want) {
		return nil, refused("skill %s: %d of the %d files listed arrived", e.Name, len(got), len(want))
	}
	if Digest(got) != e.Digest {
		return nil, refused("skill %s: the files' digest %s is not the index's %s", e.Name, Digest(got), e.Digest)
	}
	if name, _, _, err := Parse(files["SKILL.md"]); err != nil {
		return nil, err
	} else if name != e.Name {
		return nil, refused("the index names skill %q, its SKILL.md %q", e.Name, name)
	}
	dir := filepath.Join(p.Dir, e.Name, strings.TrimPrefix(e.Digest, "sha256:"))
	if err := write(dir, files); err != nil {
		return nil, err
	}
	sk, err := Read(dir)
	if err != nil {
		return nil, err
	}
	if sk.Digest != e.Digest {
		return nil, refused("skill %s changed on disk while installed", e.Name)
	}
	return sk, nil
}

// fetchPackage downloads and unpacks a skill's .tar.gz, verifying the
// archive's digest first and refusing any entry that is not a regular
// file at a safe path (absolute paths, "..", links, devices), a file
// twice, or more than the size limits.
func fetchPackage(ctx context.Context, c *http.Client, base *url.URL, e *IndexEntry) (map[string][]byte, error) {
	pu, err := base.Parse(e.Package.URL)
	if err != nil {
		return nil, refused("skill %s: package URL: %v", e.Name, err)
	}
	if pu.Scheme != base.Scheme || pu.Host != base.Host {
		return nil, refused("skill %s: its package is on %s, not on the index's host %s", e.Name, pu.Host, base.Host)
	}
	b, err := fetch(ctx, c, pu.String(), MaxSkillBytes)
	if err != nil {
		return nil, err
	}
	if FileDigest(b) != e.Package.Digest {
		return nil, refused("skill %s: the package has digest %s, the index says %s", e.Name, FileDigest(b), e.Package.Digest)
	}
	return Unpack(strings.NewReader(string(b)))
}

// Unpack reads a skill archive (.tar.gz) into path → content by the
// archive-safety rules: only regular files and directories, every path
// relative and clean (no absolute path, no ".." segment, nothing
// [CheckPath] refuses), no file twice, within [MaxFiles],
// [MaxFileBytes] and [MaxSkillBytes].
func Unpack(r io.Reader) (map[string][]byte, error) {
	zr, err := gzip.NewReader(r)
	if err != nil {
		return nil, refused("package: %v", err)
	}
	tr := tar.NewReader(zr)
	files := map[string][]byte{}
	total := 0
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, refused("package: %v", err)
		}
		name := strings.TrimPrefix(h.Name, "./")
		switch h.Typeflag {
		case tar.TypeDir:
			if err := CheckPath(strings.TrimSuffix(name, "/")); err != nil && name != "" {
				return nil, refused("package entry %q escapes the archive", h.Name)
			}
			continue
		case tar.TypeReg:
		default:
			return nil, refused("package entry %q is not a regular file (type %q): links and devices are refused", h.Name, h.Typeflag)
		}
		if err := CheckPath(name); err != nil {
			return nil, refused("package entry %q escapes the archive or is not a clean path", h.Name)
		}
		if _, dup := files[name]; dup {
			return nil, refused("package holds %s twice", name)
		}
		if h.Size > MaxFileBytes || len(files) >= MaxFiles {
			return nil, refused("package is over the limits")
		}
		b, err := io.ReadAll(io.LimitReader(tr, MaxFileBytes+1))
		if err != nil {
			return nil, refused("package: %v", err)
		}
		total += len(b)
		if len(b) > MaxFileBytes || total > MaxSkillBytes {
			return nil, refused("package is over the limits")
		}
		files[name] = b
	}
	return files, nil
}

func fetch(ctx context.Context, c *http.Client, u string, limit int64) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("skill: fetch %s: %w", u, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("skill: fetch %s: %s", u, resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, fmt.Errorf("skill: fetch %s: %w", u, err)
	}
	if int64(len(b)) > limit {
		return nil, refused("%s is larger than %d bytes", u, limit)
	}
	return b, nil
}
