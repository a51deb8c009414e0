package ctxfs

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"

	"golang.org/x/sys/unix"
)

// kin writes the agent filesystem without syncing it file by file: it all
// follows the store. After a crash of the machine a file written shortly
// before may be there but empty; the daemon then rebuilds the tree from
// the store, and the two functions below restore what the event log does
// not rewrite: a session's own files and a child's folder in its parent's
// session. Each writes a file only where it is missing or empty, so that
// nothing an agent or kin wrote since is replaced. The private key is not
// among them: kin keeps only its public half, and an agent's key is of no
// use once the agent died with the machine.

// RepairSession restores the files CreateSession wrote of an existing
// session (meta.json, cwd, created_at, updated_at, the empty ones, and the
// handoff and context files) where they are missing or empty. p is what
// CreateSession was given (Key is ignored).
func (f *FS) RepairSession(p SessionParams) (int, error) {
	p.Key = nil
	if err := p.validate(); err != nil {
		return 0, err
	}
	meta, err := json.Marshal(SessionMeta{
		Agent: p.Agent, AgentID: p.AgentID, Session: p.ID, Run: p.Run, Parent: p.Parent.String(),
		UID: p.UID, GID: p.GID, CreatedAt: p.Now.UTC(),
	})
	if err != nil {
		return 0, err
	}
	fd, err := f.openSession(p.Session)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	now := stamp(p.Now)
	n, err := f.fillEmpty(fd, p.Owner, []File{
		{FileMessages, nil}, {FileEvents, nil}, {FileLatest, nil},
		{FileCwd, line(p.Cwd)}, {FileCreatedAt, now}, {FileUpdatedAt, now}, {FileMeta, line(string(meta))},
	})
	if err != nil {
		return n, fmt.Errorf("ctxfs: %s: %w", f.Dir(p.Session), err)
	}
	ctxFiles := p.Context
	if p.Handoff != nil {
		ctxFiles = append([]File{{FileHandoff, p.Handoff}}, ctxFiles...)
	}
	if len(ctxFiles) > 0 {
		cfd, err := openDirAt(fd, dirContext)
		if err != nil {
			return n, fmt.Errorf("ctxfs: %s: %w", f.ContextDir(p.UID, p.Agent, p.ID), err)
		}
		defer unix.Close(cfd)
		m, err := f.fillEmpty(cfd, p.Owner, ctxFiles)
		n += m
		if err != nil {
			return n, fmt.Errorf("ctxfs: %s: %w", f.ContextDir(p.UID, p.Agent, p.ID), err)
		}
	}
	return n, nil
}

// RepairChildDir restores the agent, session and status files (and the
// handoff) of an existing context/child/<child>/ folder where they are
// missing or empty.
func (f *FS) RepairChildDir(p ChildParams) (int, error) {
	if err := p.Parent.validate(); err != nil {
		return 0, err
	}
	if err := checkName("child name", p.Child); err != nil {
		return 0, err
	}
	if p.Status == "" {
		p.Status = ChildRunning
	}
	if !p.Status.Valid() {
		return 0, fmt.Errorf("ctxfs: child status %q", p.Status)
	}
	fd, err := f.openChild(p.Parent, p.Child)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	files := []File{
		{FileChildAgent, line(p.ChildID.String())},
		{FileChildSession, line(p.ChildSession)},
		{FileChildStatus, line(string(p.Status))},
	}
	if p.Handoff != nil {
		files = append(files, File{FileHandoff, p.Handoff})
	}
	n, err := f.fillEmpty(fd, p.Parent.Owner, files)
	if err != nil {
		return n, fmt.Errorf("ctxfs: %s: %w", f.ChildDir(p.Parent.UID, p.Parent.Agent, p.Parent.ID, p.Child), err)
	}
	return n, nil
}

// fillEmpty writes each file of files that is missing or empty in dirfd
// (a regular file, never through a link) and returns how many it wrote.
// A file meant to be empty is only created where missing.
func (f *FS) fillEmpty(dirfd int, o Owner, files []File) (int, error) {
	n := 0
	for _, file := range files {
		var st unix.Stat_t
		err := unix.Fstatat(dirfd, file.Name, &st, unix.AT_SYMLINK_NOFOLLOW)
		switch {
		case errors.Is(err, unix.ENOENT):
		case err != nil:
			return n, &fs.PathError{Op: "stat", Path: file.Name, Err: err}
		case st.Mode&unix.S_IFMT != unix.S_IFREG:
			return n, fmt.Errorf("%s: %w", file.Name, ErrNotRegular)
		case st.Size > 0 || len(file.Data) == 0:
			continue
		}
		if err := f.writeAt(dirfd, file.Name, file.Data, o, ModeAgentFile); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}
