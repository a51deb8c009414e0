package proctest

import (
	"errors"
	"syscall"
)

// The system calls' numbers, the same on every architecture (both came
// after Linux unified its tables): the standard library has neither, and
// proctest depends on it alone.
const (
	sysPidfdSendSignal = 424
	sysPidfdOpen       = 434
)

// Pidfd holds a pidfd of a process, to tell without pid-reuse races when
// it has been reaped: pidfd_send_signal of signal 0 fails with ESRCH only
// then (a zombie still answers), one system call, where a read of
// /proc/<pid>/stat costs several and may name a recycled pid.
type Pidfd struct {
	Pid int
	fd  int
}

// OpenPidfd opens a pidfd of the process pid; Close closes it.
func OpenPidfd(pid int) (Pidfd, error) {
	fd, _, e := syscall.Syscall(sysPidfdOpen, uintptr(pid), 0, 0)
	if e != 0 {
		return Pidfd{}, e
	}
	syscall.CloseOnExec(int(fd))
	return Pidfd{Pid: pid, fd: int(fd)}, nil
}

// Reaped reports whether the process has been reaped; err is what the
// signal answered when it has not (nil: it runs, or is a zombie).
func (p Pidfd) Reaped() (reaped bool, err error) {
	if _, _, e := syscall.Syscall6(sysPidfdSendSignal, uintptr(p.fd), 0, 0, 0, 0, 0); e != 0 {
		err = e
	}
	if errors.Is(err, syscall.ESRCH) {
		return true, nil
	}
	return false, err
}

// Close closes the pidfd.
func (p Pidfd) Close() { syscall.Close(p.fd) }
