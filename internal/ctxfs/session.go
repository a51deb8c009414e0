package ctxfs

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kin-agents/kin/kin"
)

// SessionMeta is a session's meta.json.
type SessionMeta struct {
	Agent     string      `json:"agent"`
	AgentID   kin.AgentID `json:"agent_id"`
	Session   string      `json:"session"`
	Run       string      `json:"run,omitempty"`
	Parent    string      `json:"parent,omitempty"` // ParentRef.String()
	UID       int         `json:"uid"`
	GID       int         `json:"gid"`
	CreatedAt time.Time   `json:"created_at"`
}

// SessionParams describes a new session.
type SessionParams struct {
	Session
	AgentID kin.AgentID
	Run     string    // the run id, if known
	Parent  ParentRef // zero for a root; a child session also gets output/
	// Output makes output/ also in a session without a parent (a root
	// agent handed a task by the operator).
	Output bool
	Cwd    string
	State  kin.State // "" is registered
	// Handoff, when not nil, becomes context/handoff.md: what the parent
	// hands the child (seed 001's handoff.md).
	Handoff []byte
	// Context holds further files for context/, e.g. the input refs or
	// the output contract of a handoff. Names are single path components.
	Context []File
	// Key, when not nil, becomes FileAgentKey: the agent's private key
	// (0600 like every session file, so only the agent's uid reads it).
	Key []byte
	Now time.Time
}

// CreateSession makes the session directory
// home/<uid>/agent/<name>/session/<sid>/ for p.Owner, every directory 0700
// and every file 0600, so no other uid can read it:
//
//	messages.jsonl  events.jsonl  latest.md   (empty)
//	state  cwd  created_at  updated_at  meta.json
//	context/        (handoff.md and p.Context for a child)
//	output/artifact/ (child sessions: where the child writes its result)
//
// The session is built under a temporary name and renamed into place, so it
// appears complete or not at all. A session that exists is never replaced
// (history stays readable): the error then wraps fs.ErrExist, and an agent
// reusing a name needs a new session id.
func (f *FS) CreateSession(p SessionParams) error {
	if err := p.validate(); err != nil {
		return err
	}
	if p.State == "" {
		p.State = kin.StateRegistered
	}
	meta, err := json.Marshal(SessionMeta{
		Agent: p.Agent, AgentID: p.AgentID, Session: p.ID, Run: p.Run, Parent: p.Parent.String(),
		UID: p.UID, GID: p.GID, CreatedAt: p.Now.UTC(),
	})
	if err != nil {
		return err
	}
	now := stamp(p.Now)
	dir := f.Dir(p.Session)
	sessions, err := f.sessionsDir(p.Owner, p.Agent)
	if err != nil {
		return fmt.Errorf("ctxfs: %s: %w", dir, err)
	}
	defer unix.Close(sessions)

	if exists(sessions, p.ID) { // (the rename below decides; this spares building a stage for nothing)
		return fmt.Errorf("ctxfs: %s: session exists: %w", dir, fs.ErrExist)
	}
	stage := f.transient(p.ID, stageTag)
	o := p.Owner
	build := func() error {
		fd, _, err := f.mkdirAt(sessions, stage, o, ModeAgentDir)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		for _, file := range []File{
			{FileMessages, nil},
			{FileEvents, nil},
			{FileLatest, nil},
			{FileState, line(string(p.State))},
			{FileCwd, line(p.Cwd)},
			{FileCreatedAt, now},
			{FileUpdatedAt, now},
			{FileMeta, line(string(meta))},
		} {
			if err := f.createAt(fd, file.Name, file.Data, o, ModeAgentFile); err != nil {
				return err
			}
		}
		if p.Key != nil {
			if err := f.createAt(fd, FileAgentKey, p.Key, o, ModeAgentFile); err != nil {
				return err
			}
		}
		ctx := p.Context
		if p.Handoff != nil {
			ctx = append([]File{{FileHandoff, p.Handoff}}, ctx...)
		}
		if err := f.mkdirWith(fd, dirContext, o, ctx); err != nil {
			return err
		}
		if p.Output || !p.Parent.IsZero() {
			out, _, err := f.mkdirAt(fd, dirOutput, o, ModeAgentDir)
			if err != nil {
				return err
			}
			err = f.mkdirWith(out, dirArtifact, o, nil)
			if err == nil {
				err = f.syncDir(out)
			}
			unix.Close(out)
			if err != nil {
				return err
			}
		}
		return f.syncDir(fd)
	}
	err = build()
	if err == nil {
		err = unix.Renameat2(sessions, stage, sessions, p.ID, unix.RENAME_NOREPLACE)
	}
	if err != nil {
		removeAllAt(sessions, stage, 0)
		if errors.Is(err, unix.EEXIST) || errors.Is(err, unix.ENOTEMPTY) {
			err = fmt.Errorf("session exists: %w", fs.ErrExist)
		}
		return fmt.Errorf("ctxfs: %s: %w", dir, err)
	}
	if err := f.syncDir(sessions); err != nil {
		return fmt.Errorf("ctxfs: %s: %w", dir, err)
	}
	f.dropSpares(sessionSpare(p.Session, FileState), sessionSpare(p.Session, FileUpdatedAt))
	return nil
}

