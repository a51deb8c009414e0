package ctxfs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/kin-agents/kin/kin"
)

// The control files of agent/<name>.d/, in seed 001's order. Every file is
// UTF-8 text: a single value is one line ending in '\n', a list is one item
// a line, and an unknown or empty value is an empty file.
const (
	CtlParent = "parent"    // "agent:<name> session:<sid> run:<run>" (ParentRef); empty for a root
	CtlLife   = "life"      // owned | detached (kin.Life)
	CtlOwner  = "owner"     // the accountable human or organisation (kin.Agent.Responsible)
	CtlUID    = "uid"       // the uid the agent runs as, decimal
	CtlGID    = "gid"       // its primary gid, decimal
	CtlGroups = "groups"    // supplementary gids, one a line
	CtlLabel  = "label"     // its role (kin.Agent.Role)
	CtlIso    = "iso"       // the containment it runs under, e.g. cgroup2 or process-groups
	CtlRoot   = "root"      // the filesystem root it sees ("/" until mount namespaces)
	CtlCwd    = "cwd"       // its working directory
	CtlEnv    = "env"       // the names (never the values) of its environment variables, sorted, one a line
	CtlPath   = "path"      // its PATH, one directory a line
	CtlMount  = "mount"     // its visible mounts, one a line as the policy states them, e.g. "/work/docs ro"
	CtlModel  = "model"     // the model it runs, if any
	CtlPolicy = "policy"    // its effective policy, one line of compact JSON
	CtlStatus = "status"    // its governance status: active | suspended | revoked | terminated (kin.Status)
	CtlPID    = "pid"       // its process id, decimal; empty when no process runs
	CtlLog    = "log"       // the file its stdout and stderr go to
	CtlMeta   = "meta.json" // the whole kin.Agent as JSON (what `kin show --json` prints), one line
)

// ControlFiles lists the control files in seed 001's order.
var ControlFiles = []string{CtlParent, CtlLife, CtlOwner, CtlUID, CtlGID, CtlGroups, CtlLabel, CtlIso, CtlRoot,
	CtlCwd, CtlEnv, CtlPath, CtlMount, CtlModel, CtlPolicy, CtlStatus, CtlPID, CtlLog, CtlMeta}

// ControlValues is what agent/<name>.d/ holds, one field per file.
type ControlValues struct {
	Parent ParentRef
	Life   kin.Life
	Owner  string
	UID    int
	GID    int
	Groups []int
	Label  string
	Iso    string
	Root   string
	Cwd    string
	Env    []string // names only
	Path   []string
	Mount  []string
	Model  string
	Policy json.RawMessage
	Status kin.Status
	PID    int // 0: no process
	Log    string
	Meta   kin.Agent
}

// Runtime is what the control files hold beyond kin.Agent: how and where
// the agent runs, and who created it. The daemon fills it from the spawn
// request, the policy and its own configuration.
type Runtime struct {
	UID, GID int
	Groups   []int
	Iso      string
	Root     string // "" means "/"
	Cwd      string
	Env      []string // KEY or KEY=VALUE: values are dropped, names sorted and deduplicated
	Path     []string
	Mount    []string
	Model    string
	Policy   json.RawMessage // compacted; nil or empty: unknown
	Log      string
	Parent   ParentRef // the creating agent's name, session id and run id
}

// ControlFor derives the control values of a from a and rt:
// life, owner (Responsible), label (Role), status, pid (while Running) and
// meta.json come from a; everything else from rt.
func ControlFor(a *kin.Agent, rt Runtime) (ControlValues, error) {
	v := ControlValues{
		Parent: rt.Parent,
		Life:   a.Life,
		Owner:  a.Responsible,
		UID:    rt.UID,
		GID:    rt.GID,
		Groups: slices.Clone(rt.Groups),
		Label:  a.Role,
		Iso:    rt.Iso,
		Root:   rt.Root,
		Cwd:    rt.Cwd,
		Path:   slices.Clone(rt.Path),
		Mount:  slices.Clone(rt.Mount),
		Model:  rt.Model,
		Status: a.Status,
		Log:    rt.Log,
		Meta:   *a,
	}
	if v.Life == "" {
		v.Life = kin.LifeOwned
	}
	if v.Root == "" {
		v.Root = "/"
	}
	if a.Running() {
		v.PID = a.PID
	}
	for _, kv := range rt.Env {
		k, _, _ := strings.Cut(kv, "=")
		v.Env = append(v.Env, k)
	}
	slices.Sort(v.Env)
	v.Env = slices.Compact(v.Env)
	if len(bytes.TrimSpace(rt.Policy)) > 0 {
		var buf bytes.Buffer
		if err := json.Compact(&buf, rt.Policy); err != nil {
			return ControlValues{}, fmt.Errorf("ctxfs: policy: %w", err)
		}
		v.Policy = buf.Bytes()
	}
	return v, v.validate()
}

