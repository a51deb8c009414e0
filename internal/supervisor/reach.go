package supervisor

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// closedOnTheWay names the directory on the way to dir (dir included) that
// the agent's uid and groups may not search (enter), where a start refused
// with EACCES comes from that and not from the program: the mode bits say
// so and no ACL could say otherwise. "" when none is found (cred nil or
// root, a relative dir, a stat refused, or an ACL on the way).
func closedOnTheWay(dir string, cred *syscall.Credential) string {
	if cred == nil || cred.Uid == 0 || !filepath.IsAbs(dir) {
		return ""
	}
	p := "/"
	for _, part := range append([]string{""}, strings.Split(strings.Trim(filepath.Clean(dir), "/"), "/")...) {
		p = filepath.Join(p, part)
		var st unix.Stat_t
		if unix.Stat(p, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
			return ""
		}
		if _, err := unix.Getxattr(p, "system.posix_acl_access", nil); err == nil {
			return "" // an ACL may let it in: the bits do not tell
		}
		var bit uint32
		switch {
		case st.Uid == cred.Uid:
			bit = 0o100
		case st.Gid == cred.Gid || slices.Contains(cred.Groups, st.Gid):
			bit = 0o010
		default:
			bit = 0o001
		}
		if st.Mode&bit == 0 {
			return fmt.Sprintf("its working directory %s cannot be entered by the agent's uid %d: %s is mode %04o, owner uid %d gid %d (let it in, e.g. chmod o+x %s, or give the agent a working directory it can reach)",
				dir, cred.Uid, p, st.Mode&0o7777, st.Uid, st.Gid, p)
		}
	}
	return ""
}
