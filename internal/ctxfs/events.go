package ctxfs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// AppendEvents appends events (JSON objects, e.g. marshalled kin.Events)
// to the session's events.jsonl as compact lines with one write(2) and one
// fsync, under the same rules as AppendEvent. Nothing is written when one
// of them is not a JSON object or too long.
func (f *FS) AppendEvents(s Session, events [][]byte) error {
	return f.appendLines(s, FileEvents, events)
}

func (f *FS) appendLines(s Session, name string, events [][]byte) error {
	if len(events) == 0 {
		return nil
	}
	var buf bytes.Buffer
	for _, e := range events {
		trimmed := bytes.TrimSpace(e)
		if len(trimmed) == 0 || trimmed[0] != '{' {
			return fmt.Errorf("ctxfs: event is not a JSON object")
		}
		start := buf.Len()
		if err := json.Compact(&buf, trimmed); err != nil {
			return fmt.Errorf("ctxfs: event: %w", err)
		}
		buf.WriteByte('\n')
		if n := buf.Len() - start; n > MaxEventLine {
			return fmt.Errorf("ctxfs: event is %d bytes; at most %d: %w", n, MaxEventLine, ErrTooLarge)
		}
	}
	fd, err := f.openSession(s)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	dir := f.Dir(s)
	if err := f.appendAt(fd, name, buf.Bytes(), s.Owner, dir); err != nil {
		return fmt.Errorf("ctxfs: %s: %w", dir, err)
	}
	return nil
}

// LastEventSeq returns the "seq" of the last whole line of the session's
// events.jsonl, 0 when it is empty or missing. The daemon uses it after a
// restart so that an event already appended is not appended again. A last
// line that does not parse counts as 0 (the caller then appends from its
// own cursor).
func (f *FS) LastEventSeq(s Session) (int64, error) { return f.lastSeq(s, FileEvents) }

// LastMessageSeq is LastEventSeq for messages.jsonl: the "seq" of its last
// line when kin appended it (a message sent through kin), else 0.
func (f *FS) LastMessageSeq(s Session) (int64, error) { return f.lastSeq(s, FileMessages) }

// AppendMessages appends messages sent through kin (JSON objects) to the
// session's messages.jsonl, like AppendEvents.
func (f *FS) AppendMessages(s Session, msgs [][]byte) error {
	return f.appendLines(s, FileMessages, msgs)
}

func (f *FS) lastSeq(s Session, name string) (int64, error) {
	fd, err := f.openSession(s)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	efd, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return 0, nil
	}
	if err != nil {
		return 0, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	file := os.NewFile(uintptr(efd), name)
	defer file.Close()
	var st unix.Stat_t
	if err := unix.Fstat(efd, &st); err != nil {
		return 0, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return 0, fmt.Errorf("%s: %w", name, ErrNotRegular)
	}
	size := st.Size
	if size == 0 {
		return 0, nil
	}
	n := min(size, int64(MaxEventLine)+1)
	buf := make([]byte, n)
	if _, err := unix.Pread(efd, buf, size-n); err != nil {
		return 0, err
	}
	buf = bytes.TrimRight(buf, "\n")
	if i := bytes.LastIndexByte(buf, '\n'); i >= 0 {
		buf = buf[i+1:]
	}
	var last struct {
		Seq int64 `json:"seq"`
	}
	if json.Unmarshal(buf, &last) != nil {
		return 0, nil
	}
	return last.Seq, nil
}

// OpenDir opens the directory at path (beneath the root) without following
// a link on the way. Code that must read a directory an agent controls with
// a path-based API can name it as "/proc/self/fd/<fd>/.", which stays the
// directory that was opened whatever is renamed meanwhile.
func (f *FS) OpenDir(path string) (*os.File, error) {
	fd, err := f.walkPath(path)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), path), nil
}
