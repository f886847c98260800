//go:build linux

package linux

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/keel-run/keel/sandbox"
	"golang.org/x/sys/unix"
)

// limitControllers are the cgroup controllers Keel sets limits with.
var limitControllers = []string{"memory", "pids", "cpu"}

// cgroupHost is what this process may use of the machine's cgroups: its
// own group in each mounted v1 hierarchy Keel uses and in the unified
// (v2) hierarchy, when it can create groups there.
type cgroupHost struct {
	v1    map[string]string // controller → our group's directory
	v2    string            // our group's directory in the unified hierarchy
	v2Ctl []string          // limit controllers usable for v2 children
}

// detectCgroups finds the hierarchies from /proc/self/mountinfo and
// /proc/self/cgroup and keeps those where this process can create a
// group.
func detectCgroups() *cgroupHost {
	h := &cgroupHost{v1: map[string]string{}}
	own := map[string]string{} // controller (or "" for v2) → path
	if b, err := os.ReadFile("/proc/self/cgroup"); err == nil {
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			f := strings.SplitN(line, ":", 3)
			if len(f) != 3 {
				continue
			}
			if f[0] == "0" && f[1] == "" {
				own[""] = f[2]
				continue
			}
			for _, c := range strings.Split(f[1], ",") {
				own[c] = f[2]
			}
		}
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return h
	}
	for _, line := range strings.Split(string(mi), "\n") {
		fields := strings.Fields(line)
		sep := slices.Index(fields, "-")
		if sep < 0 || sep+3 >= len(fields)+1 || len(fields) < sep+3 {
			continue
		}
		mnt, fstype, opts := fields[4], fields[sep+1], fields[len(fields)-1]
		root := fields[3]
		switch fstype {
		case "cgroup2":
			p, ok := own[""]
			if !ok || h.v2 != "" {
				continue
			}
			dir := filepath.Join(mnt, strings.TrimPrefix(p, root))
			if writableDir(dir) {
				h.v2 = dir
			}
		case "cgroup":
			for _, c := range append(slices.Clone(limitControllers), "freezer") {
				if !slices.Contains(strings.Split(opts, ","), c) || h.v1[c] != "" {
					continue
				}
				p, ok := own[c]
				if !ok {
					continue
				}
				dir := filepath.Join(mnt, strings.TrimPrefix(p, root))
				if writableDir(dir) {
					h.v1[c] = dir
				}
			}
		}
	}
	if h.v2 != "" {
		avail := strings.Fields(readString(filepath.Join(h.v2, "cgroup.controllers")))
		enabled := strings.Fields(readString(filepath.Join(h.v2, "cgroup.subtree_control")))
		for _, c := range limitControllers {
			if !slices.Contains(avail, c) {
				continue
			}
			if !slices.Contains(enabled, c) {
				// Enabling fails when our own group holds processes
				// (cgroup v2's no-internal-processes rule) unless it is
				// the root; then v2 limits are unavailable.
				if os.WriteFile(filepath.Join(h.v2, "cgroup.subtree_control"), []byte("+"+c), 0) != nil {
					continue
				}
			}
			h.v2Ctl = append(h.v2Ctl, c)
		}
	}
	return h
}

func writableDir(dir string) bool {
	return unix.Access(dir, unix.W_OK|unix.X_OK) == nil
}

func readString(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}

// limitVia returns the hierarchy that enforces controller c: "v2", "v1"
// or "" (none; rlimits stand in where they can).
func (h *cgroupHost) limitVia(c string) string {
	if slices.Contains(h.v2Ctl, c) {
		return "v2"
	}
	if h.v1[c] != "" {
		return "v1"
	}
	return ""
}

// tracking returns how a command's processes are found and killed.
func (h *cgroupHost) tracking() string {
	switch {
	case h.v2 != "":
		return "cgroup v2"
	case h.v1["freezer"] != "":
		return "cgroup v1 freezer"
	case h.v1["pids"] != "":
		return "cgroup v1 pids"
	}
	return ""
}

// runGroup is one sandbox's cgroups: keel-<id> under each usable
// hierarchy, with the init in "init" and each command in "c<n>".
type runGroup struct {
	host *cgroupHost
	v1   map[string]string // controller → run directory
	v2   string
	uid  int // owner given to v2 cgroup.procs files (delegation), -1 for none
	seq  atomic.Uint64

	// next are the groups of a command not started yet, created ahead
	// (empty, no limits; see prepareNext): the next newCommand takes
	// them, and their mkdirs are no longer part of that command's start.
	// Every command still gets groups of its own, never used before.
	nextMu    sync.Mutex
	next      *cmdGroup
	preparing bool
}

