package ctxfs

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/kin-agents/kin/kin"
)

// Directory names under the ctx root.
const (
	dirAgent    = "agent"
	dirHome     = "home"
	dirSession  = "session"
	dirContext  = "context"
	dirChild    = "child"
	dirOutput   = "output"
	dirArtifact = "artifact"
)

// DefaultSession is the session id of an agent's first session (seed 001's
// "session/default").
const DefaultSession = "default"

// Files of a session (home/<uid>/agent/<name>/session/<sid>/).
const (
	FileMessages  = "messages.jsonl" // the agent's own conversation; written by the agent
	FileEvents    = "events.jsonl"   // this agent's events, one kin.Event JSON object a line; written by kin
	FileLatest    = "latest.md"      // the agent's latest summary of its work; written by the agent
	FileState     = "state"          // the agent's runtime state (kin.State); written by kin
	FileCwd       = "cwd"            // the working directory the agent started in
	FileCreatedAt = "created_at"     // RFC 3339, UTC
	FileUpdatedAt = "updated_at"     // RFC 3339, UTC: the last change of state or metadata
	FileMeta      = "meta.json"      // SessionMeta
	FileAgentKey  = "agent.key"      // the agent's AAuth private key (PKCS#8 PEM), when kin made one
	FileHandoff   = "handoff.md"     // in context/ of a child session and in the parent's child dir
)

// Files of a parent's context/child/<child>/ directory, and of a child's
// output/ directory (result.md, refs.jsonl, artifact/).
const (
	FileChildAgent   = "agent"      // the child's agent id
	FileChildSession = "session"    // the child's session id
	FileChildStatus  = "status"     // ChildStatus
	FileResult       = "result.md"  // the child's result, copied in by kin
	FileRefs         = "refs.jsonl" // the child's refs, copied in by kin
	DirArtifact      = dirArtifact  // the child's artifacts, copied in by kin
)

// Environment variables kin gives an agent process (Layout.Env).
const (
	EnvCtx      = "KIN_CTX"       // the ctx root
	EnvSession  = "KIN_SESSION"   // the agent's session directory
	EnvAgentKey = "KIN_AGENT_KEY" // its AAuth private key (FileAgentKey in the session)
	EnvHandoff  = "KIN_HANDOFF"   // child sessions: the handoff to read
	EnvOutput   = "KIN_OUTPUT"    // child sessions: where to write result.md, refs.jsonl and artifact/
)

// Owner is a uid and gid: the ones an agent runs as, which own its files.
type Owner struct {
	UID int
	GID int
}

func (o Owner) validate() error {
	const maxID = 1<<32 - 2 // (uid_t)-1 means "unchanged" to chown
	if o.UID < 0 || o.UID > maxID || o.GID < 0 || o.GID > maxID {
		return fmt.Errorf("ctxfs: uid %d / gid %d out of range", o.UID, o.GID)
	}
	return nil
}

// Session names one session of one agent. It lives under the uid the agent
// runs as: home/<UID>/agent/<Agent>/session/<ID>/, owned by Owner.
type Session struct {
	Owner
	Agent string // the agent's name
	ID    string // the session id, e.g. DefaultSession
}

func (s Session) validate() error {
	if err := s.Owner.validate(); err != nil {
		return err
	}
	if err := checkName("agent name", s.Agent); err != nil {
		return err
	}
	return checkName("session id", s.ID)
}

// Layout computes the paths of the tree. It does no I/O and does not check
// names: the FS methods that take names check them (kin.ParseName's
// grammar: no '/', never "..") before they build a path.
type Layout struct {
	Root string // the ctx root, clean and absolute (e.g. <home>/ctx or /ctx)
}

// NewLayout returns the layout under root.
func NewLayout(root string) Layout { return Layout{Root: filepath.Clean(root)} }

// AgentDir is <root>/agent.
func (l Layout) AgentDir() string { return filepath.Join(l.Root, dirAgent) }

// AgentFile is <root>/agent/<name>: the id of the agent holding the name.
func (l Layout) AgentFile(name string) string { return filepath.Join(l.Root, dirAgent, name) }

// SocketPath is <root>/agent/<name>.sock, the agent's socket. The daemon
// creates it; this package only names it.
func (l Layout) SocketPath(name string) string {
	return filepath.Join(l.Root, dirAgent, name+".sock")
}

// ControlDir is <root>/agent/<name>.d, the agent's control files.
func (l Layout) ControlDir(name string) string {
	return filepath.Join(l.Root, dirAgent, name+".d")
}

// ControlFile is one control file, e.g. ControlFile("coder", CtlStatus).
func (l Layout) ControlFile(name, file string) string {
	return filepath.Join(l.ControlDir(name), file)
}

// HomeDir is <root>/home/<uid>.
func (l Layout) HomeDir(uid int) string {
	return filepath.Join(l.Root, dirHome, strconv.Itoa(uid))
}

