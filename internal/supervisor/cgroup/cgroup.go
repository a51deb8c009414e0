package cgroup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Files a group must have for the supervisor to use it (Linux 5.14+).
var Required = []string{"cgroup.procs", "cgroup.events", "cgroup.kill", "cgroup.freeze"}

// Missing returns the Required files dir lacks.
func Missing(dir string) []string {
	var out []string
	for _, f := range Required {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			out = append(out, f)
		}
	}
	return out
}

// Events is cgroup.events. Populated covers the whole subtree; Frozen is the
// effective state (a group is frozen when it or an ancestor is).
type Events struct {
	Populated bool
	Frozen    bool
}

// ReadEvents reads dir/cgroup.events.
func ReadEvents(dir string) (Events, error) {
	b, err := readFile(filepath.Join(dir, "cgroup.events"))
	if err != nil {
		return Events{}, err
	}
	return parseEvents(string(b)), nil
}

func parseEvents(s string) Events {
	var e Events
	for _, line := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		switch k {
		case "populated":
			e.Populated = v == "1"
		case "frozen":
			e.Frozen = v == "1"
		}
	}
	return e
}

// Waiting backs off from minPoll to maxPoll between re-reads of
// cgroup.events without inotify, and to maxPollWatched with it, where a
// re-read is only a safety net (the kernel rate-limits cgroup.events
// notifications to one per 10 ms, delaying but not dropping them). A
// group's file changes only when the group itself empties or fills, not
// at each exit in it: a stop's grace over a subtree whose root ignores
// SIGTERM was a re-read every 50 ms for seconds, a hundred subtrees at
// once at a shutdown (0.3 s of its CPU, issue 22).
const (
	minPoll        = time.Millisecond
	maxPoll        = 50 * time.Millisecond
	maxPollWatched = 500 * time.Millisecond
)

// WaitEvents waits until done(cgroup.events of dir) is true, or ctx ends. It
// watches the file with inotify through the Go netpoller (no thread is
// parked) and re-reads it on every notification and on a short backoff.
// When inotify instances run out (fs.inotify.max_user_instances, often 128,
// is easily reached by many concurrent waits) it polls on the backoff alone.
// It returns the last Events read; the error is ctx's, or the read's (a
// removed group gives an error satisfying errors.Is(err, fs.ErrNotExist)).
func WaitEvents(ctx context.Context, dir string, done func(Events) bool) (Events, error) {
	e, err := ReadEvents(dir)
	if err != nil || done(e) {
		return e, err
	}
	w, err := watch(filepath.Join(dir, "cgroup.events"))
	if err != nil {
		return e, err
	}
	if w != nil {
		defer w.Close()
		stop := context.AfterFunc(ctx, func() { w.SetReadDeadline(time.Now()) })
		defer stop()
	}
	var timer *time.Timer
	buf := make([]byte, 4096)
	backoff, most := minPoll, maxPoll
	if w != nil {
		most = maxPollWatched
	}
	for {
		// Read after arming the watch, so no change is missed.
		e, err = ReadEvents(dir)
		if err != nil || done(e) {
			return e, err
		}
		if err := ctx.Err(); err != nil {
			return e, err
		}
		if w != nil {
			if err := w.SetReadDeadline(time.Now().Add(backoff)); err != nil {
				return e, err
			}
			if _, err := w.Read(buf); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
				return e, err
			}
		} else {
			if timer == nil {
				timer = time.NewTimer(backoff)
				defer timer.Stop()
			} else {
				timer.Reset(backoff)
			}
			select {
			case <-timer.C:
			case <-ctx.Done():
			}
		}
		backoff = min(2*backoff, most)
	}
}

// watch returns a pollable inotify file watching name for changes, or nil
// when the system is out of inotify instances or watches.
func watch(name string) (*os.File, error) {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err == unix.EMFILE || err == unix.ENFILE || err == unix.ENOMEM {
		return nil, nil
	}
	if err != nil {
		return nil, os.NewSyscallError("inotify_init1", err)
	}
	if _, err := unix.InotifyAddWatch(fd, name, unix.IN_MODIFY); err != nil {
		unix.Close(fd)
		if err == unix.ENOSPC || err == unix.ENOMEM {
			return nil, nil
		}
		return nil, &fs.PathError{Op: "inotify_add_watch", Path: name, Err: err}
	}
	return os.NewFile(uintptr(fd), "inotify"), nil
}

