// Package ctxfs owns kin's on-disk ABI, the agent filesystem of seed 001:
// the layout of the tree under the ctx root, the format, owner and mode of
// every file in it, how each is written, and the copy of a child's result
// into its parent's session. It must never import the daemon, the store or
// the HTTP API (internal/deptest's TestPackageMap enforces it), decide
// policy (whether a result meets its contract, whether a ref's hash is
// right: the caller's, with the Manifest this package returns), follow a
// symbolic link, write a file in place (only .jsonl files are appended to),
// or delete a session.
//
// # Layout
//
// Under the root (kin uses <home>/ctx; Layout computes every path):
//
//	agent/                            0711 daemon
//	  <name>                          0644 daemon        the agent's id ("7\n")
//	  <name>.sock                                        its socket (the daemon's; only named here)
//	  <name>.d/                       0750 daemon:<gid>  its control files, 0640 daemon:<gid>
//	home/                             0711 daemon
//	  <uid>/agent/<name>/session/     0700 <uid>:<gid>
//	    <sid>/                        0700 <uid>:<gid>   a session; every entry <uid>:<gid>, 0700 / 0600
//	      messages.jsonl events.jsonl latest.md state cwd created_at updated_at meta.json
//	      context/                    handoff.md (and other handed-off files) in a child's session
//	        child/<child>/            one per child: agent session status handoff.md
//	                                  result.md refs.jsonl artifact/
//	      output/                     a child's: where it writes result.md refs.jsonl artifact/
//
// The control files (ControlFiles, formats at CtlParent...) are one line of
// text each: a list is one item a line, an empty or unknown value an empty
// file, meta.json the kin.Agent as one line of JSON. The status file holds
// the governance status (kin.Status); the runtime state (kin.State) is the
// session's state file and meta.json's "state". The README's section "The
// agent filesystem" describes the tree, with an `ls -R` that
// TestReadmeListing keeps true.
//
// # Isolation
//
// An agent's session is its uid's alone (0700 directories under a 0700
// home/<uid>): an agent running as another uid cannot list or read it, so a
// child cannot read its parent's messages.jsonl, and a parent sees its child
// only through context/child/<child>/ in its own session. That needs every
// agent to run as its own uid: agents sharing a uid (as in seed 001's
// example, where both live under home/1000) are not isolated from each
// other by modes and need Landlock on top. Control files belong to the
// daemon with the agent's group, so the agent reads but cannot change them.
// A child never writes into its parent's session: it writes into its own
// output/, and CopyResult copies from there after it has ended.
//
// The owner of a directory can replace anything in it, so nothing in an
// agent's session is authentic to anyone but the agent (not even kin's
// events.jsonl there): the store is the record. What this package
// guarantees is the reverse direction: kin, running as root, never follows
// a link an agent planted, never writes through a hard link (appends
// require one link and the session's uid), never opens a FIFO for writing,
// and copies from a child only regular files and directories the child owns,
// within Options' limits. Every path is reached one component at a time from
// the open root with O_NOFOLLOW; names follow kin.ParseName's grammar, so
// never "", ".", ".." or a '/'.
//
// # Atomicity
//
// Every file is replaced by a temporary file in the same directory
// (".<name>.kin-tmp-<random>"), written, fsynced, renamed over the name,
// then the directory is fsynced: a reader, a killed daemon or a power loss
// leaves the old file or the new one. New control directories, sessions and
// child directories are built under a temporary name and renamed into place
// (RENAME_NOREPLACE), so they appear whole, and an existing one is never
// replaced. CopyResult swaps each entry in with RENAME_EXCHANGE. With
// Options.SpareDir, a session's state and updated_at and a child's status
// are rewritten by exchange with a spare instead (spare.go): no inode is
// freed, and none allocated after a file's first rewrite. Appends to
// events.jsonl are one write(2) of whole lines, fsynced; a line a crash cut
// short (possible only beyond a page, or on power loss) is cut off by the
// next append. After a crash, RemoveTemps at start clears the temporaries,
// and the daemon should rewrite every control file from the store
// (WriteControl skips files already right).
//
// A new agent's control files and session are about 30 new files and
// directories (BenchmarkNewAgent: 6-12 ms here, against 0.4-0.8 ms for
// BenchmarkFloorDurableFile); a status change rewrites only the files that
// changed. On these machines the time is creating inodes, not fsync: with
// Options.NoSync (which trades power-loss durability; atomicity stays)
// BenchmarkNewAgent took as long (docs/PERFORMANCE.md says why).
//
// # Served instead of written
//
// A daemon running as root with /dev/fuse does not write agent/: package
// ctxfuse mounts it and serves agent/<name>, agent/<name>.d/ and its files
// from the store, rendered by ControlValues.Files with the owners and modes
// above, one snapshot per open. WriteControl, ReadControl and RemoveControl
// are then not used on it; everything else here is unchanged, and
// RemoveTemps does not walk into the mount.
//
// # Lifetimes
//
// kin keeps an ended agent's control files (they then say how it ended)
// until its name is taken again, when WriteControl rewrites them for the new
// agent and agent/<name> names the new id; RemoveControl is for an explicit
// purge. Sessions are never removed or reused: cancelling an agent sets its
// session's state to cancelled and leaves messages and events readable
// (seed 001, "Parent Death"); an agent reusing a name gets a new session id
// (CreateSession fails with fs.ErrExist on an existing one).
package ctxfs
