package proctest

import (
	"encoding/binary"
	"errors"
	"os"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
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
// report no inode figures.
func CountInodes() (*Inodes, error) {
	allocID, err := tracepoint("ext4/ext4_allocate_inode")
	if err != nil {
		return nil, err
	}
	freeID, err := tracepoint("ext4/ext4_free_inode")
	if err != nil {
		return nil, err
	}
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
			attr := unix.PerfEventAttr{
				Type:   unix.PERF_TYPE_TRACEPOINT,
				Size:   uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
				Config: ev.id,
				Bits:   unix.PerfBitInherit,
			}
			fd, err := unix.PerfEventOpen(&attr, tid, -1, -1, unix.PERF_FLAG_FD_CLOEXEC)
			if errors.Is(err, unix.ESRCH) {
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

// tracepoint reads the id of the tracepoint event (e.g.
// "ext4/ext4_free_inode") from tracefs.
func tracepoint(event string) (uint64, error) {
	var err error
	for _, dir := range []string{"/sys/kernel/tracing", "/sys/kernel/debug/tracing"} {
		var b []byte
		if b, err = os.ReadFile(dir + "/events/" + event + "/id"); err == nil {
			return strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		}
	}
	return 0, err
}

// Read returns the inodes allocated and freed since CountInodes.
func (c *Inodes) Read() (allocated, freed int64) {
	return sum(c.alloc), sum(c.free)
}

func sum(fds []int) int64 {
	var n int64
	var buf [8]byte
	for _, fd := range fds {
		if k, err := unix.Read(fd, buf[:]); err == nil && k == len(buf) {
			n += int64(binary.NativeEndian.Uint64(buf[:]))
		}
	}
	return n
}

// Close stops counting.
func (c *Inodes) Close() {
	for _, fd := range append(c.alloc, c.free...) {
		unix.Close(fd)
	}
	c.alloc, c.free = nil, nil
}