func (v *ControlValues) validate() error {
	if err := v.Parent.validate(); err != nil {
		return err
	}
	if !v.Life.Valid() {
		return fmt.Errorf("ctxfs: life %q is not owned or detached", v.Life)
	}
	if v.Status != "" && !v.Status.Valid() {
		return fmt.Errorf("ctxfs: status %q is not a kin status", v.Status)
	}
	if err := (Owner{v.UID, v.GID}).validate(); err != nil {
		return err
	}
	for _, g := range v.Groups {
		if err := (Owner{0, g}).validate(); err != nil {
			return err
		}
	}
	if v.PID < 0 {
		return fmt.Errorf("ctxfs: pid %d", v.PID)
	}
	if v.Meta.ID <= 0 {
		return fmt.Errorf("ctxfs: meta has no agent id")
	}
	for _, f := range []struct{ name, val string }{
		{CtlOwner, v.Owner}, {CtlLabel, v.Label}, {CtlIso, v.Iso}, {CtlRoot, v.Root}, {CtlCwd, v.Cwd},
		{CtlModel, v.Model}, {CtlLog, v.Log},
	} {
		if err := checkLine(f.name, f.val); err != nil {
			return err
		}
	}
	for _, l := range []struct {
		name  string
		items []string
	}{{CtlEnv, v.Env}, {CtlPath, v.Path}, {CtlMount, v.Mount}} {
		for i, it := range l.items {
			if it == "" {
				return fmt.Errorf("ctxfs: %s item %d is empty", l.name, i)
			}
			if err := checkLine(l.name, it); err != nil {
				return err
			}
			if l.name == CtlEnv && strings.Contains(it, "=") {
				return fmt.Errorf("ctxfs: env holds names, never values: %q", it)
			}
		}
	}
	if len(v.Policy) > 0 && (!json.Valid(v.Policy) || bytes.ContainsAny(v.Policy, "\n\r")) {
		return fmt.Errorf("ctxfs: policy is not one line of JSON")
	}
	return nil
}

// File is one file's name and content.
type File struct {
	Name string
	Data []byte
}

// Files renders v as the control files, in ControlFiles order.
func (v *ControlValues) Files() ([]File, error) {
	if err := v.validate(); err != nil {
		return nil, err
	}
	files := make([]File, len(ControlFiles))
	for i, name := range ControlFiles {
		b, err := v.render(name)
		if err != nil {
			return nil, err
		}
		files[i] = File{name, b}
	}
	return files, nil
}

// File renders one control file of v, as Files does (it validates v
// whole, and renders only that file: meta.json's encoding, most of the
// cost, only for meta.json).
func (v *ControlValues) File(name string) ([]byte, error) {
	if err := v.validate(); err != nil {
		return nil, err
	}
	return v.render(name)
}

// render is one control file of a validated v.
func (v *ControlValues) render(name string) ([]byte, error) {
	switch name {
	case CtlParent:
		return line(v.Parent.String()), nil
	case CtlLife:
		return line(string(v.Life)), nil
	case CtlOwner:
		return line(v.Owner), nil
	case CtlUID:
		return line(strconv.Itoa(v.UID)), nil
	case CtlGID:
		return line(strconv.Itoa(v.GID)), nil
	case CtlGroups:
		groups := make([]string, len(v.Groups))
		for i, g := range v.Groups {
			groups[i] = strconv.Itoa(g)
		}
		return lines(groups), nil
	case CtlLabel:
		return line(v.Label), nil
	case CtlIso:
		return line(v.Iso), nil
	case CtlRoot:
		return line(v.Root), nil
	case CtlCwd:
		return line(v.Cwd), nil
	case CtlEnv:
		return lines(v.Env), nil
	case CtlPath:
		return lines(v.Path), nil
	case CtlMount:
		return lines(v.Mount), nil
	case CtlModel:
		return line(v.Model), nil
	case CtlPolicy:
		return line(string(v.Policy)), nil
	case CtlStatus:
		return line(string(v.Status)), nil
	case CtlPID:
		if v.PID > 0 {
			return line(strconv.Itoa(v.PID)), nil
		}
		return nil, nil
	case CtlLog:
		return line(v.Log), nil
	case CtlMeta:
		meta, err := json.Marshal(&v.Meta)
		if err != nil {
			return nil, fmt.Errorf("ctxfs: meta.json: %w", err)
		}
		return line(string(meta)), nil
	}
	return nil, fmt.Errorf("ctxfs: %q is not a control file", name)
}

