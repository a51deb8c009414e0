package authority

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/kin-agents/kin/internal/policy"
	"github.com/kin-agents/kin/internal/sandbox"
	"github.com/kin-agents/kin/kin"
)

// Grant exactly what was checked (issue 18). The policy check approves a
// mount path as the file it names then: kin opens it (O_PATH, following
// no link anywhere on the way) and records that file's identity with the
// agent, in memory and in its stored policy. At each start the agent's
// effective mounts are opened the same way, each compared with what the
// check of every layer that lists it approved, and handed to the shim as
// descriptors (sandbox.Held): a path that changed since is refused, never
// resolved again. A child that inherits its ancestors' mounts is held to
// what their checks approved.

// FileID is a file's identity: what a check approved at a mount path. The
// zero FileID records that nothing was there (missing, or out of kin's
// reach): kin grants nothing at that path, whatever is there later.
type FileID struct {
	Dev uint64 `json:"dev"`
	Ino uint64 `json:"ino"`
}

func (f FileID) String() string { return fmt.Sprintf("%d:%d", f.Dev, f.Ino) }

// storedPolicy is an agent's own policy as the store keeps it: the policy
// it asked for, and the files its mounts named when it was checked, so
// that a restarted daemon holds the agent (and its descendants) to the
// same files.
type storedPolicy struct {
	kin.Policy
	MountIDs map[string]FileID `json:"kin_mount_ids,omitempty"`
}

// openNoFollow opens an absolute, clean path with O_PATH, following no
// link on the way (ELOOP where a component is a link): sandbox.OpenNoLinks,
// as the shim opens what it grants, with the file's identity.
func openNoFollow(p string) (*os.File, FileID, error) {
	fd, err := sandbox.OpenNoLinks(p)
	if err != nil {
		return nil, FileID{}, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, FileID{}, err
	}
	return os.NewFile(uintptr(fd), p), FileID{Dev: uint64(st.Dev), Ino: st.Ino}, nil
}

// unreachable is an open error that leaves nothing to grant: Landlock
// would skip the path (as the shim does).
func unreachable(err error) bool {
	return errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.EACCES)
}

// identifyMounts is the check's record: the file each mount path (links
// already resolved by canonicalMounts) names now, opened following no
// link. A path that became a link since it was resolved is refused.
func identifyMounts(p *kin.Policy) (map[string]FileID, error) {
	if p == nil || p.Mounts == nil {
		return nil, nil
	}
	ids := make(map[string]FileID, len(p.Mounts))
	for path := range p.Mounts {
		f, id, err := openNoFollow(path)
		switch {
		case err == nil:
			f.Close()
		case errors.Is(err, unix.ELOOP):
			return nil, kin.Errorf(kin.ECodeInvalid, "policy: mount %q is, or passes through, a link that appeared while kin checked it; "+
				"kin approves the file it opens, following no link: ask again once the path stays put", path)
		case unreachable(err):
			id = FileID{} // nothing there to approve: nothing will be granted there
		default:
			return nil, kin.Errorf(kin.ECodeInvalid, "policy: mount %q: %v", path, err)
		}
		ids[path] = id
	}
	return ids, nil
}

// HoldMounts opens the effective policy's mounts for the shim: each must
// be the file the checks of the layers that list it approved. It trims
// spec.RO of kin's own paths inside a held rw mount (Landlock unions
// grants: the shim refuses ro inside rw). The files become the process's
// descriptors 3, 4, ... (supervisor.Spec.ExtraFiles, first); the caller
// closes them once the process has started, or failed to.
func (au *Authority) HoldMounts(layers []kin.PolicyLayer, flat kin.Policy, spec *sandbox.Spec) ([]*os.File, error) {
	rw, ro := policy.Landlock(flat)
	if flat.Mounts == nil {
		return nil, nil
	}
	inside := func(p string, dirs []string) bool {
		return slices.ContainsFunc(dirs, func(d string) bool { return p != d && (d == "/" || strings.HasPrefix(p, d+"/")) })
	}
	rw = slices.DeleteFunc(rw, func(p string) bool { return inside(p, rw) })
	ro = slices.DeleteFunc(ro, func(p string) bool {
		return inside(p, rw) || slices.Contains(spec.RW, p) || inside(p, spec.RW) || inside(p, ro)
	})
	spec.RO = slices.DeleteFunc(spec.RO, func(p string) bool { return slices.Contains(rw, p) || inside(p, rw) })
	var files []*os.File
	fail := func(err error) ([]*os.File, error) {
		CloseFiles(files)
		return nil, err
	}
	for _, g := range []struct {
		paths []string
		rw    bool
	}{{rw, true}, {ro, false}} {
		for _, p := range g.paths {
			want, by, err := au.approved(layers, p)
			if err != nil {
				return fail(err)
			}
			if want == (FileID{}) {
				continue // nothing was there when checked
			}
			f, got, err := au.openBeneath(layers, p)
			switch {
			case err == nil:
			case unreachable(err):
				continue // gone: nothing to grant
			case errors.Is(err, unix.ELOOP):
				return fail(kin.Errorf(kin.ECodeDenied, "mount %q is now a link, or passes through one: it changed since the policy check of agent %d approved it; "+
					"kin refuses rather than resolve it again", p, by))
			case errors.As(err, new(*kin.Error)):
				return fail(err)
			default:
				return fail(kin.Errorf(kin.ECodeDenied, "mount %q: %v", p, err))
			}
			if got != want {
				f.Close()
				return fail(kin.Errorf(kin.ECodeDenied, "mount %q is no longer the file the policy check of agent %d approved (file %s, approved %s): it was replaced since; "+
					"kin refuses rather than grant what no check approved", p, by, got, want))
			}
			spec.Held = append(spec.Held, sandbox.Held{Path: p, FD: 3 + len(files), RW: g.rw, Dev: got.Dev, Ino: got.Ino})
			files = append(files, f)
		}
	}
	return files, nil
}

