package sandbox

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
)

// Subcommand is the hidden kin subcommand that runs Main: the daemon starts
// an agent as [kinBinary, Subcommand, Args(spec)...].
const Subcommand = "sandbox-exec"

// Spec is what the shim applies before exec'ing the agent's command.
type Spec struct {
	// RW are absolute, clean, canonical paths (directories or files)
	// granted read, write, create, remove, rename/link within, and execute.
	RW []string `json:"rw,omitempty"`
	// RO are absolute, clean, canonical paths granted read and execute.
	RO []string `json:"ro,omitempty"`
	// Optional are paths of RW and RO whose grant is left out, rather
	// than failing the start, where their file system's server cannot
	// answer (ENOTCONN, ECONNABORTED: it went away; EIO: it gave up):
	// kin's served agent/, whose daemon may die, or lose its store, while
	// a shim sets up. Every other grant is left out only where its path is
	// not there or the agent's user cannot reach it (ENOENT, ENOTDIR,
	// EACCES): an error on an agent's home must not silently become no
	// access to it.
	Optional []string `json:"optional,omitempty"`
	// Held are grants kin opened and checked itself, passed as inherited
	// descriptors: the shim adds their rules on the descriptors, never
	// opening their paths again (see Held).
	Held []Held `json:"held,omitempty"`
	// Restrict false means no Landlock at all (the agent's policy lists no
	// mounts); the limits still apply.
	Restrict bool `json:"restrict,omitempty"`
	// BestEffort: the operator allowed running unrestricted where the
	// kernel has no Landlock.
	BestEffort bool `json:"best_effort,omitempty"`
	// CPUSeconds, MemoryBytes and OpenFiles set RLIMIT_CPU, RLIMIT_AS and
	// RLIMIT_NOFILE (soft = hard); 0 leaves the limit as inherited.
	CPUSeconds  int64 `json:",omitempty"`
	MemoryBytes int64 `json:",omitempty"`
	OpenFiles   int64 `json:",omitempty"`
	// InheritOpenFiles, when OpenFiles is 0, is the RLIMIT_NOFILE the
	// agent gets as if inherited: the limit the daemon itself started
	// with, before it raised its own to hold every agent's descriptors
	// (kin serve). Nil leaves the limit as inherited.
	InheritOpenFiles *OpenFilesLimit `json:"inherit_open_files,omitempty"`
	// Processes sets RLIMIT_NPROC (soft = hard): the tasks the agent's
	// uid may have, counted in the agent's user namespace where it has
	// one. The daemon sets it only where that uid (or namespace) is the
	// agent's own, so that it bounds this agent and nothing else.
	Processes int64 `json:",omitempty"`
	// All is the default view every agent gets when its policy names no
	// mounts: read, write and execute everywhere, except beneath Hidden
	// (nothing there unless RW or RO names a path inside) and beneath the
	// RO paths (read only). Landlock only grants, so the shim grants every
	// entry off the paths from / down to each hidden or read-only path,
	// as they exist when it starts (see view.go). Needs Restrict.
	All bool `json:"all,omitempty"`
	// Hidden are absolute, clean, canonical paths the All view leaves
	// out: kin's home and its agent filesystem.
	Hidden []string `json:"hidden,omitempty"`
	// ViewFD, when not 0, is an inherited descriptor of a Landlock ruleset
	// the daemon made (View.Ruleset) holding the All view's rules: the
	// shim adds its other rules to it and restricts itself with it rather
	// than walking the view (and making a ruleset) itself. Needs All.
	ViewFD int `json:"view_fd,omitempty"`
	// ScopeSignals keeps the agent from signalling any process outside
	// its own Landlock domain (LANDLOCK_SCOPE_SIGNAL, ABI 6): not the
	// daemon, not another agent. Older kernels ignore it; the daemon says
	// so at start.
	ScopeSignals bool `json:"scope_signals,omitempty"`
	// Init makes the shim stay as the init of the agent's PID namespace:
	// it starts Argv as its child, forwards signals to every process of
	// the namespace, reaps orphans, and exits with the child's status
	// once the child ends (the kernel then kills whatever is left in the
	// namespace). See init.go.
	Init bool `json:"init,omitempty"`
	// Argv is the agent's command; Argv[0] is looked up in the PATH of the
	// shim's environment when it has no slash.
	Argv []string `json:"argv"`
}

// OpenFilesLimit is an RLIMIT_NOFILE, soft and hard.
type OpenFilesLimit struct {
	Soft uint64 `json:"soft"`
	Hard uint64 `json:"hard"`
}

