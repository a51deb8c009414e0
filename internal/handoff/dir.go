package handoff

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"strings"
	"syscall"
)

// dir reads files a child wrote, inside one directory, without ever
// following a symbolic link or leaving the directory: every component of a
// path is checked with Lstat, the file is opened through an os.Root, and the
// opened file must be the one that was checked.
type dir struct {
	root     *os.Root
	borrowed bool // the caller's: Close leaves it open
}

func openDir(path string) (*dir, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return nil, invalidf("%s is %s, not a directory", path, describeMode(fi.Mode()))
	}
	r, err := os.OpenRoot(path)
	if err != nil {
		return nil, err
	}
	return &dir{root: r}, nil
}

func (d *dir) Close() error {
	if d.borrowed {
		return nil
	}
	return d.root.Close()
}

// entry is what a relative path names.
type entry struct {
	missing string      // the first component that does not exist, when one does not
	problem string      // why it is not a regular file: "artifact/x is a symlink"
	info    fs.FileInfo // of a regular file
}

func (e entry) ok() bool { return e.missing == "" && e.problem == "" }

// look resolves rel (slash-separated, clean, without "..") component by
// component. err is for failures that are not the child's doing.
func (d *dir) look(rel string) (entry, error) {
	parts := strings.Split(rel, "/")
	for i := range parts {
		p := strings.Join(parts[:i+1], "/")
		fi, err := d.root.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			return entry{missing: p}, nil
		}
		if err != nil {
			return entry{}, err
		}
		last := i == len(parts)-1
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			return entry{problem: p + " is a symlink"}, nil
		case !last && !fi.IsDir():
			return entry{problem: p + " is " + describeMode(fi.Mode()) + ", not a directory"}, nil
		case last && !fi.Mode().IsRegular():
			return entry{problem: p + " is " + describeMode(fi.Mode())}, nil
		case last:
			return entry{info: fi}, nil
		}
	}
	return entry{missing: rel}, nil
}

// open opens the regular file look found, and refuses it if it was swapped
// since.
func (d *dir) open(rel string, e entry) (*os.File, error) {
	f, err := d.root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !os.SameFile(fi, e.info) || !fi.Mode().IsRegular() {
		f.Close()
		return nil, invalidf("%s changed while it was being read", rel)
	}
	return f, nil
}

// read returns up to max bytes of rel, and whether there were more.
func (d *dir) read(rel string, e entry, max int64) ([]byte, bool, error) {
	f, err := d.open(rel, e)
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, false, err
	}
	if int64(len(b)) > max {
		return b[:max], true, nil
	}
	return b, false, nil
}

func (d *dir) hash(rel string, e entry) (string, error) {
	f, err := d.open(rel, e)
	if err != nil {
		return "", err
	}
	defer f.Close()
	return hashFile(f, e.info)
}

// hasDotDot reports whether a slash-separated path has a ".." element. It is
// asked before a path is cleaned or matched: path.Clean("artifact/../x") is
// "x", and a glob can match what Clean would move elsewhere.
func hasDotDot(p string) bool {
	for _, e := range strings.Split(p, "/") {
		if e == ".." {
			return true
		}
	}
	return false
}
