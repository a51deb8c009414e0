// Package sandbox owns the shim that confines an agent's processes: the
// hidden "kin sandbox-exec" subcommand (Main), the command line the daemon
// builds for it (Args), and the Landlock rules and resource limits it
// applies before it execs the agent's command. Go cannot run code between
// fork and exec, so the daemon starts
//
//	[kinBinary, Subcommand, Args(spec)...]  =  [kin, "sandbox-exec", "--spec", "<JSON>"]
//
// and the shim, in the new process, opens and checks the granted paths,
// restricts itself, sets the limits and execs spec.Argv.
//
// Grants travel two ways. The agent's policy mounts come as descriptors
// (Spec.Held): the daemon opened each (O_PATH, following no link) and
// checked it is the file the policy check approved, and the process
// inherits them as descriptors 3 and up. The shim checks each is that file
// (Held.Dev, Held.Ino) and not a link, adds its rule on the descriptor and
// closes it before exec: it grants the checked file whatever the path
// names by then, and never looks the path up (a path resolved again at
// start is how a parent that swapped a granted folder for a link once
// leaked a folder it could not see to its child). kin's own grants (system
// paths, the agent's home, kin's binary and socket, consented workspaces)
// come as paths in Spec.RW and Spec.RO, which the shim opens itself. The
// agent inherits the domain across exec and fork and can never leave it:
// a nested shim only adds a layer (Landlock domains stack), so an agent
// cannot regain what it lost, not even with Restrict false.
//
// It must never: import the daemon, the store, the CLI or the HTTP API (it
// depends on the standard library and x/sys only); decide policy (the
// daemon turns an agent's mounts into a Spec: Main adds no path by itself,
// not even DefaultSystemRO or DefaultSystemRW); grant a path that is, or
// passes through, a symbolic link (kin checked the canonical path: a link
// there now was planted since, and is refused), or a held descriptor that
// is a link or not the file the daemon checked; widen a grant (a missing
// path, or one the agent's user cannot reach, is skipped: no rule grants
// less); run an agent unrestricted when Landlock is missing unless the
// operator allowed best effort (and then say so loudly on stderr); run
// Main in the daemon's own process (Main replaces the process); restrict a
// thread of the daemon other than a direct start's own (below); or return
// on success.
//
// # Without the shim
//
// With cgroup2 containment the daemon applies the same Spec itself
// (direct.go: PrepareDirect, Direct.Start): on a locked OS thread it opens
// the grants as the agent's user, restricts the thread and forks the agent
// from it, traced, so that the rlimits are set while the agent is stopped
// at its execve, before its first instruction; the thread ends with its
// goroutine. What it cannot give exactly as the shim does (an init,
// RLIMIT_AS, no Landlock, the walked view, a PATH lookup) is left to the
// shim, as is any direct start that fails before the command ran.
//
// # Rights
//
// The shim handles every filesystem right the kernel's ABI knows (up to
// ABI 9's resolve_unix), so whatever is not granted is denied: reading,
// listing, writing, creating, removing, executing, truncating, device
// ioctls, linking or renaming across directories, and (ABI 9) connecting
// to a pathname unix socket. RW grants all of them beneath a path, RO
// grants execute, read_file, read_dir and resolve_unix (so an agent can
// reach a socket, such as kin's, in a directory it reads). A rule on a
// file that is not a directory keeps only the file rights (execute,
// write_file, read_file, truncate, ioctl_dev, resolve_unix): the kernel
// refuses the others there.
//
// Landlock grants the union of a layer's rules: a narrower mode beneath a
// broader grant cannot be enforced. Args and Main refuse an RO path inside
// an RW one (it would be writable); a hidden path beneath a granted one
// cannot even be expressed in a Spec, so the daemon must refuse (or
// report) such a policy itself.
//
// The default view (Spec.All, view.go) grants everything except the
// hidden paths (kin's home and agent filesystem) and the read-only ones
// (the cgroup2 mount), by granting each entry off the paths down to them.
// Spec.ScopeSignals adds LANDLOCK_SCOPE_SIGNAL (ABI 6): the agent cannot
// signal a process outside its own domain, the daemon and other agents
// included. Landlock also keeps a sandboxed process from ptracing (and so
// from reading the memory of) any process outside its domain, and from
// mounting anything.
//
// Not restricted in this version: TCP, UDP and abstract unix sockets
// (Landlock's network rights are allow-lists of ports: refusing one port,
// kin's, takes 65,534 rules and about 70 ms per start here). Before ABI 9
// connecting to a pathname unix socket is not restricted either, wherever
// it is: kin's sockets check their peer instead.
//
// # Init
//
// With Spec.Init the shim stays as pid 1 of the PID namespace the
// supervisor cloned it into (init.go): it starts the command from its
// restricted thread, reaps orphans, forwards signals to every process of
// the namespace, and exits with the command's status, writing the exact
// wait status to $KIN_INIT_STATUS_FD; the kernel then kills whatever is
// left in the namespace.
//
// # Landlock without go-landlock
//
// The shim makes the three Landlock system calls itself (x/sys/unix), on
// its goroutine locked to its OS thread: prctl(PR_SET_NO_NEW_PRIVS) and
// landlock_restrict_self apply to the calling thread (before ABI 8's
// TSYNC), and execve from that same thread keeps only that thread, so the
// command runs wholly in the domain; the shim's other threads run only the
// Go runtime and end at execve. go-landlock (v0.11.0, which builds here with
// and without cgo) restricts every thread of the process instead, through
// libcap's psx below ABI 8: with cgo psx links a pthread_create wrapper and
// a signal handler into the whole kin binary, the daemon included, for a
// guarantee the shim does not need; its best-effort mode silently falls
// back to no restriction at all when a rule cannot be expressed, and it
// adds a rule of its own (/proc/<pid>/task) under cgo. The raw calls, with
// the path checks, are landlock.go, and the module's dependencies stay as
// they were (go.mod is unchanged).
//
// # Limits
//
// CPUSeconds, MemoryBytes, OpenFiles and Processes set RLIMIT_CPU,
// RLIMIT_AS, RLIMIT_NOFILE and RLIMIT_NPROC with soft = hard, so the agent
// cannot raise them (SIGKILL at the CPU limit). InheritOpenFiles, where
// OpenFiles sets none, gives the agent the RLIMIT_NOFILE the daemon
// started with (soft and hard as they were), which the daemon raised for
// itself. RLIMIT_NPROC counts the
// tasks (threads too) of the real uid in the caller's user namespace
// (ucounts, Linux 5.14): it bounds one agent only where that uid, or that
// namespace, is the agent's alone, and the daemon sets it only there. An
// init (Spec.Init) passes RLIMIT_AS and RLIMIT_NPROC to the child shim
// that execs the command, keeping neither itself. RLIMIT_AS bounds virtual address space, not memory
// used: a Go program needs well over 300 MiB of it just to start ("failed
// to reserve page summary memory"), and JVMs and V8 reserve more; prefer
// a cgroup's memory.max where one is available. RLIMIT_AS is set last,
// right before exec, since the shim itself maps more than that: the
// exec's arguments and environment are made before the first limit, and
// from there to the exec only system calls run (Go's syscall.Exec
// allocates after them). Where no RLIMIT_NOFILE is given, the command gets
// the soft limit the shim started with, which Go's runtime had raised.
package sandbox
