// Package agentlog owns an agent's log on disk (issue 21): the named pipe
// the agent writes its stdout and stderr into (<log>.pipe, in kin's home,
// which agents cannot reach), the drain that copies it into <log> and
// rotates it at a size to <log>.1, <log>.2 ... keeping a number of them,
// reading a log across its rotations, and trimming several ended logs to
// one budget (Trim). One Poller waits for output on every pipe, so that an
// agent that writes nothing costs no goroutine, and, once its drain is
// parked, no descriptor either (issue 22): its pipe is then held open by
// an io_uring registered-file table (holder.go), an inotify watch says when
// output comes, and the log file is open only while output is copied. The
// log file is made when the first byte comes: an agent that writes nothing
// has none (a spawn makes one inode in the log directory, its pipe).
//
// Why a named pipe: a file handed to the agent cannot be bounded by kin,
// and a plain pipe breaks when the daemon goes away while agents keep
// running (their next write would get EPIPE). The agent's end of the named
// pipe is opened read-write, so the pipe always has a reader: while no
// daemon drains it, the agent's writes fill it (1 MiB where the kernel
// allows) and then block, and never fail. A restarted daemon opens the pipe
// by its path again and goes on draining (Reattach). An ended agent's pipe
// is kept, renamed, for the next agent (spare.go).
//
// It must never hand the agent anything but its end of the pipe, follow a
// link in the log directory, or know what an agent is beyond the paths it
// is given.
package agentlog
