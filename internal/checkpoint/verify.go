package checkpoint

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// The start commit is read from the workspace's .git/objects, which the
// run can write: a commit or tree object rewritten there (its file
// replaced by another object's) would make the diff compare with a
// forgery. startFiles therefore reads the commit and its trees itself,
// hashes each again, and trusts only the trees whose hash matches.

// object is one object git cat-file --batch printed.
type object struct {
	kind string
	body []byte
}

// catBatch reads the objects ids from the repository at dir in one git
// process; a missing one is absent from the map.
func catBatch(ctx context.Context, dir string, ids []string) (map[string]object, error) {
	var in bytes.Buffer
	for _, id := range ids {
		in.WriteString(id)
		in.WriteByte('\n')
	}
	out, err := git(ctx, dir, in.Bytes(), "cat-file", "--batch")
	if err != nil {
		return nil, err
	}
	return parseBatch(out)
}

// objects reads the objects ids from the store in one git process; a
// missing one is absent from the map.
func (c *Checkpoints) objects(ctx context.Context, ids []string) (map[string]object, error) {
	out, err := c.git(ctx, []byte(strings.Join(ids, "\n")+"\n"), "cat-file", "--batch")
	if err != nil {
		return nil, err
	}
	return parseBatch(out)
}

// files returns the files of the store's tree (blobs and links, by
// path; no gitlinks).
func (c *Checkpoints) files(ctx context.Context, tree string) (map[string]entry, error) {
	if !c.Has(ctx, tree) {
		return nil, fmt.Errorf("%w: %s", ErrMissing, tree)
	}
	out, err := c.git(ctx, nil, "ls-tree", "-r", "-z", "--full-tree", tree)
	if err != nil {
		return nil, err
	}
	files := map[string]entry{}
	for _, line := range nul(out) {
		meta, name, ok := strings.Cut(line, "\t")
		f := strings.Fields(meta)
		if !ok || len(f) != 3 || f[1] != "blob" {
			continue
		}
		files[name] = entry{mode: f[0], sha: f[2]}
	}
	return files, nil
}

// parseBatch reads the output of git cat-file --batch.
func parseBatch(out []byte) (map[string]object, error) {
	objs := map[string]object{}
	r := bufio.NewReader(bytes.NewReader(out))
	for {
		head, err := r.ReadString('\n')
		if err == io.EOF {
			return objs, nil
		}
		if err != nil {
			return nil, err
		}
		f := strings.Fields(head)
		if len(f) == 2 && f[1] == "missing" {
			continue
		}
		if len(f) != 3 {
			return nil, fmt.Errorf("git cat-file --batch: unexpected line %q", head)
		}
		n, err := strconv.Atoi(f[2])
		if err != nil || n < 0 {
			return nil, fmt.Errorf("git cat-file --batch: unexpected line %q", head)
		}
		body := make([]byte, n+1) // and its newline
		if _, err := io.ReadFull(r, body); err != nil {
			return nil, fmt.Errorf("git cat-file --batch: %w", err)
		}
		objs[f[0]] = object{f[1], body[:n]}
	}
}

// startFiles returns the files (blobs and links, by path) and the
// gitlinks (path: commit) of commit in the repository at dir, from its
// commit and tree objects hashed again:
// forged lists the directories ("" the whole tree, else "dir/") whose
// tree object (or the commit, for "") no longer matches its id, whose
// files are unknown. A repository with SHA-256 ids is read with git
// ls-tree, unchecked.
func startFiles(ctx context.Context, dir, commit string) (files map[string]entry, links map[string]string, forged []string, err error) {
	files, links = map[string]entry{}, map[string]string{}
	if len(commit) != 40 {
		return lsTree(ctx, dir, commit)
	}
	objs, err := catBatch(ctx, dir, []string{commit})
	if err != nil {
		return nil, nil, nil, err
	}
	c, ok := objs[commit]
	if !ok || c.kind != "commit" {
		return nil, nil, nil, fmt.Errorf("the start commit %s is not in the repository", commit)
	}
	root, ok := strings.CutPrefix(string(c.body), "tree ")
	if hashObject("commit", c.body).String() != commit || !ok || len(root) < 40 {
		return files, links, []string{""}, nil
	}
	level := map[string][]string{root[:40]: {""}} // tree id: the directories that hold it
	for len(level) > 0 {
		ids := make([]string, 0, len(level))
		for id := range level {
			ids = append(ids, id)
		}
		objs, err := catBatch(ctx, dir, ids)
		if err != nil {
			return nil, nil, nil, err
		}
		next := map[string][]string{}
		for id, dirs := range level {
			o, ok := objs[id]
			if !ok || o.kind != "tree" || hashObject("tree", o.body).String() != id {
				forged = append(forged, dirs...)
				continue
			}
			for _, d := range dirs {
				if err := treeEntries(o.body, func(mode, name, sha string) {
					switch mode {
					case "40000":
						next[sha] = append(next[sha], d+name+"/")
					case "160000": // a submodule
						links[d+name] = sha
					default:
						files[d+name] = entry{mode: mode, sha: sha}
					}
				}); err != nil {
					forged = append(forged, d)
				}
			}
		}
		level = next
	}
	return files, links, forged, nil
}

// treeEntries calls each for the entries of a tree object's body
// ("MODE NAME\0" and 20 bytes of id each).
func treeEntries(body []byte, each func(mode, name, sha string)) error {
	for len(body) > 0 {
		sp := bytes.IndexByte(body, ' ')
		nul := bytes.IndexByte(body, 0)
		if sp < 0 || nul < sp || len(body) < nul+21 {
			return fmt.Errorf("a malformed tree")
		}
		each(string(body[:sp]), string(body[sp+1:nul]), hex.EncodeToString(body[nul+1:nul+21]))
		body = body[nul+21:]
	}
	return nil
}

// lsTree is the files of commit as git ls-tree lists them.
func lsTree(ctx context.Context, dir, commit string) (map[string]entry, map[string]string, []string, error) {
	tree, err := git(ctx, dir, nil, "ls-tree", "-r", "-z", "--full-tree", commit)
	if err != nil {
		return nil, nil, nil, err
	}
	files, links := map[string]entry{}, map[string]string{}
	for _, rec := range strings.Split(string(tree), "\x00") {
		meta, path, ok := strings.Cut(rec, "\t")
		if !ok {
			continue
		}
		f := strings.Fields(meta) // mode type sha
		switch {
		case len(f) != 3:
		case f[1] == "blob":
			files[path] = entry{mode: f[0], sha: f[2]}
		case f[1] == "commit": // a submodule
			links[path] = f[2]
		}
	}
	return files, links, nil, nil
}
