// Package modelsdktest runs the official model SDKs, the npm packages
// openai and @anthropic-ai/sdk at the versions testdata/node pins, as an
// agent would: a Node script (testdata/node/call.mjs) configured only by
// its environment (OPENAI_BASE_URL, OPENAI_API_KEY, ANTHROPIC_BASE_URL,
// ANTHROPIC_API_KEY) makes one call and prints what the SDK returned.
//
// The packages are installed with "npm ci" from the committed lock file
// into a cache outside the repository ($KIN_NODE_CACHE; as root
// /var/cache/kin-test, so agents running as other uids can read it; else
// the user's cache directory), once per lock file. Where node or npm is missing, or
// the install fails, a test skips naming what is missing, unless
// KIN_TEST_REQUIRE_NODE=1 (CI): then it fails.
//
// It must not be imported by non-test code.
package modelsdktest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// EnvRequire, set to 1, turns a skip for a missing node, npm or package
// into a failure.
const EnvRequire = "KIN_TEST_REQUIRE_NODE"

// EnvCache is the directory the packages are installed under.
const EnvCache = "KIN_NODE_CACHE"

//go:embed testdata/node/package.json testdata/node/package-lock.json testdata/node/call.mjs
//go:embed testdata/cli/package.json testdata/cli/package-lock.json
var files embed.FS

// Node is an installed copy of the scripts and the pinned packages.
type Node struct {
	// Bin is node's path; Dir the directory holding call.mjs and its
	// node_modules (readable by anyone, so an agent running as another
	// user can run it).
	Bin string
	Dir string
}

var (
	installOnce sync.Once
	installed   *Node
	installErr  error
)

// Install finds node and npm and installs the SDKs (once per test
// binary), or skips the test naming what is missing (fails under
// KIN_TEST_REQUIRE_NODE=1).
func Install(t testing.TB) *Node {
	t.Helper()
	installOnce.Do(func() { installed, installErr = install("node") })
	if installErr != nil {
		if os.Getenv(EnvRequire) == "1" {
			t.Fatalf("the model SDKs (%s=1): %v", EnvRequire, installErr)
		}
		t.Skipf("the model SDKs are not available: %v", installErr)
	}
	return installed
}

// EnvRequireCLIs, set to 1, turns a skip for Claude Code or Codex not
// installing into a failure. CI leaves it unset: their packages are
// 400 MB and 315 MB of native binaries from npm's registry.
const EnvRequireCLIs = "KIN_TEST_REQUIRE_AGENT_CLIS"

// CLIs are the installed agent CLIs: the native binaries of
// @anthropic-ai/claude-code and @openai/codex at the versions
// testdata/cli pins, for this machine.
type CLIs struct {
	ClaudeCode string
	Codex      string
}

var (
	clisOnce sync.Once
	clis     CLIs
	clisErr  error
)

// InstallCLIs installs Claude Code and Codex (once per test binary, into
// the same cache as the SDKs), or skips naming what is missing (fails
// under KIN_TEST_REQUIRE_AGENT_CLIS=1). Their install scripts are not run:
// the binaries are taken from the platform packages npm installs.
func InstallCLIs(t testing.TB) CLIs {
	t.Helper()
	clisOnce.Do(func() {
		var n *Node
		if n, clisErr = install("cli"); clisErr != nil {
			return
		}
		nm := filepath.Join(n.Dir, "node_modules")
		var platform, triple string
		switch runtime.GOARCH {
		case "amd64":
			platform, triple = "linux-x64", "x86_64-unknown-linux-musl"
		case "arm64":
			platform, triple = "linux-arm64", "aarch64-unknown-linux-musl"
		default:
			clisErr = fmt.Errorf("no Claude Code or Codex package for linux/%s", runtime.GOARCH)
			return
		}
		clis = CLIs{
			ClaudeCode: filepath.Join(nm, "@anthropic-ai", "claude-code-"+platform, "claude"),
			Codex:      filepath.Join(nm, "@openai", "codex-"+platform, "vendor", triple, "bin", "codex"),
		}
		for _, p := range []string{clis.ClaudeCode, clis.Codex} {
			if _, err := os.Stat(p); err != nil {
				clisErr = fmt.Errorf("npm installed no %s: %w", p, err)
				return
			}
		}
	})
	if clisErr != nil {
		if os.Getenv(EnvRequireCLIs) == "1" {
			t.Fatalf("Claude Code and Codex (%s=1): %v", EnvRequireCLIs, clisErr)
		}
		t.Skipf("Claude Code and Codex are not available: %v", clisErr)
	}
	return clis
}

