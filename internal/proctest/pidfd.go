package proctest

import (
	"errors"

	"golang.org/x/sys/unix"
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
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return Pidfd{}, err
	}
	return Pidfd{Pid: pid, fd: fd}, nil
}

// Reaped reports whether the process has been reaped; err is what the
// signal answered when it has not (nil: it runs, or is a zombie).
func (p Pidfd) Reaped() (reaped bool, err error) {
	err = unix.PidfdSendSignal(p.fd, 0, nil, 0)
	if errors.Is(err, unix.ESRCH) {
		return true, nil
	}
	return false, err
}

// Close closes the pidfd.
func (p Pidfd) Close() { unix.Close(p.fd) }