// v1Used lists the v1 controllers a run uses, in a fixed order.
func (h *cgroupHost) v1Used() []string {
	var out []string
	for _, c := range append(slices.Clone(limitControllers), "freezer") {
		if h.v1[c] == "" {
			continue
		}
		if c == "freezer" && h.v2 != "" {
			continue // v2 tracks and kills; the freezer is not needed
		}
		if slices.Contains(h.v2Ctl, c) {
			continue
		}
		out = append(out, c)
	}
	return out
}

// newRunGroup creates the run's groups. uid, when not -1, is the host
// uid the sandbox runs as, which must own the v2 cgroup.procs files it
// clones children into.
func newRunGroup(h *cgroupHost, name string, uid int) (*runGroup, error) {
	r := &runGroup{host: h, v1: map[string]string{}, uid: uid}
	mk := func(dir string) error {
		if err := os.Mkdir(dir, 0o755); err != nil {
			return err
		}
		return os.Mkdir(filepath.Join(dir, "init"), 0o755)
	}
	for _, c := range h.v1Used() {
		dir := filepath.Join(h.v1[c], name)
		if err := mk(dir); err != nil {
			r.remove()
			return nil, fmt.Errorf("sandbox/linux: create cgroup %s: %w", dir, err)
		}
		r.v1[c] = dir
	}
	if h.v2 != "" {
		dir := filepath.Join(h.v2, name)
		if err := mk(dir); err != nil {
			r.remove()
			return nil, fmt.Errorf("sandbox/linux: create cgroup %s: %w", dir, err)
		}
		r.v2 = dir
		if len(h.v2Ctl) > 0 {
			ctl := "+" + strings.Join(h.v2Ctl, " +")
			if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte(ctl), 0); err != nil {
				r.remove()
				return nil, fmt.Errorf("sandbox/linux: enable %s in %s: %w", ctl, dir, err)
			}
		}
		if uid >= 0 {
			if err := os.Chown(filepath.Join(dir, "cgroup.procs"), uid, uid); err != nil {
				r.remove()
				return nil, fmt.Errorf("sandbox/linux: delegate %s: %w", dir, err)
			}
		}
	}
	return r, nil
}

// sweepStale removes run groups left behind by Keel processes that died
// without closing their sandboxes (named keel-<pid>-<init pid>; the
// groups are empty once their init is gone).
func (h *cgroupHost) sweepStale() {
	bases := []string{h.v2}
	for _, c := range h.v1Used() {
		bases = append(bases, h.v1[c])
	}
	for _, base := range bases {
		if base == "" {
			continue
		}
		entries, _ := os.ReadDir(base)
		for _, e := range entries {
			var owner, initPid int
			if !e.IsDir() {
				continue
			}
			if _, err := fmt.Sscanf(e.Name(), "keel-%d-%d", &owner, &initPid); err != nil {
				continue
			}
			if owner == os.Getpid() || unix.Kill(owner, 0) != unix.ESRCH {
				continue
			}
			removeGroupTree(filepath.Join(base, e.Name()))
		}
	}
}

// addInit moves the init process (host pid) into every "init" group.
func (r *runGroup) addInit(pid int) error {
	b := []byte(strconv.Itoa(pid))
	for _, c := range r.host.v1Used() {
		if err := os.WriteFile(filepath.Join(r.v1[c], "init", "cgroup.procs"), b, 0); err != nil {
			return fmt.Errorf("sandbox/linux: move init into cgroup %s: %w", c, err)
		}
	}
	if r.v2 != "" {
		if err := os.WriteFile(filepath.Join(r.v2, "init", "cgroup.procs"), b, 0); err != nil {
			return fmt.Errorf("sandbox/linux: move init into cgroup v2: %w", err)
		}
	}
	return nil
}

// initTasks opens the v1 "init" groups' tasks files, which the spawner
// thread writes to go back after each fork.
func (r *runGroup) initTasks() ([]*os.File, error) {
	var out []*os.File
	for _, c := range r.host.v1Used() {
		f, err := os.OpenFile(filepath.Join(r.v1[c], "init", "tasks"), os.O_WRONLY, 0)
		if err != nil {
			closeAll(out)
			return nil, fmt.Errorf("sandbox/linux: open cgroup %s tasks: %w", c, err)
		}
		out = append(out, f)
	}
	return out, nil
}

// remove deletes the run's groups; processes must be gone.
func (r *runGroup) remove() {
	for _, dir := range r.v1 {
		removeGroupTree(dir)
	}
	if r.v2 != "" {
		removeGroupTree(r.v2)
	}
}

func removeGroupTree(dir string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.IsDir() {
			removeGroupTree(filepath.Join(dir, e.Name()))
		}
	}
	for i := 0; i < 100; i++ {
		err := unix.Rmdir(dir)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return
		}
		time.Sleep(time.Duration(i+1) * time.Millisecond)
	}
}

// cmdGroup is one command's cgroups.
type cmdGroup struct {
	run *runGroup
	v1  map[string]string
	v2  string
}

