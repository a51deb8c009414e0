package agentlog

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// holder keeps the drains' pipes open without a descriptor each (issue
// 22: with RLIMIT_NOFILE fixed at 20,000, a read end per live agent kept
// 10,000 agents from running): the table of registered files of an
// io_uring instance, which holds a reference to each file it is given and
// counts against no descriptor limit but its own size. The ring itself is
// never used to submit anything.
//
// A pipe must stay open on the daemon's side for as long as the agent may
// write: the kernel frees a named pipe's buffer with the last file open on
// it, so an agent that writes and exits while nobody holds it would lose
// that output. Held here, the pipe keeps it until a drain opens the pipe by
// its path again (Poller: an inotify watch says when output comes).
type holder struct {
	fd int

	mu   sync.Mutex
	free []uint32
	next uint32
	size uint32
}

// io_uring_register opcodes and flags (include/uapi/linux/io_uring.h).
const (
	ioringRegisterFilesUpdate = 6
	ioringRegisterFiles2      = 13
	ioringRsrcRegisterSparse  = 1
)

type ioringRsrcRegister struct {
	nr, flags uint32
	resv2     uint64
	data      uint64
	tags      uint64
}

type ioringFilesUpdate struct {
	offset, resv uint32
	fds          uint64
}

// maxHeld bounds the slots of one holder; the kernel bounds them by
// RLIMIT_NOFILE too.
const maxHeld = 1 << 16

// newHolder makes a holder of up to min(RLIMIT_NOFILE, maxHeld) files; it
// fails where io_uring is not allowed (kernel.io_uring_disabled, seccomp)
// or lacks sparse tables (Linux 5.19).
func newHolder() (*holder, error) {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		return nil, err
	}
	size := uint32(min(rl.Cur, maxHeld))
	var params [120]byte // struct io_uring_params
	fd, _, errno := unix.Syscall(unix.SYS_IO_URING_SETUP, 1, uintptr(unsafe.Pointer(&params[0])), 0)
	if errno != 0 {
		return nil, fmt.Errorf("io_uring_setup: %w", errno)
	}
	reg := ioringRsrcRegister{nr: size, flags: ioringRsrcRegisterSparse}
	if _, _, errno := unix.Syscall6(unix.SYS_IO_URING_REGISTER, fd, ioringRegisterFiles2, uintptr(unsafe.Pointer(&reg)), unsafe.Sizeof(reg), 0, 0); errno != 0 {
		unix.Close(int(fd))
		return nil, fmt.Errorf("io_uring_register files: %w", errno)
	}
	return &holder{fd: int(fd), size: size}, nil
}

var errFull = errors.New("agent logs: every slot of the pipe holder is taken")

// hold takes a reference to the file fd (which the caller may close) and
// returns its slot.
func (h *holder) hold(fd int) (uint32, error) {
	h.mu.Lock()
	var slot uint32
	switch {
	case len(h.free) > 0:
		slot = h.free[len(h.free)-1]
		h.free = h.free[:len(h.free)-1]
	case h.next < h.size:
		slot = h.next
		h.next++
	default:
		h.mu.Unlock()
		return 0, errFull
	}
	h.mu.Unlock()
	if err := h.set(slot, int32(fd)); err != nil {
		h.mu.Lock()
		h.free = append(h.free, slot)
		h.mu.Unlock()
		return 0, err
	}
	return slot, nil
}

// release drops the reference in slot.
func (h *holder) release(slot uint32) {
	h.set(slot, -1)
	h.mu.Lock()
	h.free = append(h.free, slot)
	h.mu.Unlock()
}

func (h *holder) set(slot uint32, fd int32) error {
	fds := [1]int32{fd}
	up := ioringFilesUpdate{offset: slot, fds: uint64(uintptr(unsafe.Pointer(&fds[0])))}
	_, _, errno := unix.Syscall6(unix.SYS_IO_URING_REGISTER, uintptr(h.fd), ioringRegisterFilesUpdate, uintptr(unsafe.Pointer(&up)), 1, 0, 0)
	runtime.KeepAlive(&fds)
	if errno != 0 {
		return fmt.Errorf("io_uring_register files update: %w", errno)
	}
	return nil
}

// close drops every reference.
func (h *holder) close() { unix.Close(h.fd) }