// Held is a grant the daemon opened (O_PATH, following no link) and
// checked against what the policy check approved; the process inherits it
// as descriptor FD. The shim grants the file FD is, whatever Path names
// now: Path, clean and absolute, only names it in messages and in the
// checks of rules inside others. Dev and Ino are the file the daemon
// checked; the shim refuses a descriptor that is another file, or a link.
type Held struct {
	Path string `json:"path"`
	FD   int    `json:"fd"`
	RW   bool   `json:"rw,omitempty"`
	Dev  uint64 `json:"dev"`
	Ino  uint64 `json:"ino"`
}

// specFlag is the one flag of the shim's command line.
const specFlag = "--spec"

// maxArgLen is Linux's limit on one argument string (MAX_ARG_STRLEN, 32
// pages), less a margin: a longer spec would make execve fail with E2BIG.
const maxArgLen = 32*4096 - 1024

// Args returns the shim's command line after the program and Subcommand:
// ["--spec", "<spec as JSON>"]. It validates spec as Main will.
func Args(spec Spec) ([]string, error) {
	if err := spec.validate(); err != nil {
		return nil, err
	}
	b, err := json.Marshal(spec)
	if err != nil {
		return nil, fmt.Errorf("sandbox: encoding spec: %w", err)
	}
	if len(b) > maxArgLen {
		return nil, fmt.Errorf("sandbox: spec is %d bytes as JSON, more than one argument may hold (%d)", len(b), maxArgLen)
	}
	return []string{specFlag, string(b)}, nil
}

// parseArgs is the inverse of Args: it accepts exactly what Args produces
// (the --spec=JSON form too) and validates the spec.
func parseArgs(args []string) (Spec, error) {
	var raw string
	switch {
	case len(args) == 2 && args[0] == specFlag:
		raw = args[1]
	case len(args) == 1 && strings.HasPrefix(args[0], specFlag+"="):
		raw = strings.TrimPrefix(args[0], specFlag+"=")
	case len(args) == 0:
		return Spec{}, errors.New("bad arguments: want --spec JSON, got nothing")
	default:
		return Spec{}, fmt.Errorf("bad arguments: want --spec JSON, got %d argument(s) starting with %s", len(args), quote(args[0]))
	}
	var spec Spec
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&spec); err != nil {
		return Spec{}, fmt.Errorf("bad spec: %v", oneLine(err.Error()))
	}
	if dec.More() {
		return Spec{}, errors.New("bad spec: more than one JSON value")
	}
	if err := spec.validate(); err != nil {
		return Spec{}, err
	}
	return spec, nil
}