// WaitEmpty waits until nothing runs in dir's subtree. A group that no
// longer exists counts as empty.
func WaitEmpty(ctx context.Context, dir string) error {
	_, err := WaitEvents(ctx, dir, func(e Events) bool { return !e.Populated })
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// writeFile writes value to dir/name in one write, with plain system
// calls (readFile says why).
func writeFile(dir, name, value string) error {
	path := filepath.Join(dir, name)
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &fs.PathError{Op: "open", Path: path, Err: err}
	}
	n, err := ignoringEINTR(func() (int, error) { return unix.Write(fd, []byte(value)) })
	if err == nil && n < len(value) {
		err = io.ErrShortWrite
	}
	if cerr := unix.Close(fd); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return &fs.PathError{Op: "write", Path: path, Err: err}
	}
	return nil
}

// Kill writes "1" to dir/cgroup.kill: SIGKILL to every process in dir and
// every group below it, including processes forking meanwhile.
func Kill(dir string) error { return writeFile(dir, "cgroup.kill", "1") }

// SetFreeze writes dir/cgroup.freeze without waiting.
func SetFreeze(dir string, frozen bool) error {
	v := "0"
	if frozen {
		v = "1"
	}
	return writeFile(dir, "cgroup.freeze", v)
}

// FreezeSet reports dir's own cgroup.freeze setting (not the effective state).
func FreezeSet(dir string) (bool, error) {
	b, err := readFile(filepath.Join(dir, "cgroup.freeze"))
	if err != nil {
		return false, err
	}
	return strings.TrimSpace(string(b)) == "1", nil
}

// Freeze freezes dir's subtree and returns once cgroup.events says
// "frozen 1" in dir and in every group below it. Checking dir alone is not
// enough: a group turns frozen once its own processes are, which can be
// before the processes of its nested groups are (seen on Linux 6.18).
func Freeze(ctx context.Context, dir string) error {
	if err := SetFreeze(dir, true); err != nil {
		return err
	}
	return waitTree(ctx, dir, true)
}

// FrozenError says that a group cannot thaw because another group, Dir
// (an ancestor, or a group below it), is frozen itself.
type FrozenError struct {
	Group string // the group that stays frozen
	Dir   string // the group whose own cgroup.freeze keeps it frozen
	Below bool   // Dir is below Group, not an ancestor
}

func (e *FrozenError) Error() string {
	if e.Below {
		return fmt.Sprintf("cgroup %s stays frozen: %s below it is frozen itself", e.Group, e.Dir)
	}
	return fmt.Sprintf("cgroup %s stays frozen: ancestor %s is frozen", e.Group, e.Dir)
}

// FrozenAncestor returns the nearest ancestor of dir, up to (not including)
// stopAt, whose own cgroup.freeze is 1, or "" when there is none.
func FrozenAncestor(dir, stopAt string) string {
	for d := filepath.Dir(dir); within(d, stopAt) && d != stopAt; d = filepath.Dir(d) {
		if on, err := FreezeSet(d); err == nil && on {
			return d
		}
	}
	return ""
}

// Thaw clears dir's own cgroup.freeze and returns once cgroup.events says
// "frozen 0" in dir and every group below it. When an ancestor of dir up to
// (not including) stopAt is frozen itself, it fails with a *FrozenError
// without writing anything (the thaw could not take effect); when a group
// below dir is frozen itself, it fails with a *FrozenError after the write.
func Thaw(ctx context.Context, dir, stopAt string) error {
	if anc := FrozenAncestor(dir, stopAt); anc != "" {
		return &FrozenError{Group: dir, Dir: anc}
	}
	if err := SetFreeze(dir, false); err != nil {
		return err
	}
	// An ancestor frozen meanwhile would make the wait hang: check again.
	if anc := FrozenAncestor(dir, stopAt); anc != "" {
		return &FrozenError{Group: dir, Dir: anc}
	}
	return waitTree(ctx, dir, false)
}

// ThawTree clears cgroup.freeze in dir and in every group below it (parents
// first), so that a subtree frozen by any mix of freezes of its groups ends
// thawed, and returns once cgroup.events says "frozen 0" throughout. Like
// Thaw, it fails with a *FrozenError, writing nothing, when an ancestor of
// dir up to (not including) stopAt is frozen itself.
func ThawTree(ctx context.Context, dir, stopAt string) error {
	if anc := FrozenAncestor(dir, stopAt); anc != "" {
		return &FrozenError{Group: dir, Dir: anc}
	}
	err := Walk(dir, func(d string) error {
		on, err := FreezeSet(d)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil || !on {
			return err
		}
		if err := SetFreeze(d, false); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	})
	if err != nil {
		return err
	}
	if anc := FrozenAncestor(dir, stopAt); anc != "" {
		return &FrozenError{Group: dir, Dir: anc}
	}
	return waitTree(ctx, dir, false)
}