func (p *SessionParams) validate() error {
	if err := p.Session.validate(); err != nil {
		return err
	}
	if p.AgentID <= 0 {
		return fmt.Errorf("ctxfs: session of %q has no agent id", p.Agent)
	}
	if p.Run != "" {
		if err := checkName("run id", p.Run); err != nil {
			return err
		}
	}
	if err := p.Parent.validate(); err != nil {
		return err
	}
	if p.State != "" && !p.State.Valid() {
		return fmt.Errorf("ctxfs: state %q is not one of %s", p.State, kin.StateList())
	}
	if err := checkLine("cwd", p.Cwd); err != nil {
		return err
	}
	seen := map[string]bool{}
	if p.Handoff != nil {
		seen[FileHandoff] = true
	}
	for _, c := range p.Context {
		if err := checkFileName(c.Name); err != nil {
			return err
		}
		if seen[c.Name] {
			return fmt.Errorf("ctxfs: context file %q given twice", c.Name)
		}
		seen[c.Name] = true
	}
	return nil
}

// checkFileName accepts one path component that is not "." or "..".
func checkFileName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") || isTransient(name) {
		return fmt.Errorf("ctxfs: %q is not a file name: %w", name, ErrOutside)
	}
	return checkLine("file name", name)
}

// mkdirWith makes the directory name in dirfd holding files, for o.
func (f *FS) mkdirWith(dirfd int, name string, o Owner, files []File) error {
	fd, _, err := f.mkdirAt(dirfd, name, o, ModeAgentDir)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	for _, file := range files {
		if err := f.createAt(fd, file.Name, file.Data, o, ModeAgentFile); err != nil {
			return err
		}
	}
	return f.syncDir(fd)
}

// sessionsDir opens (making what is missing) home/<uid>/agent/<name>/session
// for o.
func (f *FS) sessionsDir(o Owner, name string) (int, error) {
	home, err := walk(f.rootFD, []string{dirHome})
	if err != nil {
		return -1, err
	}
	defer unix.Close(home)
	fd, err := f.mkdirsAt(home, []string{strconv.Itoa(o.UID), dirAgent, name}, o, ModeAgentHome)
	if err != nil {
		return -1, err
	}
	defer unix.Close(fd)
	return f.mkdirsAt(fd, []string{dirSession}, o, ModeAgentDir)
}

// openSession opens s's session directory.
func (f *FS) openSession(s Session) (int, error) {
	if err := s.validate(); err != nil {
		return -1, err
	}
	fd, err := walk(f.rootFD, []string{dirHome, strconv.Itoa(s.UID), dirAgent, s.Agent, dirSession, s.ID})
	if err != nil {
		return -1, fmt.Errorf("ctxfs: %s: %w", f.Dir(s), err)
	}
	return fd, nil
}

func stamp(t time.Time) []byte { return line(t.UTC().Format(time.RFC3339Nano)) }

// SetSessionState writes the session's state (registered, active, ...,
// cancelled when its parent's death cancelled it) and updated_at. Messages
// and events stay as they are: cancellation ends the runtime, not the
// history (seed 001).
func (f *FS) SetSessionState(s Session, st kin.State, now time.Time) error {
	if !st.Valid() {
		return fmt.Errorf("ctxfs: state %q is not one of %s", st, kin.StateList())
	}
	fd, err := f.openSession(s)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	for _, file := range []File{{FileState, line(string(st))}, {FileUpdatedAt, stamp(now)}} {
		if err := f.rewriteAt(fd, file.Name, sessionSpare(s, file.Name), file.Data, s.Owner, ModeAgentFile); err != nil {
			return fmt.Errorf("ctxfs: %s: %w", f.Dir(s), err)
		}
	}
	return f.syncDir(fd)
}

// SessionState reads the session's state.
func (f *FS) SessionState(s Session) (kin.State, error) {
	fd, err := f.openSession(s)
	if err != nil {
		return "", err
	}
	defer unix.Close(fd)
	b, err := readAt(fd, FileState, 1024)
	if err != nil {
		return "", fmt.Errorf("ctxfs: %s: %w", f.Dir(s), err)
	}
	return kin.State(strings.TrimSuffix(string(b), "\n")), nil
}

// AppendEvent appends one event, a JSON object (e.g. a marshalled
// kin.Event), to the session's events.jsonl as one compact line, with a
// single write(2) and an fsync: a reader sees whole lines only, and after a
// crash the file is whole lines (a line cut short by a crash, possible only
// for lines longer than a page or on power loss, is removed by the next
// append). The file must be owned by the session's uid and have one link.
func (f *FS) AppendEvent(s Session, event []byte) error {
	return f.AppendEvents(s, [][]byte{event})
}