// newCommand creates the groups of one command and sets its limits.
// Processes gets one extra task: the spawner thread sits in the v1
// group while it forks.
func (r *runGroup) newCommand(l sandbox.Limits) (*cmdGroup, error) {
	r.nextMu.Lock()
	c := r.next
	r.next = nil
	r.nextMu.Unlock()
	if c == nil {
		var err error
		if c, err = r.makeGroups(); err != nil {
			return nil, err
		}
	}
	if err := c.setLimits(l); err != nil {
		c.remove()
		return nil, err
	}
	return c, nil
}

// prepareNext creates the next command's groups in the background
// (tracked by wg, which the sandbox waits for before it removes the
// run's groups), unless they exist or are being created.
func (r *runGroup) prepareNext(wg *sync.WaitGroup) {
	r.nextMu.Lock()
	defer r.nextMu.Unlock()
	if r.next != nil || r.preparing {
		return
	}
	r.preparing = true
	wg.Add(1)
	go func() {
		defer wg.Done()
		c, err := r.makeGroups()
		r.nextMu.Lock()
		defer r.nextMu.Unlock()
		r.preparing = false
		if err == nil {
			r.next = c
		}
	}()
}

// makeGroups creates the (empty) groups of one command.
func (r *runGroup) makeGroups() (*cmdGroup, error) {
	name := "c" + strconv.FormatUint(r.seq.Add(1), 10)
	c := &cmdGroup{run: r, v1: map[string]string{}}
	for ctl, dir := range r.v1 {
		d := filepath.Join(dir, name)
		if err := os.Mkdir(d, 0o755); err != nil {
			c.remove()
			return nil, fmt.Errorf("sandbox/linux: create cgroup %s: %w", d, err)
		}
		c.v1[ctl] = d
	}
	if r.v2 != "" {
		d := filepath.Join(r.v2, name)
		if err := os.Mkdir(d, 0o755); err != nil {
			c.remove()
			return nil, fmt.Errorf("sandbox/linux: create cgroup %s: %w", d, err)
		}
		c.v2 = d
		if r.uid >= 0 {
			if err := os.Chown(filepath.Join(d, "cgroup.procs"), r.uid, r.uid); err != nil {
				c.remove()
				return nil, fmt.Errorf("sandbox/linux: delegate %s: %w", d, err)
			}
		}
	}
	return c, nil
}

func (c *cmdGroup) dir(ctl string) (string, string) {
	switch c.run.host.limitVia(ctl) {
	case "v2":
		return c.v2, "v2"
	case "v1":
		return c.v1[ctl], "v1"
	}
	return "", ""
}

func (c *cmdGroup) setLimits(l sandbox.Limits) error {
	write := func(dir, file, val string) error {
		if err := os.WriteFile(filepath.Join(dir, file), []byte(val), 0); err != nil {
			return fmt.Errorf("sandbox/linux: set %s=%s: %w", file, val, err)
		}
		return nil
	}
	if l.Memory > 0 {
		dir, v := c.dir("memory")
		mem := strconv.FormatInt(l.Memory, 10)
		switch v {
		case "v1":
			if err := write(dir, "memory.limit_in_bytes", mem); err != nil {
				return err
			}
			if _, err := os.Stat(filepath.Join(dir, "memory.memsw.limit_in_bytes")); err == nil {
				if err := write(dir, "memory.memsw.limit_in_bytes", mem); err != nil {
					return err
				}
			}
		case "v2":
			if err := write(dir, "memory.max", mem); err != nil {
				return err
			}
			if _, err := os.Stat(filepath.Join(dir, "memory.swap.max")); err == nil {
				if err := write(dir, "memory.swap.max", "0"); err != nil {
					return err
				}
			}
		}
	}
	if l.Processes > 0 {
		if dir, v := c.dir("pids"); v != "" {
			if err := write(dir, "pids.max", strconv.Itoa(l.Processes+1)); err != nil {
				return err
			}
		}
	}
	if l.CPUShare > 0 {
		const period = 100000
		quota := int64(l.CPUShare * period)
		if quota < 1000 {
			quota = 1000
		}
		switch dir, v := c.dir("cpu"); v {
		case "v1":
			if err := write(dir, "cpu.cfs_period_us", strconv.Itoa(period)); err != nil {
				return err
			}
			if err := write(dir, "cpu.cfs_quota_us", strconv.FormatInt(quota, 10)); err != nil {
				return err
			}
		case "v2":
			if err := write(dir, "cpu.max", fmt.Sprintf("%d %d", quota, period)); err != nil {
				return err
			}
		}
	}
	return nil
}

