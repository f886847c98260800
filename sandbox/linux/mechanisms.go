//go:build linux

package linux

import (
	"fmt"
)

// Mechanisms returns how s isolates; the value is a copy.
func (s *Sandbox) Mechanisms() Mechanisms {
	m := s.mech
	m.Namespaces = append([]string(nil), s.mech.Namespaces...)
	m.Warnings = append([]string(nil), s.mech.Warnings...)
	m.Limits = make(map[string]string, len(s.mech.Limits))
	for k, v := range s.mech.Limits {
		m.Limits[k] = v
	}
	return m
}

// describe fills s.mech from the cgroups found and the init's report.
func (s *Sandbox) describe(rep *initReport) {
	m := &s.mech
	m.Limits = map[string]string{}
	via := func(c string) string {
		switch s.cg.limitVia(c) {
		case "v2":
			return "cgroup v2"
		case "v1":
			return "cgroup v1"
		}
		return ""
	}
	if v := via("memory"); v != "" && s.rg != nil {
		m.Limits["memory"] = v
	} else {
		m.Limits["memory"] = "rlimit (RLIMIT_DATA, per process; exhaustion is not reported as a limit)"
	}
	if v := via("pids"); v != "" && s.rg != nil {
		m.Limits["processes"] = v
	} else {
		m.Limits["processes"] = "rlimit (RLIMIT_NPROC, counts every thread of the sandbox)"
	}
	if v := via("cpu"); v != "" && s.rg != nil {
		m.Limits["cpu_share"] = v
	} else {
		m.Limits["cpu_share"] = "none: no cgroup cpu controller"
	}
	m.Limits["cpu_time"] = "rlimit"
	m.Limits["file_size"] = "rlimit"
	m.Limits["open_files"] = "rlimit (not reported as a limit when hit)"
	m.Limits["output"] = "keel"
	m.Limits["wall_time"] = "keel"
	if s.rg != nil {
		m.Tracking = s.cg.tracking()
	} else {
		m.Tracking = "session"
		m.Warnings = append(m.Warnings, "no usable cgroups: a process that starts its own session escapes per-command cleanup until the sandbox closes")
	}
	if rep.Seccomp {
		m.Seccomp = fmt.Sprintf("on (%d system calls refused, plus namespace clone flags, raw and non-IP sockets)", len(deniedSyscalls))
	} else {
		m.Seccomp = "off: " + rep.SeccompNote
		m.Warnings = append(m.Warnings, "seccomp is off")
	}
	if rep.LandlockABI > 0 {
		m.Landlock = fmt.Sprintf("ABI %d", rep.LandlockABI)
	} else {
		m.Landlock = "off: " + rep.LandlockNote
		m.Warnings = append(m.Warnings, "landlock is off: "+rep.LandlockNote)
	}
	m.NoNewPrivs = rep.NoNewPrivs
	if rep.NestedNS {
		m.NestedNamespaces = "blocked"
	} else {
		m.NestedNamespaces = "limited to seccomp (clone, unshare, setns)"
	}
	m.Network = "none"
	m.Warnings = append(m.Warnings, rep.Warnings...)
}
