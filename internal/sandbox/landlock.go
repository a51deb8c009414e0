package sandbox

import (
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Filesystem access rights (include/uapi/linux/landlock.h).
const (
	accessExecute     = unix.LANDLOCK_ACCESS_FS_EXECUTE
	accessWriteFile   = unix.LANDLOCK_ACCESS_FS_WRITE_FILE
	accessReadFile    = unix.LANDLOCK_ACCESS_FS_READ_FILE
	accessReadDir     = unix.LANDLOCK_ACCESS_FS_READ_DIR
	accessTruncate    = unix.LANDLOCK_ACCESS_FS_TRUNCATE
	accessIoctlDev    = unix.LANDLOCK_ACCESS_FS_IOCTL_DEV
	accessResolveUnix = 1 << 16 // ABI 9: connect/sendmsg to a pathname unix socket (not yet in x/sys)

	// accessAll is every right this package knows (ABI 9's).
	accessAll = 1<<17 - 1
	// accessFile are the rights that apply to a file that is not a
	// directory: the kernel refuses a rule on a file with any other.
	accessFile = accessExecute | accessWriteFile | accessReadFile | accessTruncate | accessIoctlDev | accessResolveUnix

	// rightsRO is what Spec.RO grants; rightsRW what Spec.RW grants.
	rightsRO = accessExecute | accessReadFile | accessReadDir | accessResolveUnix
	rightsRW = accessAll
)

// handledAccess returns the filesystem rights a kernel of Landlock ABI v
// can restrict, among those this package knows: all of them are handled,
// so everything not granted is denied.
func handledAccess(v int) uint64 {
	switch {
	case v <= 0:
		return 0
	case v == 1:
		return 1<<13 - 1 // execute .. make_sym
	case v == 2:
		return 1<<14 - 1 // + refer
	case v <= 4:
		return 1<<15 - 1 // + truncate (3); 4 adds only network rights
	case v <= 8:
		return 1<<16 - 1 // + ioctl_dev (5); 6-8 add scopes and flags
	default:
		return accessAll // + resolve_unix (9)
	}
}

var abiVersion = sync.OnceValue(func() int {
	v, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if errno != 0 || int(v) < 0 {
		return 0
	}
	return int(v)
})

// ABI returns the kernel's Landlock ABI version, 0 when Landlock is
// unavailable (not built in, or not enabled at boot).
func ABI() int { return abiVersion() }

// rule is one granted path, opened (O_PATH) after its checks.
type rule struct {
	path   string
	fd     int
	access uint64
	// optional: a rule of the All view; one the kernel refuses (an
	// internal file system's object) is left out rather than failing.
	optional bool
}

// pathError is a granted path the shim refuses (a symbolic link where kin
// checked a canonical path, or a path it cannot open).
type pathError struct {
	path string
	msg  string
}

func (e *pathError) Error() string { return fmt.Sprintf("path %s: %s", quote(e.path), e.msg) }

// openRules opens every granted path, refusing a path that is a symbolic
// link or passes through one (kin checked the canonical path: one that
// became a link since resolves elsewhere). Missing paths, and paths the
// agent's user cannot reach, are skipped: no rule grants less. So are the
// Optional paths whose file system cannot answer.
func openRules(spec *Spec, handled uint64) ([]rule, error) {
	var rules []rule
	add := func(paths []string, access uint64) error {
		for _, p := range paths {
			fd, isDir, err := openCanonical(p, slices.Contains(spec.Optional, p))
			if err != nil {
				closeRules(rules)
				return err
			}
			if fd < 0 {
				continue
			}
			a := access & handled
			if !isDir {
				a &= accessFile
			}
			rules = append(rules, rule{path: p, fd: fd, access: a})
		}
		return nil
	}
	if err := add(spec.RW, rightsRW); err != nil {
		return nil, err
	}
	if err := add(spec.RO, rightsRO); err != nil {
		return nil, err
	}
	paths := len(rules)
	for _, h := range spec.Held {
		isDir, err := checkHeld(h)
		if err != nil {
			// Only the paths' descriptors, which openRules opened: the
			// held ones stay the caller's to close (a direct start's
			// are its own duplicates; the shim exits).
			closeRules(rules[:paths])
			return nil, err
		}
		a := uint64(rightsRO)
		if h.RW {
			a = rightsRW
		}
		a &= handled
		if !isDir {
			a &= accessFile
		}
		rules = append(rules, rule{path: h.Path, fd: h.FD, access: a})
	}
	if spec.All && spec.ViewFD == 0 {
		rules = append(rules, viewRules(spec, handled)...)
	}
	return rules, nil
}

// checkHeld checks that the inherited descriptor of a held grant is the
// file the daemon checked, and not a link, and keeps it from the agent
// (close-on-exec; closeRules closes it before exec anyway).
func checkHeld(h Held) (isDir bool, err error) {
	var st unix.Stat_t
	if err := unix.Fstat(h.FD, &st); err != nil {
		return false, &pathError{h.Path, fmt.Sprintf("descriptor %d that kin passed for it: %v (kin starts the shim with its grants as descriptors 3 and up)", h.FD, err)}
	}
	if _, err := unix.FcntlInt(uintptr(h.FD), unix.F_SETFD, unix.FD_CLOEXEC); err != nil {
		return false, &pathError{h.Path, fmt.Sprintf("descriptor %d: close-on-exec: %v", h.FD, err)}
	}
	switch {
	case st.Mode&unix.S_IFMT == unix.S_IFLNK:
		return false, &pathError{h.Path, fmt.Sprintf("descriptor %d is a symbolic link; kin grants only what links do not lead to", h.FD)}
	case uint64(st.Dev) != h.Dev || st.Ino != h.Ino:
		return false, &pathError{h.Path, fmt.Sprintf("descriptor %d is file %d:%d, not %d:%d that kin checked", h.FD, st.Dev, st.Ino, h.Dev, h.Ino)}
	}
	return st.Mode&unix.S_IFMT == unix.S_IFDIR, nil
}

// closeHeld closes the held grants' descriptors where no rule uses them
// (no Landlock): the agent must not inherit them.
func closeHeld(spec *Spec) {
	for _, h := range spec.Held {
		unix.Close(h.FD)
	}
}

func closeRules(rules []rule) {
	for _, r := range rules {
		unix.Close(r.fd)
	}
}

// OpenNoLinks opens the absolute, clean path p with O_PATH, following no
// link anywhere on the way: a link there is ELOOP. It uses openat2's
// RESOLVE_NO_SYMLINKS, or, where the kernel has no openat2 (before Linux
// 5.6, or a seccomp filter hides it), one component at a time with
// O_NOFOLLOW. The shim opens the paths it grants with it, and the daemon
// the mounts its check approves, so both judge a path the same way.
func OpenNoLinks(p string) (int, error) {
	// Not O_NOFOLLOW: with O_PATH it would open a trailing link itself
	// instead of refusing it.
	fd, err := unix.Openat2(unix.AT_FDCWD, p, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) {
		return openComponents(p)
	}
	return fd, err
}

// openComponents is OpenNoLinks without openat2.
func openComponents(p string) (int, error) {
	fd, err := unix.Open("/", unix.O_PATH|unix.O_CLOEXEC|unix.O_DIRECTORY, 0)
	if err != nil {
		return -1, err
	}
	for _, c := range strings.Split(strings.TrimPrefix(p, "/"), "/") {
		if c == "" {
			continue
		}
		next, err := unix.Openat(fd, c, unix.O_PATH|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
		unix.Close(fd)
		if err != nil {
			return -1, err
		}
		var st unix.Stat_t
		if err := unix.Fstat(next, &st); err != nil {
			unix.Close(next)
			return -1, err
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			unix.Close(next)
			return -1, unix.ELOOP
		}
		fd = next
	}
	return fd, nil
}

// openCanonical opens p with O_PATH when p, resolved, is p itself. It
// returns fd -1 for a path to skip: one that is not there, or, where
// optional (Spec.Optional), one in a file system whose server went away or
// cannot answer (kin's served agent/, when the daemon that started this
// agent died, or lost its store, while it was being set up: EIO after the
// daemon's timeout). A grant left out only takes away; any other failure
// to open a granted path fails the start.
func openCanonical(p string, optional bool) (fd int, isDir bool, err error) {
	fd, err = OpenNoLinks(p)
	switch {
	case err == nil:
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.EACCES):
		return -1, false, nil
	case optional && unanswered(err):
		return -1, false, nil
	case errors.Is(err, unix.ELOOP):
		return -1, false, symlinkError(p)
	default:
		return -1, false, &pathError{p, "cannot open: " + err.Error()}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		if optional && unanswered(err) {
			return -1, false, nil
		}
		return -1, false, &pathError{p, "cannot stat: " + err.Error()}
	}
	return fd, st.Mode&unix.S_IFMT == unix.S_IFDIR, nil
}

// unanswered says whether err is a file system's server that went away
// (ENOTCONN, ECONNABORTED) or gave up (EIO).
func unanswered(err error) bool {
	return errors.Is(err, unix.ENOTCONN) || errors.Is(err, unix.ECONNABORTED) || errors.Is(err, unix.EIO)
}

func symlinkError(p string) error {
	msg := "is a symbolic link or passes through one"
	if real, err := filepath.EvalSymlinks(p); err == nil && real != p {
		msg += " (it resolves to " + quote(real) + ")"
	}
	return &pathError{p, msg + "; kin grants only canonical paths, so it changed since kin checked it"}
}

// landlockError is a failure of a Landlock system call.
type landlockError struct {
	op  string
	err error
}

func (e *landlockError) Error() string { return "landlock: " + e.op + ": " + e.err.Error() }

// restrictThread builds the ruleset and restricts the calling OS thread
// with it: the caller must have locked its goroutine to the thread (and
// keep it locked) and exec from it. Landlock before ABI 8 restricts one
// thread; execve keeps only the calling thread, so the program it starts
// runs wholly in the domain. The shim's other threads run only the Go
// runtime, never the agent's code, and end at execve.
//
// base, when not -1, is the ruleset to add the rules to and restrict with
// (Spec.ViewFD: the daemon's, holding the view's rules already); else a
// new one is made.
func restrictThread(abi int, rules []rule, scopeSignals bool, base int) error {
	var fd uintptr
	if base >= 0 {
		fd = uintptr(base)
	} else {
		nfd, err := newRuleset(abi, scopeSignals)
		if err != nil {
			return err
		}
		fd = uintptr(nfd)
	}
	defer unix.Close(int(fd))
	for _, r := range rules {
		if r.access == 0 {
			continue
		}
		pb := unix.LandlockPathBeneathAttr{Allowed_access: r.access, Parent_fd: int32(r.fd)}
		_, _, errno := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, fd, unix.LANDLOCK_RULE_PATH_BENEATH, uintptr(unsafe.Pointer(&pb)), 0, 0, 0)
		runtime.KeepAlive(&pb)
		if errno != 0 && r.optional {
			continue
		}
		if errno != 0 {
			return &landlockError{"add rule for " + quote(r.path) + " (" + accessString(r.access) + ")", errno}
		}
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return &landlockError{"prctl(PR_SET_NO_NEW_PRIVS)", err}
	}
	if _, _, errno := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, fd, 0, 0); errno != 0 {
		if errno == unix.E2BIG {
			return &landlockError{"restrict self", fmt.Errorf("%w (the agent is already nested in 16 Landlock domains, the kernel's maximum)", errno)}
		}
		return &landlockError{"restrict self", errno}
	}
	return nil
}

var accessNames = []string{
	"execute", "write_file", "read_file", "read_dir", "remove_dir", "remove_file",
	"make_char", "make_dir", "make_reg", "make_sock", "make_fifo", "make_block",
	"make_sym", "refer", "truncate", "ioctl_dev", "resolve_unix",
}

func accessString(a uint64) string {
	var names []string
	for i, n := range accessNames {
		if a&(1<<i) != 0 {
			names = append(names, n)
		}
	}
	return strings.Join(names, ",")
}
