// Package template owns seed 003's workspace templates ("kin spawn
// --from-template DIR"): reading a template directory into the wire form
// kin.Template (Load, run by the CLI with the caller's own rights), checking
// a kin.Template received over the wire (Check, run by the daemon before it
// registers the agent), replacing its placeholders (Placeholders, Render)
// and writing the result into the new agent's workspace, owned by the
// agent (Write, run by the daemon as root).
//
// It must never follow a symbolic link out of the template or out of the
// workspace, read or write anything but regular files and directories,
// overwrite an existing file, expand a placeholder's value again, or let a
// value change a path's shape (introduce a '/', a "." or a ".."
// component). It decides nothing about policy: the config fragment's
// policy is parsed (unknown keys are an error) and handed to the caller,
// and whether the parent may grant it is the daemon's question. It does not
// create the workspace directory itself, nor talk to the daemon or the
// store.
//
// # Templates
//
// A template is a directory. Its regular files and directories, except
// the config fragment at its top (ConfigFile, or .kin.yaml / .kin.yml;
// more than one is an error), become the new workspace, with their
// permission bits (0o777; setuid, setgid and sticky are dropped; a mode of
// 0 on the wire means 0644 for a file, 0755 for a directory). Every
// symbolic link is refused, even one to a file inside the template: the
// rule is simple to state and to check, and a template author can copy
// the file. Devices, FIFOs and sockets are refused. Contents must be UTF-8
// text (the wire form is a JSON string, which would silently mangle
// anything else). Limits: MaxFiles entries, MaxFileSize per file,
// MaxTotalSize in all, MaxPathLen per path and MaxNameLen per component.
//
// On the wire, paths are slash-separated, relative and clean, never ".",
// "..", empty, or holding a control character; every directory a path
// lies under is listed, as a directory, before it; no path is listed
// twice.
//
// # Placeholders
//
// A placeholder is '{', an upper-case name ([A-Z][A-Z0-9_]*), '}':
// {AGENT_NAME}. Any other use of braces ({"a": 1}, {lower}, {}) is text.
// The built-in names are AGENT_NAME, PARENT (the parent's name, empty for a
// root agent), PARENT_A (seed 003's first creator: the parent in kin),
// RESPONSIBLE and ROLE; kin.Template.Vars (from --set K=V) adds more, and
// may not redefine a built-in. A template that uses a name that is neither
// is refused, naming the file and the name. Values are substituted as
// they are: a value holding "{ROLE}" stays "{ROLE}". Placeholders may
// appear in paths, where a value must not hold a '/' nor be "." or "..",
// and the rendered path must still be a valid, unique path; rendered files
// are held to the same size limits as the template.
//
// # Writing
//
// Write writes into an existing directory through an os.Root, so no path
// resolves outside it, even through a symbolic link planted inside it
// meanwhile. A directory that already exists there is kept as it is (its
// mode and owner untouched) if it is a real directory; any other existing
// entry (a file, a symbolic link) at a template path is an error naming it
// and is never replaced. Each file is written to a temporary name in its
// directory (".kin-tmp-<random>"), given its mode and owner, fsynced, then
// hard-linked to its name (which fails if the name exists: no replacement,
// even in a race) and the temporary removed, so a file appears whole or
// not at all. Directories are not fsynced: after a crash the spawn is
// unfinished and its workspace (with, possibly, a temporary) is garbage.
// On any error Write removes every file and directory it created, so the
// workspace is as before.
package template
