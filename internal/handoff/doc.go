// Package handoff owns the file formats of seed 001's handoff protocol and
// the checks on them: what a parent hands a child (handoff.md, input refs,
// the policy and mount subsets, the output contract) and what the child
// hands back (result.md, refs.jsonl, artifact/), checked against the
// contract; and the context pack a parent's context should include about
// its children.
//
// It is pure: it parses bytes, and reads and hashes only the files and
// folders it is given. It never writes a file, never starts a process, never
// reads the clock, and must not import the daemon, the store or the HTTP API
// (internal/deptest's TestPackageMap enforces the imports). Where the files
// live, who may write them, writing them atomically and enforcing the policy
// and mount subsets are the daemon's business.
//
// # Files the child receives
//
//	handoff.md     the task, verbatim (non-empty UTF-8, at most 256 KiB)
//	refs.jsonl     input refs: {"path":"/abs/clean/path","hash":"sha256:<64 hex>"}, one a line;
//	               every path absolute, every hash computed by HashRef (regular files only:
//	               directories, devices and pipes are refused)
//	contract.json  the output contract, below
//	policy.json    the policy subset: a JSON object, recorded as given (optional)
//	mounts.json    the mount subset: a JSON object, recorded as given (optional)
//
// # contract.json
//
// One JSON object, read strictly: unknown keys (keys are case-sensitive),
// repeated keys, null, wrong types and out-of-range numbers are errors that
// name the field ("contract: sections[1].max_bytes is 0, outside 1..4194304").
// Every key is optional:
//
//	{
//	  "version": 1,
//	  "sections": [
//	    {"name": "Summary", "max_bytes": 4096},
//	    {"name": "Findings"},
//	    {"name": "Suggested patch", "aliases": ["concrete suggested changes"]},
//	    {"name": "Risk notes", "optional": true}
//	  ],
//	  "artifacts": [
//	    {"path": "artifact/patch.diff", "kind": "patch", "max_bytes": 1048576}
//	  ],
//	  "unlisted_artifacts": "allow",
//	  "limits": {"result_bytes": 65536, "artifact_bytes": 67108864, "artifacts": 256, "refs": 1000}
//	}
//
// A section is required unless optional, and must be present and non-empty;
// its name and aliases are compared ignoring case and runs of spaces, and
// must be spellable as a label line (a letter first, then letters, digits,
// spaces and - _ / ( ) & ' ,). An artifact path is relative to the result
// directory, starts with "artifact/", is clean and has no ".." (refused
// before anything else looks at it); there are no globs. "unlisted_artifacts"
// is "allow" or "reject" (only listed artifacts). Limits left out take their
// defaults (64 KiB, 64 MiB, 256, 1000) and can be raised to 4 MiB, 1 GiB,
// 10000 and 100000. A contract that is given replaces the default wholly.
// Without one, DefaultContract applies: a non-empty result.md with a
// non-empty "Summary" section, any artifacts, the default limits.
//
// # Files the child returns
//
//	result.md    Markdown with sections in either style, mixed freely:
//	               "# Summary" ... "###### Summary" headings, or seed 001's
//	               "Summary:" label lines (also "Summary: text", "**Summary:**").
//	               Titles match case-insensitively; code fences never start a
//	               section. See ParseSections.
//	refs.jsonl   {"path":..., "hash":"sha256:..."?, "kind":...?, "summary":...?}, one a line,
//	               strictly: unknown keys, wrong types and bad hashes are errors naming the line.
//	               A relative path names a file inside the result directory
//	               ("artifact/patch.diff"); an absolute one a file the child read.
//	artifact/    regular files only: no symlinks, devices or pipes.
//
// Check reads them, recomputes the sha256 of every ref it can read (a wrong
// claimed hash is a violation naming the ref) and returns a Report whose
// Status is completed or contract_violated, listing every violation with
// what was required and what was found. A result is never dropped: the
// daemon keeps and marks it.
//
// # The context pack
//
// ContextPack reads a parent's context/child/<child>/ folders and returns,
// deterministically, as Markdown (Pack.Text) or JSON (Pack.JSON), each
// child's status, task line, result.md, its refs one line each, and its
// needed artifacts (named in refs.jsonl or the contract, small text); never
// the child's messages.jsonl or anything else.
package handoff
