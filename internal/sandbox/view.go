package sandbox

import (
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// The default view (Spec.All): everything but kin's own state. Landlock
// has no deny rule: a rule on a directory grants its whole hierarchy, so
// "/ except /home/ann/.kin" must be said as a rule on every entry of /
// but home, on every entry of /home but ann, on every entry of /home/ann
// but .kin. The directories on those chains get no rule of their own.
//
// What follows from that, and is documented for users: an agent cannot
// create a new entry directly in a directory on such a chain (/, /home,
// /home/ann above, or /tmp when kin's home is in /tmp), and an entry made
// there after the agent started is not visible to it. Everything that
// existed there when it started, and everything below, is.

// viewRules opens the rules of the All view: rightsRW on every entry off
// the chains from / to each hidden or read-only path. The read-only paths'
// own rules come from Spec.RO (openRules). Entries that are links get no
// rule (a link is reached through its target's rule); entries the agent's
// user cannot open are skipped, as are directories on a chain it cannot
// list: it could not reach what is under them anyway.
func viewRules(spec *Spec, handled uint64) []rule {
	special := append(append([]string(nil), spec.Hidden...), spec.RO...)
	v := viewWalker{special: special, handled: handled}
	fd, err := unix.Open("/", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	v.walk(fd, "/")
	return v.rules
}

type viewWalker struct {
	special []string
	handled uint64
	rules   []rule
}

// onChain says whether p is special itself (skip it) or an ancestor of a
// special path (walk into it).
func (v *viewWalker) onChain(p string) (isSpecial, ancestor bool) {
	for _, s := range v.special {
		if s == p {
			isSpecial = true
		} else if within(s, p) {
			ancestor = true
		}
	}
	return
}

// walk grants the entries of the directory open as dirfd (closing it).
func (v *viewWalker) walk(dirfd int, dir string) {
	f := os.NewFile(uintptr(dirfd), dir)
	defer f.Close()
	// The entries' types come with the directory (d_type; the os package
	// stats only where the file system gives none): no stat per entry,
	// which is most of the walk's cost in a directory as large as a busy
	// /tmp. An entry replaced between the read and its open is opened
	// without following a link, as before: a rule that no longer fits it
	// is refused by Landlock and skipped (optional).
	ents, err := f.ReadDir(-1)
	if err != nil {
		return
	}
	for _, e := range ents {
		name := e.Name()
		p := filepath.Join(dir, name)
		isSpecial, ancestor := v.onChain(p)
		if isSpecial {
			continue
		}
		typ := e.Type()
		if typ&os.ModeSymlink != 0 {
			continue
		}
		isDir := typ.IsDir()
		if ancestor {
			if !isDir {
				continue // a special path under a non-directory does not exist
			}
			sub, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				continue
			}
			v.walk(sub, p)
			continue
		}
		fd, err := unix.Openat(dirfd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			continue
		}
		a := rightsRW & v.handled
		if !isDir {
			a &= accessFile
		}
		v.rules = append(v.rules, rule{path: p, fd: fd, access: a, optional: true})
	}
}
