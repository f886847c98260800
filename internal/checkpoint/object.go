package checkpoint

import (
	"bytes"
	"compress/zlib"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The store's objects written here, on the snapshot's hot path, are git's
// loose objects (gitformat-loose: the zlib stream of "TYPE SIZE\0" and
// the body, named by the SHA-1 of that), which every git reads; git
// itself still writes the first snapshot of a workspace (as packs),
// restores, diffs and prunes. Writing them in the process saves a git
// process per object kind per step, which cost more than the work.

// oid is a SHA-1 object id.
type oid [sha1.Size]byte

func (o oid) String() string { return hex.EncodeToString(o[:]) }

func parseOID(s string) (oid, bool) {
	var o oid
	if len(s) != 2*len(o) {
		return o, false
	}
	_, err := hex.Decode(o[:], []byte(s))
	return o, err == nil
}

// Tree entry modes, as git records them.
const (
	modeFile    = 0o100644
	modeExec    = 0o100755
	modeLink    = 0o120000
	modeTree    = 0o40000
	modeGitlink = 0o160000
)

// fileMode is the mode git records for a file of fs mode m (core.filemode:
// the owner's execute bit), and whether git records such a file at all.
func fileMode(m fs.FileMode) (uint32, bool) {
	switch {
	case m.IsRegular():
		if m&0o100 != 0 {
			return modeExec, true
		}
		return modeFile, true
	case m&fs.ModeSymlink != 0:
		return modeLink, true
	}
	return 0, false
}

// smallBlob is the size up to which a blob is hashed from memory; larger
// files are streamed.
const smallBlob = 1 << 20

// objectPath is the file of loose object o in the store.
func (c *Checkpoints) objectPath(o oid) string {
	h := o.String()
	return filepath.Join(c.store, "objects", h[:2], h[2:])
}

// hashObject returns the id of an object of kind with body.
func hashObject(kind string, body []byte) oid {
	h := sha1.New()
	fmt.Fprintf(h, "%s %d\x00", kind, len(body))
	h.Write(body)
	var o oid
	h.Sum(o[:0])
	return o
}

// has reports whether the store has o as a loose object; a present one
// is freshened (its time set to now), as git does before it would write
// it, so that a prune running meanwhile keeps it.
func (c *Checkpoints) has(o oid) bool {
	p := c.objectPath(o)
	now := time.Now()
	return os.Chtimes(p, now, now) == nil
}

// writeObject stores an object of kind with body unless the store has
// it loose already, and returns its id. An object the store has only in
// a pack is written loose again (git reads either).
func (c *Checkpoints) writeObject(kind string, body []byte) (oid, error) {
	o := hashObject(kind, body)
	if c.has(o) {
		return o, nil
	}
	return o, c.writeLoose(o, func(w io.Writer) error {
		if _, err := fmt.Fprintf(w, "%s %d\x00", kind, len(body)); err != nil {
			return err
		}
		_, err := w.Write(body)
		return err
	})
}

// zlibWriters keeps compressors (each holds about a megabyte of state,
// too much to make per object).
var zlibWriters = sync.Pool{New: func() any {
	zw, _ := zlib.NewWriterLevel(io.Discard, zlib.BestSpeed) // git's core.looseCompression
	return zw
}}

// writeLoose writes loose object o, whose uncompressed bytes write
// produces, through a temporary file renamed into place.
func (c *Checkpoints) writeLoose(o oid, write func(io.Writer) error) error {
	p := c.objectPath(o)
	dir := filepath.Dir(p)
	if !c.objDirs[dir] {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		if c.objDirs == nil {
			c.objDirs = map[string]bool{}
		}
		c.objDirs[dir] = true
	}
	// A name of its own (as git's mkstemp): two snapshots of one
	// process (two runs) may write the same object at once.
	f, err := os.CreateTemp(dir, "tmp_obj_")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	if err := f.Chmod(0o444); err != nil { // read-only, as git's
		f.Close()
		return err
	}
	zw := zlibWriters.Get().(*zlib.Writer)
	defer zlibWriters.Put(zw)
	zw.Reset(f)
	err = write(zw)
	if cerr := zw.Close(); err == nil {
		err = cerr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, p)
	}
	return err
}

// errStore marks writeFile's errors that are the store's (writing the
// object), not the file's: the file is readable, so leaving it out of
// the snapshot would be wrong.
var errStore = errors.New("checkpoint: writing to the store")

func storeErr(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: %w", errStore, err)
}

// errChanged is writeFile's error for a file that changed while it was
// read: the next snapshot reads it again (its change is queued).
var errChanged = errors.New("checkpoint: file changed while it was read")