// validate checks what the shim relies on. Its errors start with "bad
// spec:" and are one line.
func (s *Spec) validate() error {
	if len(s.Argv) == 0 {
		return errors.New("bad spec: argv is empty")
	}
	if s.Argv[0] == "" {
		return errors.New("bad spec: argv[0] is empty")
	}
	for i, a := range s.Argv {
		if strings.IndexByte(a, 0) >= 0 {
			return fmt.Errorf("bad spec: argv[%d] contains a NUL byte", i)
		}
	}
	for _, l := range []struct {
		name string
		v    int64
	}{{"CPUSeconds", s.CPUSeconds}, {"MemoryBytes", s.MemoryBytes}, {"OpenFiles", s.OpenFiles}, {"Processes", s.Processes}} {
		if l.v < 0 {
			return fmt.Errorf("bad spec: %s is negative (%d)", l.name, l.v)
		}
	}
	if l := s.InheritOpenFiles; l != nil && (l.Soft == 0 || l.Soft > l.Hard) {
		return fmt.Errorf("bad spec: inherit_open_files soft %d, hard %d: want 0 < soft <= hard", l.Soft, l.Hard)
	}
	for _, list := range []struct {
		name  string
		paths []string
	}{{"rw", s.RW}, {"ro", s.RO}, {"hidden", s.Hidden}} {
		for _, p := range list.paths {
			if err := checkPath(p); err != nil {
				return fmt.Errorf("bad spec: %s path %s: %v", list.name, quote(p), err)
			}
		}
	}
	for _, p := range s.Optional {
		if !slices.Contains(s.RW, p) && !slices.Contains(s.RO, p) {
			return fmt.Errorf("bad spec: optional path %s is not an rw or ro path", quote(p))
		}
	}
	rw, ro := slices.Clone(s.RW), slices.Clone(s.RO)
	fds := map[int]bool{}
	for i, h := range s.Held {
		if err := checkPath(h.Path); err != nil {
			return fmt.Errorf("bad spec: held[%d] path %s: %v", i, quote(h.Path), err)
		}
		if h.FD < 3 || fds[h.FD] {
			return fmt.Errorf("bad spec: held[%d] (%s) has descriptor %d: want a distinct descriptor of 3 or more (0-2 are stdio)", i, quote(h.Path), h.FD)
		}
		fds[h.FD] = true
		if h.RW {
			rw = append(rw, h.Path)
		} else {
			ro = append(ro, h.Path)
		}
	}
	if len(s.Held) > 0 && !s.Restrict {
		return errors.New("bad spec: held grants without restrict: the descriptors would only leak to the agent")
	}
	if s.All && !s.Restrict {
		return errors.New("bad spec: all needs restrict")
	}
	if len(s.Hidden) > 0 && !s.All {
		return errors.New("bad spec: hidden paths need all")
	}
	if s.ViewFD != 0 {
		if !s.All {
			return errors.New("bad spec: view_fd needs all")
		}
		if s.ViewFD < 3 || fds[s.ViewFD] {
			return fmt.Errorf("bad spec: view_fd is descriptor %d: want a descriptor of 3 or more that no held grant uses", s.ViewFD)
		}
	}
	for _, h := range s.Hidden {
		if h == "/" {
			return errors.New("bad spec: hidden path \"/\" would hide everything")
		}
	}
	// Landlock grants the union of a layer's rules: a read-only path
	// under a read-write one would be writable all the same.
	for _, ro := range ro {
		for _, rw := range rw {
			if within(ro, rw) {
				return fmt.Errorf("bad spec: ro path %s is inside rw path %s: Landlock grants the union of rules, so it would be writable", quote(ro), quote(rw))
			}
		}
	}
	return nil
}

// checkPath accepts absolute, clean paths without NUL bytes.
func checkPath(p string) error {
	switch {
	case p == "":
		return errors.New("is empty")
	case strings.IndexByte(p, 0) >= 0:
		return errors.New("contains a NUL byte")
	case !filepath.IsAbs(p):
		return errors.New("is not absolute")
	case filepath.Clean(p) != p:
		return fmt.Errorf("is not clean (%s)", quote(filepath.Clean(p)))
	}
	return nil
}

// within says whether path p is dir or beneath it (both clean, absolute).
func within(p, dir string) bool {
	if dir == "/" || p == dir {
		return true
	}
	return strings.HasPrefix(p, dir+"/")
}

// DefaultSystemRO returns the read-only system paths a program needs: the
// canonical forms of /usr /bin /sbin /lib /lib64 /lib32 /etc /proc /sys
// that exist here, without those another entry covers (on a merged-/usr
// system /bin is a link to usr/bin, already under /usr). The daemon passes
// them in Spec.RO; Main never adds them by itself.
func DefaultSystemRO() []string {
	return canonicalExisting([]string{"/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/etc", "/proc", "/sys"})
}

// DefaultSystemRW returns the device files any program may write: /dev/null
// (os/exec opens it for every child without a stdin or stdout), /dev/zero,
// /dev/full, /dev/random and /dev/urandom, those that exist. Deliberately
// not: /dev/tty, /dev/pts and /dev/ptmx (a terminal another process of the
// same uid uses) and /dev/shm (a directory shared by every process here).
func DefaultSystemRW() []string {
	return canonicalExisting([]string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"})
}

// canonicalExisting resolves the paths that exist and drops duplicates and
// those beneath another entry.
func canonicalExisting(candidates []string) []string {
	var all []string
	for _, c := range candidates {
		p, err := filepath.EvalSymlinks(c)
		if err != nil || slices.Contains(all, p) {
			continue
		}
		all = append(all, p)
	}
	var out []string
	for _, p := range all {
		if !slices.ContainsFunc(all, func(q string) bool { return q != p && within(p, q) }) {
			out = append(out, p)
		}
	}
	return out
}

// quote quotes a user-given string for a one-line message, shortened.
func quote(s string) string {
	const max = 200
	if len(s) > max {
		s = s[:max] + "..."
	}
	return fmt.Sprintf("%q", s)
}

// oneLine makes an error text one line.
func oneLine(s string) string {
	return string(bytes.ReplaceAll([]byte(s), []byte("\n"), []byte(" ")))
}