// waitTree waits until dir and every group below it report frozen (or
// thawed). Groups removed meanwhile are skipped. Waiting for a thaw fails
// when a group below dir is frozen itself.
func waitTree(ctx context.Context, dir string, frozen bool) error {
	return Walk(dir, func(d string) error {
		if !frozen && d != dir {
			if on, err := FreezeSet(d); err == nil && on {
				return &FrozenError{Group: dir, Dir: d, Below: true}
			}
		}
		_, err := WaitEvents(ctx, d, func(e Events) bool { return e.Frozen == frozen })
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	})
}

// Procs lists the processes directly in dir (not in groups below it).
// Zombies are not listed.
func Procs(dir string) ([]int, error) {
	b, err := readFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		if n, err := strconv.Atoi(f); err == nil {
			pids = append(pids, n)
		}
	}
	return pids, nil
}

// ProcsTree lists the processes in dir and in every group below it. Groups
// removed meanwhile are skipped; a missing dir gives an error satisfying
// errors.Is(err, fs.ErrNotExist).
func ProcsTree(dir string) ([]int, error) {
	var pids []int
	err := Walk(dir, func(d string) error {
		p, err := Procs(d)
		if errors.Is(err, fs.ErrNotExist) && d != dir {
			return nil
		}
		pids = append(pids, p...)
		return err
	})
	return pids, err
}

// Descendants is the number of live groups below dir, at any depth
// (cgroup.stat's nr_descendants; removed groups the kernel still holds
// are not counted).
func Descendants(dir string) (int, error) {
	b, err := readFile(filepath.Join(dir, "cgroup.stat"))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "nr_descendants "); ok {
			return strconv.Atoi(v)
		}
	}
	return 0, fmt.Errorf("cgroup: no nr_descendants in %s", filepath.Join(dir, "cgroup.stat"))
}

// Walk calls fn for dir and every group below it, parents first. When fn
// returns fs.SkipDir, Walk does not descend into that group.
func Walk(dir string, fn func(dir string) error) error {
	if err := fn(dir); err != nil {
		if err == fs.SkipDir {
			return nil
		}
		return err
	}
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range ents {
		if e.IsDir() {
			if err := Walk(filepath.Join(dir, e.Name()), fn); err != nil {
				return err
			}
		}
	}
	return nil
}

// RemoveTree removes dir and every group below it, children first. The
// groups must be empty (see WaitEmpty). Groups already gone are fine.
func RemoveTree(dir string) error {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range ents {
		if e.IsDir() {
			errs = append(errs, RemoveTree(filepath.Join(dir, e.Name())))
		}
	}
	if err := unix.Rmdir(dir); err != nil && err != unix.ENOENT {
		errs = append(errs, &fs.PathError{Op: "rmdir", Path: dir, Err: err})
	}
	return errors.Join(errs...)
}

// Open opens dir for SysProcAttr.CgroupFD (clone3 CLONE_INTO_CGROUP).
func Open(dir string) (int, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, &fs.PathError{Op: "open", Path: dir, Err: err}
	}
	return fd, nil
}

// readFile reads a cgroup file with plain system calls, as writeFile
// writes one: os.ReadFile and os.OpenFile register each file they open
// with the runtime's poller (cgroupfs files are pollable), an epoll_ctl in
// and out for every access, and a stop of 2,000 agents reads thousands.
func readFile(path string) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	buf := make([]byte, 0, 512)
	for {
		buf = slices.Grow(buf, 512)
		n, err := ignoringEINTR(func() (int, error) { return unix.Read(fd, buf[len(buf):cap(buf)]) })
		if err != nil {
			return nil, &fs.PathError{Op: "read", Path: path, Err: err}
		}
		if n == 0 {
			return buf, nil
		}
		buf = buf[:len(buf)+n]
	}
}

// ignoringEINTR retries a system call that a signal interrupted.
func ignoringEINTR(call func() (int, error)) (int, error) {
	for {
		n, err := call()
		if err != unix.EINTR {
			return n, err
		}
	}
}
