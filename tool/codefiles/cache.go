package codefiles

import (
	"io/fs"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// The digests of files hashed before, by what identifies a file's
// content without reading it: its device and inode, size, mode, and
// modification and change times. A write changes the change time,
// which no program can set (utimes sets the others), so a file changed
// in place, replaced by a rename, or whose modification time was set
// back, is read again. An unchanged 5,000-file node_modules then costs
// a walk and a stat per file.

// cacheKey identifies a file's content as its metadata tells it.
type cacheKey struct {
	dev, ino     uint64
	size         int64
	mode         uint32
	mtime, ctime int64 // nanoseconds
}

// maxCached bounds the digests kept; past it the cache starts afresh.
const maxCached = 200_000

// racy is how recent a file's times may be for its digest to be kept:
// on a filesystem whose times are coarse (a second, two on FAT), a file
// written again within the same tick after Keel read it keeps its
// times, so a digest is kept only for files whose times are older than
// any tick (as git does for its index).
const racy = 2 * time.Second

var cache = struct {
	sync.Mutex
	m map[cacheKey]string
}{m: map[cacheKey]string{}}

// hashed counts the files read and hashed (for tests).
var hashed atomic.Int64

// now is the clock of the racy check.
var now = time.Now

func keyOf(fi fs.FileInfo) (cacheKey, bool) {
	if fi == nil {
		return cacheKey{}, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return cacheKey{}, false
	}
	return cacheKey{
		dev: uint64(st.Dev), ino: st.Ino, size: st.Size, mode: st.Mode,
		mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano(),
	}, true
}

// cached returns the digest of a file hashed before with the same
// metadata.
func cached(fi fs.FileInfo) (string, bool) {
	k, ok := keyOf(fi)
	if !ok {
		return "", false
	}
	cache.Lock()
	defer cache.Unlock()
	sum, ok := cache.m[k]
	return sum, ok
}

// remember keeps sum as the digest of the file fi (read just now),
// unless its times are too recent to tell a later write apart.
func remember(fi fs.FileInfo, sum string) {
	k, ok := keyOf(fi)
	if !ok {
		return
	}
	if t := now().Add(-racy).UnixNano(); k.mtime > t || k.ctime > t {
		return
	}
	cache.Lock()
	defer cache.Unlock()
	if len(cache.m) >= maxCached {
		clear(cache.m)
	}
	cache.m[k] = sum
}

// sameFile reports whether a and b are the same file with the same
// metadata (the file opened is the one the walk saw).
func sameFile(a, b fs.FileInfo) bool {
	ka, ok1 := keyOf(a)
	kb, ok2 := keyOf(b)
	return ok1 && ok2 && ka == kb
}
