//go:build linux

package linux

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"strconv"
	"strings"
)

// guardDir holds the persisted start states of the workspace's live
// sandboxes when the sandbox has no state directory (read-only inside
// every sandbox, like all of .keel); with one ([Options].StateDir) they
// are in its "sandbox" directory, outside the workspace.
const guardDir = ".keel/sandbox"

// stateStore is where guard states are persisted: a directory of root.
type stateStore struct {
	root *os.Root
	dir  string
	// inWorkspace is set when root is the workspace (guardDir).
	inWorkspace bool
}

func (s stateStore) mkdir() error {
	if s.inWorkspace {
		return mkdirAllLike(s.root, s.dir, ".keel")
	}
	return s.root.MkdirAll(s.dir, 0o755)
}

// guardState is a guard's start state as persisted.
type guardState struct {
	Version int               `json:"version"`
	PID     int               `json:"pid"`
	Start   uint64            `json:"start"` // the process's start time, in clock ticks after boot
	Boot    string            `json:"boot"`  // the kernel's boot id
	Snap    map[string]fileID `json:"snapshot"`
	Absent  []string          `json:"absent,omitempty"`
	Incl    []string          `json:"includes,omitempty"`
}

// persist writes g's start state to .keel/sandbox/guard-<pid>-<random>.json
// (atomically), so that a sandbox on this workspace after a crash of this
// process can check what it left.
func (g *guard) persist() error {
	start, err := procStart(os.Getpid())
	if err != nil {
		return err
	}
	st := guardState{Version: guardVersion, PID: os.Getpid(), Start: start, Boot: bootID(), Snap: g.snap, Absent: g.absent, Incl: g.incl}
	data, err := json.Marshal(&st)
	if err != nil {
		return fmt.Errorf("sandbox/linux: git guard state: %w", err)
	}
	var rnd [6]byte
	rand.Read(rnd[:])
	st2 := g.store
	name := path.Join(st2.dir, fmt.Sprintf("guard-%d-%s.json", os.Getpid(), hex.EncodeToString(rnd[:])))
	if err := st2.mkdir(); err != nil {
		return fmt.Errorf("sandbox/linux: git guard state: %w", err)
	}
	tmp := name + ".tmp"
	if err := st2.root.WriteFile(tmp, data, 0o644); err != nil {
		return fmt.Errorf("sandbox/linux: git guard state: %w", err)
	}
	if err := st2.root.Rename(tmp, name); err != nil {
		st2.root.Remove(tmp)
		return fmt.Errorf("sandbox/linux: git guard state: %w", err)
	}
	g.record = name
	return nil
}

// forget removes g's persisted state (after its last check).
func (g *guard) forget() {
	if g.record != "" {
		g.store.root.Remove(g.record)
		g.record = ""
	}
}

// recoverStale checks the workspace against the start state of every
// sandbox whose process is gone without closing it (killed, crashed),
// quarantines what those left, and removes their states. It returns the
// quarantines and warnings for paths it could not handle.
func recoverStale(root *os.Root, dir string, store stateStore) ([]Quarantine, []string) {
	names, err := readDirNames(store.root, store.dir)
	if err != nil {
		return nil, nil
	}
	var qs []Quarantine
	var warns []string
	boot := bootID()
	for _, n := range names {
		if !strings.HasPrefix(n, "guard-") || !strings.HasSuffix(n, ".json") {
			continue
		}
		p := path.Join(store.dir, n)
		data, err := readSmall(store.root, p, 64<<20)
		if err != nil {
			continue
		}
		var st guardState
		if err := json.Unmarshal(data, &st); err != nil || st.Version != guardVersion {
			warns = append(warns, fmt.Sprintf("ignoring unreadable git guard state %s: %v", p, err))
			store.root.Remove(p)
			continue
		}
		if st.Boot == boot {
			if s, err := procStart(st.PID); err == nil && s == st.Start {
				continue // its sandbox may still be running
			}
		}
		g := &guard{root: root, dir: dir, snap: st.Snap, absent: st.Absent, incl: st.Incl, margin: racyMargin, euid: os.Geteuid()}
		if g.snap == nil {
			g.snap = map[string]fileID{}
		}
		q, w := g.check()
		qs = append(qs, q...)
		warns = append(warns, w...)
		if g.unsafe() == nil {
			// Keep the state of a check that could not make everything
			// safe: the next sandbox checks it again.
			store.root.Remove(p)
		}
	}
	return qs, warns
}

// procStart returns the start time of process pid (field 22 of
// /proc/pid/stat, clock ticks after boot).
func procStart(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("sandbox/linux: malformed /proc/%d/stat", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return 0, fmt.Errorf("sandbox/linux: malformed /proc/%d/stat", pid)
	}
	return strconv.ParseUint(f[19], 10, 64)
}

// bootID returns the kernel's boot id, or "" if unknown.
func bootID() string {
	b, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	return strings.TrimSpace(string(b))
}