// openBeneath opens mount path p following no link (its folder, then p
// in it) and checks that it lies where every layer's check approved the
// mounts above it: a layer that grants p through a listed ancestor q
// granted the file q was, so p must be beneath that file now (".." walked
// up from p's folder), or the agent would get a path its ancestor cannot
// see (q replaced since, by whoever may write q's folder).
func (au *Authority) openBeneath(layers []kin.PolicyLayer, p string) (*os.File, FileID, error) {
	if p == "/" {
		return openNoFollow(p)
	}
	dir, _, err := openNoFollow(filepath.Dir(p))
	if err != nil {
		return nil, FileID{}, err
	}
	defer dir.Close()
	fd, err := unix.Openat2(int(dir.Fd()), filepath.Base(p), &unix.OpenHow{
		Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) {
		return openNoFollow(p) // no openat2: the ancestors are not checked
	}
	if err != nil {
		return nil, FileID{}, err
	}
	f := os.NewFile(uintptr(fd), p)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		f.Close()
		return nil, FileID{}, err
	}
	id := FileID{Dev: uint64(st.Dev), Ino: st.Ino}
	au.mu.Lock()
	defer au.mu.Unlock()
	for _, l := range layers {
		o := au.own[l.Agent]
		if l.Source != kin.SourcePolicy || o == nil {
			continue
		}
		for q, m := range l.Policy.Mounts {
			if m == kin.ModeHidden || q == p || !(q == "/" || strings.HasPrefix(p, q+"/")) {
				continue
			}
			want, ok := o.mountIDs[q]
			if ok && want == (FileID{}) {
				f.Close()
				return nil, FileID{}, kin.Errorf(kin.ECodeDenied, "mount %q is under %q, which did not exist when the policy check of agent %d approved it: "+
					"nothing is granted there", p, q, l.Agent)
			}
			if !ok {
				continue // approved reports a layer without records
			}
			up := strings.Count(strings.TrimPrefix(p, q), "/") - 1 // from p's folder to q
			if q == "/" {
				up = strings.Count(p, "/") - 1
			}
			got, err := ancestor(int(dir.Fd()), up)
			if err != nil || got != want {
				f.Close()
				return nil, FileID{}, kin.Errorf(kin.ECodeDenied, "mount %q is no longer beneath the file %q was when the policy check of agent %d approved it: "+
					"%q was replaced since; kin refuses rather than grant what that agent cannot see", p, q, l.Agent, q)
			}
		}
	}
	return f, id, nil
}

// ancestor is the identity of the folder up levels above folder fd.
func ancestor(fd, up int) (FileID, error) {
	cur, err := unix.Openat(fd, ".", unix.O_PATH|unix.O_CLOEXEC|unix.O_DIRECTORY, 0)
	if err != nil {
		return FileID{}, err
	}
	defer func() { unix.Close(cur) }()
	for range up {
		next, err := unix.Openat(cur, "..", unix.O_PATH|unix.O_CLOEXEC|unix.O_DIRECTORY, 0)
		if err != nil {
			return FileID{}, err
		}
		unix.Close(cur)
		cur = next
	}
	var st unix.Stat_t
	if err := unix.Fstat(cur, &st); err != nil {
		return FileID{}, err
	}
	return FileID{Dev: uint64(st.Dev), Ino: st.Ino}, nil
}

// approved is the file the checks approved at mount path p: every layer
// that lists p must have recorded the same one. by names the agent whose
// check it was (the nearest).
func (au *Authority) approved(layers []kin.PolicyLayer, p string) (id FileID, by kin.AgentID, err error) {
	au.mu.Lock()
	defer au.mu.Unlock()
	found := false
	for i := len(layers) - 1; i >= 0; i-- {
		l := layers[i]
		if _, listed := l.Policy.Mounts[p]; !listed {
			continue
		}
		var ids map[string]FileID
		if o := au.own[l.Agent]; l.Source == kin.SourcePolicy && o != nil {
			ids = o.mountIDs
		}
		rec, ok := ids[p]
		if !ok {
			return FileID{}, 0, kin.Errorf(kin.ECodeDenied, "mount %q of agent %d has no record of the file its policy check approved "+
				"(it was registered by a kin that did not record them): spawn it again to have its mounts checked", p, l.Agent)
		}
		switch {
		case !found:
			id, by, found = rec, l.Agent, true
		case rec != id:
			return FileID{}, 0, kin.Errorf(kin.ECodeDenied, "mount %q: the policy checks of agents %d and %d approved different files there (%s, %s): "+
				"it was replaced between them; kin refuses rather than choose", p, by, l.Agent, id, rec)
		}
	}
	if !found {
		return FileID{}, 0, kin.Errorf(kin.ECodeInternal, "mount %q is in the effective policy but in no layer", p)
	}
	return id, by, nil
}

func CloseFiles(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}