func line(s string) []byte {
	if s == "" {
		return nil
	}
	return []byte(s + "\n")
}

func lines(items []string) []byte {
	var b []byte
	for _, it := range items {
		b = append(b, it...)
		b = append(b, '\n')
	}
	return b
}

// ParseControl is the inverse of Files: it reads control values from the
// files' contents, keyed by name.
func ParseControl(files map[string][]byte) (ControlValues, error) {
	var v ControlValues
	text := func(name string) string { return strings.TrimSuffix(string(files[name]), "\n") }
	list := func(name string) []string {
		s := text(name)
		if s == "" {
			return nil
		}
		return strings.Split(s, "\n")
	}
	num := func(name string, dst *int) error {
		s := text(name)
		if s == "" {
			return nil
		}
		n, err := strconv.Atoi(s)
		if err != nil {
			return fmt.Errorf("ctxfs: %s: %q is not a number", name, s)
		}
		*dst = n
		return nil
	}
	for _, name := range ControlFiles {
		if _, ok := files[name]; !ok {
			return v, fmt.Errorf("ctxfs: control file %s is missing", name)
		}
	}
	var err error
	if v.Parent, err = ParseParentRef(text(CtlParent)); err != nil {
		return v, err
	}
	v.Life = kin.Life(text(CtlLife))
	v.Owner = text(CtlOwner)
	for _, n := range []struct {
		name string
		dst  *int
	}{{CtlUID, &v.UID}, {CtlGID, &v.GID}, {CtlPID, &v.PID}} {
		if err := num(n.name, n.dst); err != nil {
			return v, err
		}
	}
	for _, g := range list(CtlGroups) {
		n, err := strconv.Atoi(g)
		if err != nil {
			return v, fmt.Errorf("ctxfs: groups: %q is not a number", g)
		}
		v.Groups = append(v.Groups, n)
	}
	v.Label = text(CtlLabel)
	v.Iso = text(CtlIso)
	v.Root = text(CtlRoot)
	v.Cwd = text(CtlCwd)
	v.Env = list(CtlEnv)
	v.Path = list(CtlPath)
	v.Mount = list(CtlMount)
	v.Model = text(CtlModel)
	if p := text(CtlPolicy); p != "" {
		v.Policy = json.RawMessage(p)
	}
	v.Status = kin.Status(text(CtlStatus))
	v.Log = text(CtlLog)
	if err := json.Unmarshal(files[CtlMeta], &v.Meta); err != nil {
		return v, fmt.Errorf("ctxfs: meta.json: %w", err)
	}
	return v, v.validate()
}

// WriteControl makes agent/<name>.d/ hold v and agent/<name> hold v's agent
// id. The directory is the daemon's with group v.GID (0750, files 0640): the
// agent reads its control files but cannot change them, and other agents'
// uids cannot read them.
//
// A new directory is built under a temporary name and renamed into place,
// so it appears complete. An existing one (the same agent, or an earlier
// agent of that name: names are unique only among live agents) is updated
// file by file, each atomically, skipping files that already hold their
// value; agent/<name> is written last, so once it names an agent, the
// directory describes that agent. meta.json alone is a consistent snapshot.
func (f *FS) WriteControl(name string, v ControlValues) error {
	if err := checkName("agent name", name); err != nil {
		return err
	}
	if v.Meta.Name != "" && v.Meta.Name != name {
		return fmt.Errorf("ctxfs: control values of %q written as %q", v.Meta.Name, name)
	}
	files, err := v.Files()
	if err != nil {
		return err
	}
	agentfd, err := walk(f.rootFD, []string{dirAgent})
	if err != nil {
		return fmt.Errorf("ctxfs: %s: %w", f.AgentDir(), err)
	}
	defer unix.Close(agentfd)
	o := Owner{UID: -1, GID: v.GID}
	ctl := name + ".d"
	fd, err := openDirAt(agentfd, ctl)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		err = f.createControl(agentfd, ctl, files, o)
	case err == nil:
		err = f.updateControl(fd, files, o)
		unix.Close(fd)
	}
	if err != nil {
		return fmt.Errorf("ctxfs: %s: %w", f.ControlDir(name), err)
	}
	id := line(v.Meta.ID.String())
	if !f.sameAt(agentfd, name, id, kinOwner, ModeIDFile) {
		if err := f.writeAt(agentfd, name, id, kinOwner, ModeIDFile); err != nil {
			return fmt.Errorf("ctxfs: %s: %w", f.AgentFile(name), err)
		}
		return f.syncDir(agentfd)
	}
	return nil
}

