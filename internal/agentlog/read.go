package agentlog

import (
	"errors"
	"io"
	"math"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// Reader reads a log across its rotations: the kept files oldest first
// (path.N ... path.1, then path), as one stream. Positions are bytes into
// that stream as it is when the Reader starts: rotation drops the oldest
// bytes, so an offset is not stable across rotations (docs: the logs
// endpoint). Following works like tail -F: a file renamed away is read to
// its end through the descriptor already open, then the next one.
type Reader struct {
	path   string
	offset int64 // where to start, once a file exists
	tail   int64
	cur    *os.File
	curID  fileID
	pos    int64
}

type fileID struct{ dev, ino uint64 }

// NewReader reads the log at path from offset or, with tail > 0, from at
// most tail bytes before its end (whichever is later).
func NewReader(path string, offset, tail int64) *Reader {
	return &Reader{path: path, offset: offset, tail: tail}
}

// Close closes the file being read.
func (r *Reader) Close() {
	if r.cur != nil {
		r.cur.Close()
		r.cur = nil
	}
}

// ReadAvailable calls fn with everything written so far from where the
// reader is, following rotations, and returns at the end of the newest
// file (or when fn fails). buf is the chunk buffer.
func (r *Reader) ReadAvailable(buf []byte, fn func([]byte) error) error {
	if r.cur == nil {
		ok, err := r.position()
		if err != nil || !ok {
			return err
		}
	}
	for {
		if err := r.readToEnd(buf, fn); err != nil {
			return err
		}
		next, err := r.next()
		if err != nil || next == nil {
			return err
		}
		// r.cur was rotated: its writer wrote its last bytes before the
		// rename, so reading it once more gets all of them.
		if err := r.readToEnd(buf, fn); err != nil {
			next.f.Close()
			return err
		}
		r.cur.Close()
		r.cur, r.curID, r.pos = next.f, next.id, 0
	}
}

// ReadKept calls fn with what the log holds when it is called, from where
// the reader starts, and returns at the end of that: bytes written later
// are not read, whatever the rotations meanwhile, so it reads at most what
// is kept (Bytes × (1 + Keep)). It holds the files it will read open until
// it has read them (at most 1 + Keep): a file's identity is no name once
// it is removed, as its inode number goes to the next file made. It is for
// a reader used once.
func (r *Reader) ReadKept(buf []byte, fn func([]byte) error) error {
	files, err := chain(r.path)
	if err != nil || len(files) == 0 {
		return err
	}
	i, off := r.start(files)
	for _, f := range files[:i] {
		f.f.Close()
	}
	files = files[i:]
	defer func() {
		for _, f := range files {
			f.f.Close()
		}
	}()
	r.Close()
	for k, f := range files {
		r.cur, r.curID, r.pos = f.f, f.id, 0
		if k == 0 {
			r.pos = off
		}
		err := r.readTo(buf, fn, f.size)
		r.cur = nil // closed with files
		if err != nil {
			return err
		}
	}
	return nil
}

// readTo reads the current file from where the reader is up to end.
func (r *Reader) readTo(buf []byte, fn func([]byte) error, end int64) error {
	for r.pos < end {
		n, err := r.cur.ReadAt(buf[:min(int64(len(buf)), end-r.pos)], r.pos)
		if n > 0 {
			r.pos += int64(n)
			if ferr := fn(buf[:n]); ferr != nil {
				return ferr
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// readToEnd reads the current file from where the reader is to its end.
func (r *Reader) readToEnd(buf []byte, fn func([]byte) error) error {
	return r.readTo(buf, fn, math.MaxInt64)
}

// position opens the file the reader starts in; false when there is no
// log yet.
func (r *Reader) position() (bool, error) {
	files, err := chain(r.path)
	if err != nil || len(files) == 0 {
		return false, err
	}
	i, off := r.start(files)
	for j, f := range files {
		if j != i {
			f.f.Close()
		}
	}
	r.cur, r.curID, r.pos = files[i].f, files[i].id, off
	return true, nil
}

// start is where the reader starts in files: which one, and where in it.
func (r *Reader) start(files []openFile) (i int, off int64) {
	var total int64
	for _, f := range files {
		total += f.size
	}
	off = r.offset
	if r.tail > 0 {
		off = max(off, total-r.tail)
	}
	for ; i < len(files)-1 && off >= files[i].size; i++ {
		off -= files[i].size
	}
	return i, off
}

// next is the file after the current one in the chain as it is now: nil
// when the current one is still the newest. When the current one is gone
// (more rotations than kept files happened while it was read), the oldest
// kept file follows.
func (r *Reader) next() (*openFile, error) {
	files, err := chain(r.path)
	if err != nil {
		return nil, err
	}
	at := -1
	for i, f := range files {
		if f.id == r.curID {
			at = i
			break
		}
	}
	var out *openFile
	switch {
	case at >= 0 && at+1 < len(files):
		out = &files[at+1]
	case at < 0 && len(files) > 0:
		out = &files[0]
	}
	for i := range files {
		if out == nil || &files[i] != out {
			files[i].f.Close()
		}
	}
	return out, nil
}

type openFile struct {
	f    *os.File
	id   fileID
	size int64
}

// chain opens the log's files that exist, oldest first (a file seen twice
// by the scan is kept once).
func chain(path string) ([]openFile, error) {
	var rev []openFile
	open := func(p string) (bool, error) {
		f, err := os.OpenFile(p, os.O_RDONLY|unix.O_NOFOLLOW, 0)
		if errors.Is(err, os.ErrNotExist) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		fi, err := f.Stat()
		if err != nil {
			f.Close()
			return false, err
		}
		st, _ := fi.Sys().(*syscall.Stat_t)
		if !fi.Mode().IsRegular() || st == nil {
			f.Close()
			return false, nil
		}
		id := fileID{uint64(st.Dev), st.Ino}
		for _, o := range rev {
			if o.id == id { // renamed to the next number while the scan ran
				f.Close()
				return true, nil
			}
		}
		rev = append(rev, openFile{f: f, id: id, size: fi.Size()})
		return true, nil
	}
	fail := func(err error) ([]openFile, error) {
		for _, f := range rev {
			f.f.Close()
		}
		return nil, err
	}
	if err := scan(path, open); err != nil {
		return fail(err)
	}
	out := make([]openFile, len(rev))
	for i, f := range rev {
		out[len(rev)-1-i] = f
	}
	return out, nil
}

// scan calls visit with the log's file names newest first (path, path.1,
// path.2 ...), visit saying whether the file is there. It goes up the
// numbers, the way rotation moves files, so a rotation during the scan
// shows a file twice, never hides one; a rotation in progress leaves at
// most one gap in the numbers, so the scan goes on past one missing file
// and stops at two.
func scan(path string, visit func(p string) (bool, error)) error {
	missing := 0
	for i := 0; i <= maxKeep+1 && missing < 2; i++ {
		p := path
		if i > 0 {
			p = rotated(path, i)
		}
		ok, err := visit(p)
		if err != nil {
			return err
		}
		if ok {
			missing = 0
		} else {
			missing++
		}
	}
	return nil
}
