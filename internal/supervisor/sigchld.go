package supervisor

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A child's stop and continue signal its parent too (SIGCHLD with
// CLD_STOPPED, CLD_TRAPPED, CLD_CONTINUED) unless the parent's SIGCHLD
// action has SA_NOCLDSTOP, which Go's handler lacks. Every direct start
// stops its child twice and continues it once (its exec's trap, the
// detach into SIGSTOP, the SIGCONT), and every SIGCHLD wakes the reaping
// loop and each Supervisor's sweep, whose waitid(P_ALL) walks every child
// of the daemon to find none exited: a spawn's cost grew with the live
// agents (issue 22; 2 ms a walk at 5,000). Only exits concern kin's
// SIGCHLD readers: the direct start waits for its child's stops with
// waitid, which the kernel wakes without the signal.

// saNoCldStop is SA_NOCLDSTOP (asm-generic and x86).
const saNoCldStop = 0x1

// sigaction is the kernel's struct sigaction on amd64 and arm64.
type sigaction struct {
	handler  uintptr
	flags    uint64
	restorer uintptr
	mask     uint64
}

// noChildStopSignals adds SA_NOCLDSTOP to the process's SIGCHLD action
// when a handler is installed (os/signal's, after signal.Notify), keeping
// the handler, its mask and its other flags. It returns whether the flag
// is set. The runtime installs its handler once, when SIGCHLD is first
// notified, and again only after every notification stopped: call it
// after each signal.Notify of SIGCHLD.
func noChildStopSignals() bool {
	act, err := childAction()
	if err != nil {
		return false
	}
	if act.handler == 0 || act.handler == 1 { // SIG_DFL, SIG_IGN: not the runtime's
		return false
	}
	if act.flags&saNoCldStop != 0 {
		return true
	}
	act.flags |= saNoCldStop
	_, _, e := unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(syscall.SIGCHLD), uintptr(unsafe.Pointer(&act)), 0, unsafe.Sizeof(act.mask), 0, 0)
	return e == 0
}

// childAction is the process's SIGCHLD action.
func childAction() (sigaction, error) {
	var act sigaction
	if _, _, e := unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(syscall.SIGCHLD), 0, uintptr(unsafe.Pointer(&act)), unsafe.Sizeof(act.mask), 0, 0); e != 0 {
		return act, e
	}
	return act, nil
}
