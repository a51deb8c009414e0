package proctest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"unsafe"
)

// Inodes counts the inodes ext4 allocates and frees in this process's
// threads and in every thread and process they start after it (the kernel's
// ext4_allocate_inode and ext4_free_inode tracepoints, counted with
// perf_event_open and inherited), so that a benchmark can report a
// spawn's inode churn on the journal-less ext4 where each allocation scans
// the recently freed ones. Files on tmpfs are not counted. Close it when
// done.
type Inodes struct {
	alloc, free []int // one counter per thread that existed at the start
}

// CountInodes starts counting. It fails where the tracepoints cannot be
// opened (no tracefs, no ext4 events, not permitted): benchmarks then
// report no inode figures. Where tracefs is not mounted it reads the
// events' ids from a mount that only a child of its own sees (root).
func CountInodes() (*Inodes, error) {
	ids, err := tracepoints("ext4/ext4_allocate_inode", "ext4/ext4_free_inode")
	if err != nil {
		return nil, err
	}
	allocID, freeID := ids[0], ids[1]
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return nil, err
	}
	c := &Inodes{}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		for _, ev := range []struct {
			id  uint64
			fds *[]int
		}{{allocID, &c.alloc}, {freeID, &c.free}} {
			attr := perfEventAttr{typ: perfTypeTracepoint, config: ev.id, flags: perfBitInherit}
			attr.size = uint32(unsafe.Sizeof(attr))
			fd, err := perfEventOpen(&attr, tid)
			if errors.Is(err, syscall.ESRCH) {
				break // the thread has ended
			}
			if err != nil {
				c.Close()
				return nil, err
			}
			*ev.fds = append(*ev.fds, fd)
		}
	}
	return c, nil
}

// perfEventAttr is the kernel's struct perf_event_attr in its first
// published size (PERF_ATTR_SIZE_VER0, 64 bytes), which every kernel takes
// (proctest depends on the standard library only: deptest).
type perfEventAttr struct {
	typ          uint32
	size         uint32
	config       uint64
	samplePeriod uint64
	sampleType   uint64
	readFormat   uint64
	flags        uint64 // disabled (bit 0), inherit (bit 1), ...
	wakeupEvents uint32
	bpType       uint32
	bpAddr       uint64
}

const (
	perfTypeTracepoint = 2   // PERF_TYPE_TRACEPOINT
	perfBitInherit     = 0x2 // the inherit bit of perf_event_attr's flags
	perfFlagFDCloexec  = 0x8 // PERF_FLAG_FD_CLOEXEC
)

// perfEventOpen counts attr's event in thread tid on any CPU.
func perfEventOpen(attr *perfEventAttr, tid int) (int, error) {
	fd, _, e := syscall.Syscall6(syscall.SYS_PERF_EVENT_OPEN, uintptr(unsafe.Pointer(attr)), uintptr(tid),
		^uintptr(0), ^uintptr(0), perfFlagFDCloexec, 0)
	if e != 0 {
		return -1, e
	}
	return int(fd), nil
}

// tracepoints reads the ids of the tracepoint events (e.g.
// "ext4/ext4_free_inode") from tracefs: where it is mounted, else from a
// mount of its own (privateTracefs).
func tracepoints(events ...string) ([]uint64, error) {
	var err error
	for _, dir := range []string{"/sys/kernel/tracing", "/sys/kernel/debug/tracing"} {
		var ids []uint64
		if ids, err = readIDs(dir, events); err == nil {
			return ids, nil
		}
	}
	ids, perr := privateTracefs(events)
	if perr != nil {
		return nil, fmt.Errorf("%w; and %w", err, perr)
	}
	return ids, nil
}

// readIDs reads each event's id under the tracefs at dir.
func readIDs(dir string, events []string) ([]uint64, error) {
	ids := make([]uint64, len(events))
	for i, ev := range events {
		b, err := os.ReadFile(dir + "/events/" + ev + "/id")
		if err != nil {
			return nil, err
		}
		if ids[i], err = strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err != nil {
			return nil, fmt.Errorf("%s's id: %w", ev, err)
		}
	}
	return ids, nil
}

// privateTracefs reads the events' ids from a tracefs mounted for the read
// only, where the machine has the file system but none mounted (the
// counters themselves need no mount): in a child (sh, mount, cat) that
// has a mount namespace of its own, which Go's fork makes private before
// the exec, so that nothing is mounted on the host and this process's own
// namespace never changes (a thread of it that took another namespace and
// happened to be the main thread would stay in it: the runtime never ends
// the main thread). It needs CAP_SYS_ADMIN.
func privateTracefs(events []string) ([]uint64, error) {
	dir, err := os.MkdirTemp("", "kintracefs")
	if err != nil {
		return nil, err
	}
	defer os.Remove(dir)
	// Each id on a line of its own, in the events' order.
	script := `dir=$1; shift; mount -t tracefs -o nosuid,nodev,noexec tracefs "$dir" || exit; for ev; do cat "$dir/events/$ev/id" || exit; done`
	cmd := exec.Command("sh", append([]string{"-c", script, "sh", dir}, events...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("a tracefs in a mount namespace of its own: %v: %s", err, bytes.TrimSpace(stderr.Bytes()))
	}
	lines := strings.Fields(string(out))
	if len(lines) != len(events) {
		return nil, fmt.Errorf("a tracefs in a mount namespace of its own gave %d ids for %d events: %q", len(lines), len(events), out)
	}
	ids := make([]uint64, len(events))
	for i, l := range lines {
		if ids[i], err = strconv.ParseUint(l, 10, 64); err != nil {
			return nil, fmt.Errorf("%s's id: %w", events[i], err)
		}
	}
	return ids, nil
}

// Read returns the inodes allocated and freed since CountInodes.
func (c *Inodes) Read() (allocated, freed int64) {
	return sum(c.alloc), sum(c.free)
}

func sum(fds []int) int64 {
	var n int64
	var buf [8]byte
	for _, fd := range fds {
		if k, err := syscall.Read(fd, buf[:]); err == nil && k == len(buf) {
			n += int64(binary.NativeEndian.Uint64(buf[:]))
		}
	}
	return n
}

// Close stops counting.
func (c *Inodes) Close() {
	for _, fd := range append(c.alloc, c.free...) {
		syscall.Close(fd)
	}
	c.alloc, c.free = nil, nil
}