// AgentHome is <root>/home/<uid>/agent/<name>.
func (l Layout) AgentHome(uid int, name string) string {
	return filepath.Join(l.HomeDir(uid), dirAgent, name)
}

// SessionDir is <root>/home/<uid>/agent/<name>/session/<sid>.
func (l Layout) SessionDir(uid int, name, sid string) string {
	return filepath.Join(l.AgentHome(uid, name), dirSession, sid)
}

// Dir is s's session directory.
func (l Layout) Dir(s Session) string { return l.SessionDir(s.UID, s.Agent, s.ID) }

// ContextDir is a session's context/ directory.
func (l Layout) ContextDir(uid int, name, sid string) string {
	return filepath.Join(l.SessionDir(uid, name, sid), dirContext)
}

// OutputDir is a child session's output/ directory: where the child writes
// result.md, refs.jsonl and artifact/, and where CopyResult copies from.
func (l Layout) OutputDir(uid int, name, sid string) string {
	return filepath.Join(l.SessionDir(uid, name, sid), dirOutput)
}

// ChildDir is context/child/<child> in the parent's session: the child's
// coordination state and results, owned by the parent.
func (l Layout) ChildDir(parentUID int, parentName, sid, childName string) string {
	return filepath.Join(l.ContextDir(parentUID, parentName, sid), dirChild, childName)
}

// Env is what an agent process running session s gets in its environment:
// KIN_CTX and KIN_SESSION, and for a child session (child true) KIN_HANDOFF
// and KIN_OUTPUT. Its working directory is the session's cwd file.
func (l Layout) Env(s Session, child bool) []string {
	dir := l.Dir(s)
	env := []string{EnvCtx + "=" + l.Root, EnvSession + "=" + dir}
	if child {
		env = append(env,
			EnvHandoff+"="+filepath.Join(dir, dirContext, FileHandoff),
			EnvOutput+"="+filepath.Join(dir, dirOutput))
	}
	return env
}

// checkName applies kin's name grammar to an agent name, child name,
// session id or run id: 1..64 letters, digits and - _ . : @, starting and
// ending with a letter or digit, so never "", ".", "..", or a '/'.
func checkName(what, s string) error {
	if _, err := kin.ParseName(s); err != nil {
		return fmt.Errorf("ctxfs: %s: %w", what, err)
	}
	return nil
}

// checkLine rejects what cannot be one line of text in a control file:
// invalid UTF-8 and control characters (newlines included).
func checkLine(what, s string) error {
	if !utf8.ValidString(s) {
		return fmt.Errorf("ctxfs: %s is not valid UTF-8", what)
	}
	for i, r := range s {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("ctxfs: %s has a control character at byte %d", what, i)
		}
	}
	return nil
}

// ParentRef identifies the agent, session and run that created an agent
// (seed 001's parent file). Session and Run are empty when unknown; all of
// it is empty for a root.
type ParentRef struct {
	Agent   string
	Session string
	Run     string
}

// String is the parent file's line, e.g. "agent:coder session:default
// run:r123", leaving out unknown parts; "" for a root.
func (p ParentRef) String() string {
	if p.Agent == "" {
		return ""
	}
	s := "agent:" + p.Agent
	if p.Session != "" {
		s += " session:" + p.Session
	}
	if p.Run != "" {
		s += " run:" + p.Run
	}
	return s
}

// IsZero reports whether p is a root's (no parent).
func (p ParentRef) IsZero() bool { return p == ParentRef{} }

func (p ParentRef) validate() error {
	if p.Agent == "" {
		if !p.IsZero() {
			return fmt.Errorf("ctxfs: parent has a session or run but no agent")
		}
		return nil
	}
	if err := checkName("parent agent", p.Agent); err != nil {
		return err
	}
	if p.Session != "" {
		if err := checkName("parent session", p.Session); err != nil {
			return err
		}
	}
	if p.Run != "" {
		if err := checkName("parent run", p.Run); err != nil {
			return err
		}
	}
	return nil
}

// ParseParentRef parses a parent line (String's form; "" is a root).
func ParseParentRef(s string) (ParentRef, error) {
	var p ParentRef
	if s == "" {
		return p, nil
	}
	for _, field := range strings.Fields(s) {
		key, val, ok := strings.Cut(field, ":")
		var dst *string
		switch key {
		case "agent":
			dst = &p.Agent
		case "session":
			dst = &p.Session
		case "run":
			dst = &p.Run
		}
		if !ok || dst == nil || *dst != "" || val == "" {
			return ParentRef{}, fmt.Errorf("ctxfs: parent %q: %q is not agent:, session: or run: once each", s, field)
		}
		*dst = val
	}
	if err := p.validate(); err != nil {
		return ParentRef{}, err
	}
	if p.Agent == "" {
		return ParentRef{}, fmt.Errorf("ctxfs: parent %q has no \"agent:\" field", s)
	}
	return p, nil
}
