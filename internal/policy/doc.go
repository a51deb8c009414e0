// Package policy owns kin's permission rules: parsing and validating
// policies (kin.Policy), evaluating an effective policy's layers (tools,
// paths, env), flattening them into what the sandbox enforces (Landlock
// trees, groups, limits), checking that a child asks for no more than its
// parent holds (Exceeds, seed 001's attenuation), seed 003's stage presets
// and the operator's global deny list, and seed 003's consented
// cross-workspace reads (CanRead).
//
// It is pure: it parses bytes it is given and computes. It must never do
// I/O, read the clock (callers pass now), start goroutines, or import the
// daemon, the store or the HTTP API (internal/deptest's TestPackageMap
// enforces the imports). Where policies are stored, filling in Remaining
// from recorded spend, and applying Landlock are the daemon's and the
// supervisor's business.
//
// # Layers and nil
//
// An effective policy is the AND of layers, from the global deny list down
// to the agent itself (Layers builds them). In a layer, a nil field
// restricts nothing; an empty list or map is present and restricts to
// nothing (tools.allow [] allows no tool, mounts {} hides every path).
// Tool and env rules are never merged into one list: every decision asks
// every layer, and names the first layer that refuses.
//
// # The operator
//
// Exceeds with no parent layers is a root agent spawned by the operator,
// who holds everything: only the budget is checked, against Remaining.
// Any parent layer, even an empty one, makes the parent an agent, and an
// agent holds only what its layers give: no supplementary groups unless a
// layer lists them, no uid, gid or detach unless they are set.
//
// # Patterns
//
// Tool and env patterns use '*' (any run of bytes) and '?' (one byte);
// every other byte is itself, and Validate allows only letters, digits and
// "_-.:" besides. With so small a language, "is every name the child asks
// for allowed by the parent" is decided exactly, by subset construction
// over the patterns' NFAs (Subset, Intersect), and an answer "no" comes with
// a witness name. Patterns that would make the construction blow up give
// ErrTooComplex, which Exceeds reports as an excess: it refuses rather than
// guesses. Visibility scopes are doublestar patterns over relative paths.
package policy
