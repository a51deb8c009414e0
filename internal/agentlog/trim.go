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
	scan(path, func(p string) (bool, error) {
		fi, err := os.Lstat(p)
		if err != nil || !fi.Mode().IsRegular() {
			return false, nil
		}
		out = append(out, File{Path: p, Size: fi.Size()})
		return true, nil
	})
	return out
}

// Ended is the logs of ended agents that share one budget, the first to
// end first, each with its files newest first, and their bytes together:
// adding a log costs a few lstats, trimming only removes, so a caller can
// keep one and add to it on every end.
type Ended struct {
	logs  [][]File
	bytes int64
}

// Add appends the log at path of an agent that ended after the others.
func (e *Ended) Add(path string) {
	files := Files(path)
	if len(files) == 0 {
		return
	}
	for _, f := range files {
		e.bytes += f.Size
	}
	e.logs = append(e.logs, files)
}

// Bytes is the size of the logs together.
func (e *Ended) Bytes() int64 { return e.bytes }

// Trim removes the oldest files of the first logs to end until the logs
// fit in budget, like a rotation of one log, and returns the bytes removed.
func (e *Ended) Trim(budget int64) (removed int64, err error) {
	for e.bytes > budget && len(e.logs) > 0 {
		files := e.logs[0]
		f := files[len(files)-1]
		if rerr := os.Remove(f.Path); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			err = errors.Join(err, rerr)
		} else {
			removed += f.Size
		}
		e.bytes -= f.Size
		if files = files[:len(files)-1]; len(files) == 0 {
			e.logs = e.logs[1:]
		} else {
			e.logs[0] = files
		}
	}
	return removed, err
}

// Trim keeps the logs at paths (given newest first, the last to end
// first) within budget bytes together, removing the oldest files of the
// first to end (Ended.Trim). It returns the bytes kept and removed.
func Trim(paths []string, budget int64) (kept, removed int64, err error) {
	var e Ended
	for i := len(paths) - 1; i >= 0; i-- {
		e.Add(paths[i])
	}
	removed, err = e.Trim(budget)
	return e.Bytes(), removed, err
}
