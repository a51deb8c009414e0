package uidrange

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// HostFiles are the files that say which ids the host already gives out.
// Agents run with gid = uid, so groups count as much as users; subordinate
// ranges are other users' containers.
type HostFiles struct {
	Passwd, Group, Subuid, Subgid string
}

// DefaultHostFiles are the host's own.
func DefaultHostFiles() HostFiles {
	return HostFiles{Passwd: "/etc/passwd", Group: "/etc/group", Subuid: "/etc/subuid", Subgid: "/etc/subgid"}
}

// Taken is ids the host gives to someone: What names who ("user alice
// (uid 1000) in /etc/passwd").
type Taken struct {
	Range
	What string
}

// hostTaken reads every id the host files give out. A missing file gives
// none; an unreadable one is an error (a range checked against nothing is
// not checked).
func hostTaken(f HostFiles) ([]Taken, error) {
	var out []Taken
	for _, src := range []struct {
		path  string
		parse func(io.Reader, string) ([]Taken, error)
	}{
		{f.Passwd, parseIDFile("user", "uid")},
		{f.Group, parseIDFile("group", "gid")},
		{f.Subuid, parseSubIDs("subordinate uids")},
		{f.Subgid, parseSubIDs("subordinate gids")},
	} {
		if src.path == "" {
			continue
		}
		file, err := os.Open(src.path)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read the host's ids: %w", err)
		}
		t, err := src.parse(file, src.path)
		file.Close()
		if err != nil {
			return nil, err
		}
		out = append(out, t...)
	}
	return out, nil
}

// parseIDFile reads /etc/passwd or /etc/group lines, name:x:ID:...; lines
// that are not entries (comments, NIS "+" lines, blanks) are skipped.
func parseIDFile(kind, idName string) func(io.Reader, string) ([]Taken, error) {
	return func(r io.Reader, path string) ([]Taken, error) {
		var out []Taken
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20) // group lines list members
		for sc.Scan() {
			f := strings.Split(sc.Text(), ":")
			if len(f) < 3 || f[0] == "" || strings.HasPrefix(f[0], "#") {
				continue
			}
			id, err := strconv.ParseUint(f[2], 10, 32)
			if err != nil {
				continue
			}
			out = append(out, Taken{Range{uint32(id), 1}, fmt.Sprintf("%s %s (%s %d) in %s", kind, f[0], idName, id, path)})
		}
		if err := sc.Err(); err != nil {
			return nil, fmt.Errorf("read %s: %w", path, err)
		}
		return out, nil
	}
}

// parseSubIDs reads /etc/subuid or /etc/subgid lines, name:START:COUNT.
func parseSubIDs(kind string) func(io.Reader, string) ([]Taken, error) {
	return func(r io.Reader, path string) ([]Taken, error) {
		var out []Taken
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			f := strings.Split(strings.TrimSpace(sc.Text()), ":")
			if len(f) != 3 || f[0] == "" || strings.HasPrefix(f[0], "#") {
				continue
			}
			st, err1 := strconv.ParseUint(f[1], 10, 32)
			n, err2 := strconv.ParseUint(f[2], 10, 32)
			if err1 != nil || err2 != nil || n == 0 {
				continue
			}
			rg := Range{uint32(st), uint32(n)}
			out = append(out, Taken{rg, fmt.Sprintf("%s %s of %s in %s", kind, rg.Span(), f[0], path)})
		}
		if err := sc.Err(); err != nil {
			return nil, fmt.Errorf("read %s: %w", path, err)
		}
		return out, nil
	}
}
