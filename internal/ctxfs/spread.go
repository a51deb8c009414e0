package ctxfs

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// fsTopdirFL is FS_TOPDIR_FL (chattr +T): ext2/3/4's Orlov allocator
// places each new subdirectory of such a directory in a block group of its
// own choosing (one with more free inodes and blocks than most), as it does
// for directories made at the file system's root, rather than beside its
// parent.
const fsTopdirFL = 0x00020000

// SpreadSubdirs sets FS_TOPDIR_FL on the directory open as fd, where the
// file system has the flag; a file system that refuses or ignores it is
// not an error.
//
// Why: on ext4 without a journal (the machines kin is measured on),
// allocating an inode scans past every inode freed recently in its block
// group, and a busy directory's group (/tmp under test suites, or kin's own
// home after a churn of agents) has thousands: 0.5-0.7 ms of CPU a file,
// against 30 µs in a group nobody churns (200 directories of 20 files under
// a churned /tmp, with and without the flag on their parent). kin sets it
// on the directories whose subdirectories are one per agent (ctx/home,
// ctx/agent, a session's context/child). Nothing an agent or a tool sees
// changes but lsattr's T.
func SpreadSubdirs(fd int) error {
	flags, err := unix.IoctlGetInt(fd, unix.FS_IOC_GETFLAGS)
	if err != nil {
		if unsupported(err) {
			return nil
		}
		return err
	}
	if flags&fsTopdirFL != 0 {
		return nil
	}
	if err := unix.IoctlSetPointerInt(fd, unix.FS_IOC_SETFLAGS, flags|fsTopdirFL); err != nil && !unsupported(err) {
		return err
	}
	return nil
}

func unsupported(err error) bool {
	return errors.Is(err, unix.ENOTTY) || errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS)
}

// SpreadDir is SpreadSubdirs on the directory at path.
func SpreadDir(path string) error {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	return SpreadSubdirs(fd)
}