// files opens what the spawner needs to place the command: the v1 tasks
// files (in the order the init's return files use) and the v2 directory.
func (c *cmdGroup) files() ([]*os.File, *os.File, error) {
	var v1 []*os.File
	for _, ctl := range c.run.host.v1Used() {
		f, err := os.OpenFile(filepath.Join(c.v1[ctl], "tasks"), os.O_WRONLY, 0)
		if err != nil {
			closeAll(v1)
			return nil, nil, fmt.Errorf("sandbox/linux: open cgroup %s tasks: %w", ctl, err)
		}
		v1 = append(v1, f)
	}
	var v2 *os.File
	if c.v2 != "" {
		f, err := os.OpenFile(c.v2, os.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			closeAll(v1)
			return nil, nil, fmt.Errorf("sandbox/linux: open cgroup %s: %w", c.v2, err)
		}
		v2 = f
	}
	return v1, v2, nil
}

// procsFile is the file listing the command's processes (host pids).
func (c *cmdGroup) procsFile() string {
	if c.v2 != "" {
		return filepath.Join(c.v2, "cgroup.procs")
	}
	for _, ctl := range []string{"freezer", "pids", "memory", "cpu"} {
		if d := c.v1[ctl]; d != "" {
			return filepath.Join(d, "cgroup.procs")
		}
	}
	return ""
}

// pids lists the command's live processes.
func (c *cmdGroup) pids() []int {
	b, err := os.ReadFile(c.procsFile())
	if err != nil {
		return nil
	}
	var out []int
	for _, f := range bytes.Fields(b) {
		if p, err := strconv.Atoi(string(f)); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// signal sends sig to every process of the command.
func (c *cmdGroup) signal(sig syscall.Signal) {
	for _, p := range c.pids() {
		_ = unix.Kill(p, sig)
	}
}

// kill SIGKILLs every process of the command, including ones forked
// while it runs, and waits (up to about five seconds) until the group is
// empty. Under v2 this is cgroup.kill; under v1 the freezer stops the
// group first so nothing forks between listing and killing.
func (c *cmdGroup) kill() error {
	if c.v2 != "" {
		if err := os.WriteFile(filepath.Join(c.v2, "cgroup.kill"), []byte("1"), 0); err != nil {
			// No cgroup.kill before Linux 5.14: kill what is listed.
			c.killLoop()
		}
		return c.waitEmpty()
	}
	if fz := c.v1["freezer"]; fz != "" {
		state := filepath.Join(fz, "freezer.state")
		if os.WriteFile(state, []byte("FROZEN"), 0) == nil {
			for i := 0; i < 1000 && strings.TrimSpace(readString(state)) != "FROZEN"; i++ {
				time.Sleep(time.Millisecond)
			}
			c.signal(unix.SIGKILL)
			_ = os.WriteFile(state, []byte("THAWED"), 0)
			return c.waitEmpty()
		}
	}
	if d := c.v1["pids"]; d != "" {
		_ = os.WriteFile(filepath.Join(d, "pids.max"), []byte("0"), 0)
	}
	c.killLoop()
	return c.waitEmpty()
}

func (c *cmdGroup) killLoop() {
	for i := 0; i < 100; i++ {
		ps := c.pids()
		if len(ps) == 0 {
			return
		}
		for _, p := range ps {
			_ = unix.Kill(p, unix.SIGKILL)
		}
	}
}

// waitEmpty waits until no process is left in the group.
func (c *cmdGroup) waitEmpty() error {
	deadline := time.Now().Add(5 * time.Second)
	for d := 50 * time.Microsecond; ; d = min(2*d, 10*time.Millisecond) {
		ps := c.pids()
		if len(ps) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("sandbox/linux: %d processes survived SIGKILL in %s", len(ps), c.procsFile())
		}
		for _, p := range ps {
			_ = unix.Kill(p, unix.SIGKILL)
		}
		time.Sleep(d)
	}
}

// limitHit names the cgroup limit the command ran into: "memory" if the
// OOM killer killed one of its processes, "processes" if a fork failed
// at pids.max; "" otherwise.
func (c *cmdGroup) limitHit() string {
	if dir, v := c.dir("memory"); v != "" {
		file := "memory.events"
		if v == "v1" {
			file = "memory.oom_control"
		}
		if counter(filepath.Join(dir, file), "oom_kill") > 0 {
			return "memory"
		}
	}
	if dir, v := c.dir("pids"); v != "" {
		if counter(filepath.Join(dir, "pids.events"), "max") > 0 {
			return "processes"
		}
	}
	return ""
}

// counter reads "key value" from a flat-keyed cgroup file.
func counter(file, key string) int64 {
	f, err := os.Open(file)
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if ok && k == key {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

// remove deletes the command's groups (empty by now).
func (c *cmdGroup) remove() {
	for _, d := range c.v1 {
		removeGroupTree(d)
	}
	if c.v2 != "" {
		removeGroupTree(c.v2)
	}
}