func (f *FS) createControl(agentfd int, ctl string, files []File, o Owner) error {
	stage := f.transient(ctl, stageTag)
	fd, _, err := f.mkdirAt(agentfd, stage, o, ModeControlDir)
	if err != nil {
		return err
	}
	for _, file := range files {
		if err = f.createAt(fd, file.Name, file.Data, o, ModeControl); err != nil {
			break
		}
	}
	if err == nil {
		err = f.syncDir(fd)
	}
	unix.Close(fd)
	if err == nil {
		err = unix.Renameat2(agentfd, stage, agentfd, ctl, unix.RENAME_NOREPLACE)
	}
	if err != nil {
		removeAllAt(agentfd, stage, 0)
		return err
	}
	return f.syncDir(agentfd)
}

func (f *FS) updateControl(fd int, files []File, o Owner) error {
	if err := f.fixOwner(fd, o, ModeControlDir); err != nil {
		return err
	}
	changed := false
	for _, file := range files {
		if f.sameAt(fd, file.Name, file.Data, o, ModeControl) {
			continue
		}
		if err := f.writeAt(fd, file.Name, file.Data, o, ModeControl); err != nil {
			return err
		}
		changed = true
	}
	if changed {
		return f.syncDir(fd)
	}
	return nil
}

// ReadControl reads agent/<name>.d/ back.
func (f *FS) ReadControl(name string) (ControlValues, error) {
	if err := checkName("agent name", name); err != nil {
		return ControlValues{}, err
	}
	fd, err := walk(f.rootFD, []string{dirAgent, name + ".d"})
	if err != nil {
		return ControlValues{}, fmt.Errorf("ctxfs: %s: %w", f.ControlDir(name), err)
	}
	defer unix.Close(fd)
	files := make(map[string][]byte, len(ControlFiles))
	for _, n := range ControlFiles {
		b, err := readAt(fd, n, 1<<20)
		if err != nil {
			return ControlValues{}, fmt.Errorf("ctxfs: %s: %w", f.ControlFile(name, n), err)
		}
		files[n] = b
	}
	return ParseControl(files)
}

// RemoveControl removes agent/<name> and agent/<name>.d/ (not the socket,
// which is the daemon's, and never a session: history stays readable).
//
// kin keeps an ended agent's control files, which then say how it ended,
// until the name is taken again, when WriteControl rewrites them for the
// new agent. RemoveControl is for an explicit purge. The directory is
// renamed away before it is emptied, so a reader sees it whole or not at
// all.
func (f *FS) RemoveControl(name string) error {
	if err := checkName("agent name", name); err != nil {
		return err
	}
	agentfd, err := walk(f.rootFD, []string{dirAgent})
	if err != nil {
		return fmt.Errorf("ctxfs: %s: %w", f.AgentDir(), err)
	}
	defer unix.Close(agentfd)
	if err := unix.Unlinkat(agentfd, name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("ctxfs: %s: %w", f.AgentFile(name), err)
	}
	gone := f.transient(name+".d", rmTag)
	err = unix.Renameat2(agentfd, name+".d", agentfd, gone, unix.RENAME_NOREPLACE)
	if err == nil {
		err = removeAllAt(agentfd, gone, 0)
	} else if errors.Is(err, unix.ENOENT) {
		err = nil
	}
	if err != nil {
		return fmt.Errorf("ctxfs: %s: %w", f.ControlDir(name), err)
	}
	return f.syncDir(agentfd)
}