// writeFile stores the blob of the file at abs (fi its lstat) and returns
// its id and tree mode.
func (c *Checkpoints) writeFile(abs string, fi fs.FileInfo) (oid, uint32, error) {
	mode, ok := fileMode(fi.Mode())
	if !ok {
		return oid{}, 0, fmt.Errorf("checkpoint: %s is not a file", abs)
	}
	if mode == modeLink {
		target, err := os.Readlink(abs)
		if err != nil {
			return oid{}, 0, err
		}
		o, err := c.writeObject("blob", []byte(target))
		return o, mode, storeErr(err)
	}
	f, err := os.Open(abs)
	if err != nil {
		return oid{}, 0, err
	}
	defer f.Close()
	size := fi.Size()
	if size <= smallBlob {
		// One byte more than the size, to see a file that grew.
		if int64(cap(c.buf)) < size+1 {
			c.buf = make([]byte, size+1)
		}
		b := c.buf[:size+1]
		n, err := io.ReadFull(f, b)
		switch {
		case (err == io.ErrUnexpectedEOF || err == io.EOF) && int64(n) == size:
		case err == nil || err == io.ErrUnexpectedEOF || err == io.EOF:
			return oid{}, 0, errChanged
		default:
			return oid{}, 0, err
		}
		o, err := c.writeObject("blob", b[:n])
		return o, mode, storeErr(err)
	}
	// A large file: hash it in one pass, then compress it in a second
	// pass if the store lacks it.
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", size)
	if n, err := io.Copy(h, f); err != nil || n != size {
		if err == nil {
			err = errChanged
		}
		return oid{}, 0, err
	}
	var o oid
	h.Sum(o[:0])
	if c.has(o) {
		return o, mode, nil
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return oid{}, 0, err
	}
	err = c.writeLoose(o, func(w io.Writer) error {
		fmt.Fprintf(w, "blob %d\x00", size)
		n, err := io.Copy(w, io.LimitReader(f, size+1))
		if err == nil && n != size {
			err = errChanged
		}
		return err
	})
	if err != nil && !errors.Is(err, errChanged) {
		// The store's, or a read failing midway: the full snapshot
		// (git add --ignore-errors) settles which.
		err = storeErr(err)
	}
	return o, mode, err
}

// treeEntry is one entry of a tree: a file (blob), a link, a subtree or
// a gitlink.
type treeEntry struct {
	mode uint32
	oid  oid
}

// encodeTree is the body of a tree object with entries: sorted by name,
// a subtree's name compared as if it ended with a slash.
func encodeTree(entries map[string]treeEntry) []byte {
	names := make([]string, 0, len(entries))
	for n := range entries {
		names = append(names, n)
	}
	key := func(n string) string {
		if entries[n].mode == modeTree {
			return n + "/"
		}
		return n
	}
	slices.SortFunc(names, func(a, b string) int { return strings.Compare(key(a), key(b)) })
	var b bytes.Buffer
	for _, n := range names {
		e := entries[n]
		b.WriteString(strconv.FormatUint(uint64(e.mode), 8))
		b.WriteByte(' ')
		b.WriteString(n)
		b.WriteByte(0)
		b.Write(e.oid[:])
	}
	return b.Bytes()
}

// commit writes a commit of tree with parent (none if empty) and message,
// as keel, now.
func (c *Checkpoints) commit(tree, parent, message string) (oid, error) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "tree %s\n", tree)
	if parent != "" {
		fmt.Fprintf(&b, "parent %s\n", parent)
	}
	ts := time.Now().Unix()
	fmt.Fprintf(&b, "author keel <keel@localhost> %d +0000\ncommitter keel <keel@localhost> %d +0000\n\n%s\n", ts, ts, message)
	return c.writeObject("commit", b.Bytes())
}

// setRef points ref (refs/...) at o as a loose ref, through a lock file
// as git does; a loose ref overrides a packed one.
func (c *Checkpoints) setRef(ref string, o oid) error {
	if !strings.HasPrefix(ref, "refs/") || strings.Contains(ref, "..") || strings.ContainsAny(ref, " ~^:?*[\\") {
		return fmt.Errorf("checkpoint: bad ref %q", ref)
	}
	p := filepath.Join(c.store, filepath.FromSlash(ref))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	lock := p + ".lock"
	f, err := os.OpenFile(lock, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	_, err = f.WriteString(o.String() + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(lock, p)
	}
	if err != nil {
		os.Remove(lock)
	}
	return err
}
