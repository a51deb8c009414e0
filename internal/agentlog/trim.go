package agentlog

import (
	"errors"
	"os"
)

// File is one of a log's files.
type File struct {
	Path string
	Size int64
}

// Files lists the log's files at path that exist, newest first (path,
// path.1, path.2 ...), each a regular file (never followed if a link).
func Files(path string) []File {
	var out []File
	missing := 0
	for i := 0; i <= maxKeep+1 && missing < 2; i++ {
		p := path
		if i > 0 {
			p = rotated(path, i)
		}
		fi, err := os.Lstat(p)
		if err != nil || !fi.Mode().IsRegular() {
			missing++ // a gap of one is a rotation in progress (chain)
			continue
		}
		missing = 0
		out = append(out, File{Path: p, Size: fi.Size()})
	}
	return out
}

// Trim keeps the newest files of the logs at paths (given newest first)
// within budget bytes together and removes the rest: once a file does not
// fit, it and every older one are removed, so each log keeps its newest
// files and loses its oldest, like a rotation. It returns the bytes kept
// and removed.
func Trim(paths []string, budget int64) (kept, removed int64, err error) {
	full := false
	for _, path := range paths {
		for _, f := range Files(path) {
			if !full && kept+f.Size <= budget {
				kept += f.Size
				continue
			}
			full = true
			if e := os.Remove(f.Path); e != nil && !errors.Is(e, os.ErrNotExist) {
				err = errors.Join(err, e)
				continue
			}
			removed += f.Size
		}
	}
	return kept, removed, err
}