// install installs testdata/SET's packages from its lock file.
func install(set string) (*Node, error) {
	bin, err := exec.LookPath("node")
	if err != nil {
		return nil, errors.New("node is not in PATH (apt-get install nodejs npm)")
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		return nil, errors.New("npm is not in PATH (apt-get install npm)")
	}
	lock, err := files.ReadFile("testdata/" + set + "/package-lock.json")
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(lock)
	root, err := cacheRoot()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(root, set+"-"+hex.EncodeToString(sum[:8]))
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, err
	}
	// One installer at a time across test binaries; the directory
	// appears whole (renamed into place) or not at all.
	lf, err := os.OpenFile(dir+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	defer lf.Close()
	if err := syscall.Flock(int(lf.Fd()), syscall.LOCK_EX); err != nil {
		return nil, fmt.Errorf("lock %s: %w", lf.Name(), err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", ".package-lock.json")); err != nil {
		tmp, err := os.MkdirTemp(root, "installing-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(tmp)
		if err := writeFiles(set, tmp); err != nil {
			return nil, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error")
		cmd.Dir = tmp
		cmd.Env = append(os.Environ(), "npm_config_update_notifier=false")
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("npm ci of testdata/%s/package-lock.json into %s: %v\n%s", set, tmp, err, out)
		}
		_ = os.RemoveAll(dir)
		if err := os.Chmod(tmp, 0o755); err != nil {
			return nil, err
		}
		if err := os.Rename(tmp, dir); err != nil {
			return nil, err
		}
	}
	// The scripts are written each time: they change without the lock.
	if err := writeFiles(set, dir); err != nil {
		return nil, err
	}
	return &Node{Bin: bin, Dir: dir}, nil
}

// cacheRoot is where the packages are installed: $KIN_NODE_CACHE; as root
// /var/cache/kin-test, which agents running as their own uids can read
// (root's own cache directory is under /root, which they cannot); else the
// user's cache directory.
func cacheRoot() (string, error) {
	if root := os.Getenv(EnvCache); root != "" {
		return root, nil
	}
	if os.Geteuid() == 0 {
		return "/var/cache/kin-test", nil
	}
	c, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no cache directory for the npm packages (set %s): %w", EnvCache, err)
	}
	return filepath.Join(c, "kin-test"), nil
}

// writeFiles copies testdata/SET's embedded files into dir.
func writeFiles(set, dir string) error {
	return fs.WalkDir(files, "testdata/"+set, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := files.ReadFile(p)
		if err != nil {
			return err
		}
		dst := filepath.Join(dir, filepath.Base(p))
		if old, err := os.ReadFile(dst); err == nil && bytes.Equal(old, b) {
			return nil
		}
		// Written aside and renamed: another test binary may be running
		// the old one.
		tmp := dst + ".tmp-" + fmt.Sprint(os.Getpid())
		if err := os.WriteFile(tmp, b, 0o644); err != nil {
			return err
		}
		return os.Rename(tmp, dst)
	})
}

// Script is call.mjs's path.
func (n *Node) Script() string { return filepath.Join(n.Dir, "call.mjs") }

// Argv is the command that makes a call (kind and call.mjs's arguments
// after it), for kin spawn.
func (n *Node) Argv(args ...string) []string {
	return append([]string{n.Bin, n.Script()}, args...)
}

// Result is what call.mjs printed.
type Result struct {
	OK     bool            `json:"ok"`
	Text   string          `json:"text"`
	Usage  json.RawMessage `json:"usage"`
	Events int             `json:"events"`
	// What the call ended with: OpenAI's finish_reason, the Responses
	// API's status, Anthropic's stop_reason.
	Finish string `json:"finish"`
	Status any    `json:"status"`
	Stop   string `json:"stop"`
	// The error as the SDK surfaced it: the HTTP status and OpenAI's
	// error object or Anthropic's whole error body.
	Error   json.RawMessage `json:"error"`
	Message string          `json:"message"`

	Exit   int    `json:"-"` // call.mjs's exit status
	Output string `json:"-"` // everything it printed (stdout and stderr)
}

// HTTPStatus is the error's HTTP status (0 without one).
func (r Result) HTTPStatus() int {
	if f, ok := r.Status.(float64); ok {
		return int(f)
	}
	return 0
}

// Parse reads call.mjs's output (its last JSON line).
func Parse(out []byte, exit int) (Result, error) {
	r := Result{Exit: exit, Output: string(out)}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.HasPrefix(lines[i], "{") {
			if err := json.Unmarshal([]byte(lines[i]), &r); err != nil {
				return r, fmt.Errorf("call.mjs printed %q: %w", lines[i], err)
			}
			return r, nil
		}
	}
	return r, fmt.Errorf("call.mjs printed no result (exit %d):\n%s", exit, out)
}

// Run runs call.mjs with args, directly, with exactly env (and nothing of
// the test's environment), within a minute.
func (n *Node) Run(t testing.TB, env []string, args ...string) Result {
	t.Helper()
	return n.run(t, nil, env, args...)
}

// RunAsUID is Run as user uid (and group uid): an agent's calls on kin's
// HTTP address must come from its own uid where agents run as their own.
func (n *Node) RunAsUID(t testing.TB, uid uint32, env []string, args ...string) Result {
	t.Helper()
	return n.run(t, &syscall.Credential{Uid: uid, Gid: uid}, env, args...)
}

func (n *Node) run(t testing.TB, cred *syscall.Credential, env []string, args ...string) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	argv := n.Argv(args...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	cmd.Env = env
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	exit := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		exit = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("node %v: %v\n%s", args, err, out)
	}
	r, perr := Parse(out, exit)
	if perr != nil {
		t.Fatalf("node %v: %v", args, perr)
	}
	return r
}

// UsageMap is the result's usage, decoded (nil without one).
func (r Result) UsageMap() map[string]any {
	var m map[string]any
	_ = json.Unmarshal(r.Usage, &m)
	return m
}
