package template

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"

	"github.com/kin-agents/kin/kin"
)

// Default modes of a file or directory whose kin.TemplateFile.Mode is 0.
const (
	DefaultFileMode = 0o644
	DefaultDirMode  = 0o755
)

// tmpPrefix starts the temporary name of a file being written.
const tmpPrefix = ".kin-tmp-"

// Write writes files (rendered: see Render) under dir, which must exist,
// owned by uid and gid (no chown when uid < 0) and with their modes
// exactly (the umask does not apply). It works through an os.Root on dir,
// so nothing is reached outside dir, even through a symbolic link that
// appears in it meanwhile. It creates missing parent directories (mode
// DefaultDirMode); a directory that exists is kept as it is; any other
// existing entry at a path is an error naming it, and is never replaced.
// Each file is written under a temporary name, fsynced, then linked to its
// name. On error it removes what it created.
func Write(dir string, files []kin.TemplateFile, uid, gid int) (err error) {
	if err := checkFiles(files, false); err != nil {
		return err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("template: %w", err)
	}
	defer root.Close()
	w := &writer{root: root, uid: uid, gid: gid}
	defer func() {
		if err != nil {
			w.undo()
		}
	}()
	for _, f := range files {
		if f.Dir {
			err = w.mkdirAll(f.Path, modeOf(f))
		} else {
			err = w.file(f)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func modeOf(f kin.TemplateFile) fs.FileMode {
	switch {
	case f.Mode != 0:
		return fs.FileMode(f.Mode & 0o777)
	case f.Dir:
		return DefaultDirMode
	}
	return DefaultFileMode
}

type writer struct {
	root     *os.Root
	uid, gid int
	created  []string // in order of creation
}

// undo removes what w created, newest first.
func (w *writer) undo() {
	for i := len(w.created) - 1; i >= 0; i-- {
		_ = w.root.Remove(w.created[i])
	}
}

// mkdirAll makes sure p and every directory above it exist; it creates p
// with mode and the others with DefaultDirMode.
func (w *writer) mkdirAll(p string, mode fs.FileMode) error {
	parts := strings.Split(p, "/")
	for i := range parts {
		m := fs.FileMode(DefaultDirMode)
		if i == len(parts)-1 {
			m = mode
		}
		if err := w.mkdir(strings.Join(parts[:i+1], "/"), m); err != nil {
			return err
		}
	}
	return nil
}

// mkdir creates the directory p, or keeps it if it is one already.
func (w *writer) mkdir(p string, mode fs.FileMode) error {
	err := w.root.Mkdir(p, 0o700)
	if errors.Is(err, fs.ErrExist) {
		fi, err := w.root.Lstat(p)
		if err != nil {
			return fmt.Errorf("template: %w", err)
		}
		if !fi.IsDir() {
			return fmt.Errorf("template: %s already exists in the workspace and is not a directory (a %s): %w", p, kind(fi.Mode().Type()), fs.ErrExist)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("template: %w", err)
	}
	w.created = append(w.created, p)
	d, err := w.root.Open(p)
	if err != nil {
		return fmt.Errorf("template: %w", err)
	}
	defer d.Close()
	if err := w.same(d, p, true); err != nil {
		return err
	}
	return w.own(d, mode)
}

// same checks that the open f is what p names (not something a symbolic
// link put there), a directory or a regular file.
func (w *writer) same(f *os.File, p string, dir bool) error {
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("template: %w", err)
	}
	li, err := w.root.Lstat(p)
	if err != nil {
		return fmt.Errorf("template: %w", err)
	}
	if fi.IsDir() != dir || !os.SameFile(fi, li) {
		return fmt.Errorf("template: %s changed while it was written", p)
	}
	return nil
}

// own gives the open f its owner and mode.
func (w *writer) own(f *os.File, mode fs.FileMode) error {
	if w.uid >= 0 {
		if err := f.Chown(w.uid, w.gid); err != nil {
			return fmt.Errorf("template: %w", err)
		}
	}
	if err := f.Chmod(mode); err != nil {
		return fmt.Errorf("template: %w", err)
	}
	return nil
}

// file writes the file f under a temporary name and links it to its name.
func (w *writer) file(f kin.TemplateFile) error {
	if dir := path.Dir(f.Path); dir != "." {
		if err := w.mkdirAll(dir, DefaultDirMode); err != nil {
			return err
		}
	}
	if fi, err := w.root.Lstat(f.Path); err == nil {
		return exists(f.Path, fi)
	}
	tmp := path.Join(path.Dir(f.Path), tmpPrefix+rand.Text())
	out, err := w.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("template: %w", err)
	}
	defer w.root.Remove(tmp) // after the link, or on error
	err = w.fill(out, tmp, f)
	if cerr := out.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("template: %w", cerr)
	}
	if err != nil {
		return err
	}
	if err := w.root.Link(tmp, f.Path); err != nil {
		if fi, lerr := w.root.Lstat(f.Path); errors.Is(err, fs.ErrExist) && lerr == nil {
			return exists(f.Path, fi)
		}
		return fmt.Errorf("template: %w", err)
	}
	w.created = append(w.created, f.Path)
	return nil
}

func (w *writer) fill(out *os.File, tmp string, f kin.TemplateFile) error {
	if err := w.same(out, tmp, false); err != nil {
		return err
	}
	if _, err := out.WriteString(f.Data); err != nil {
		return fmt.Errorf("template: %w", err)
	}
	if err := w.own(out, modeOf(f)); err != nil {
		return err
	}
	if err := out.Sync(); err != nil {
		return fmt.Errorf("template: %w", err)
	}
	return nil
}

func exists(p string, fi fs.FileInfo) error {
	what := "a file"
	if !fi.Mode().IsRegular() {
		what = "a " + kind(fi.Mode().Type())
	}
	return fmt.Errorf("template: %s already exists in the workspace (%s); a template never replaces anything: %w", p, what, fs.ErrExist)
}
