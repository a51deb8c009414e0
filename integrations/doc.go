// Package integrations holds only tests: they run what integrations/ ships
// (Claude Code's and Codex's snippets, the kin-run wrapper) exactly as
// written, against a real kin serve. It has no code of its own, and nothing
// may import it.
package integrations
