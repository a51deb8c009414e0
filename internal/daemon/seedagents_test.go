package daemon_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/kin-agents/kin/client"
	"github.com/kin-agents/kin/internal/handoff"
	"github.com/kin-agents/kin/kin"
)

// The agents of seed 001's example, run as real processes by
// handoff_test.go. KINTEST_WORK is a folder every uid may read holding
// handoff.md, contract.json, result.md, patch.diff and the spec the
// reviewer reviews (docs/spec/agent-tool-security.md).
//
//	coder           write a line to its messages.jsonl, spawn "rev-123"
//	                running KINTEST_CHILD with the seed's handoff (the spec
//	                as input ref, contract.json as the output contract);
//	                with KINTEST_WAIT=1 wait for it and write
//	                "child <id> <status>"; else write "spawned <id>"; then wait
//	reviewer        read the handoff and the spec, write the seed's
//	                result.md, artifact/patch.diff and refs.jsonl (true
//	                hashes) to $KIN_OUTPUT, exit 0
//	reviewer-short  the same without the Findings section
//	reviewer-lie    the same, claiming a wrong hash for the patch
//	peek-parent     try to read KINTEST_PEEK (the parent's messages.jsonl)
//	                and list its folder, write "peek <error>", then answer
//	                as reviewer
//	chatty          write a line to its messages.jsonl, write "chatty", wait
func runSeed001Agent(mode string, out func(string, ...any)) int {
	ctx := context.Background()
	work := os.Getenv("KINTEST_WORK")
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join(work, name))
		if err != nil {
			out("read %s: %v", name, err)
			os.Exit(2)
		}
		return b
	}
	say := func(text string) {
		line, _ := json.Marshal(map[string]string{"role": "assistant", "content": text})
		f, err := os.OpenFile(filepath.Join(os.Getenv("KIN_SESSION"), "messages.jsonl"), os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			out("messages: %v", err)
			os.Exit(2)
		}
		f.Write(append(line, '\n'))
		f.Close()
	}
	answer := func(result []byte, lie bool) int {
		output := os.Getenv("KIN_OUTPUT")
		task, err := os.ReadFile(os.Getenv("KIN_HANDOFF"))
		if err != nil || !strings.Contains(string(task), "Review the mount ABI section") {
			out("handoff: %q %v", task, err)
			return 2
		}
		var in handoff.Ref
		refs, err := os.ReadFile(filepath.Join(os.Getenv("KIN_SESSION"), "context", "refs.jsonl"))
		if err == nil {
			err = json.Unmarshal([]byte(strings.SplitN(string(refs), "\n", 2)[0]), &in)
		}
		if err != nil {
			out("input refs: %v", err)
			return 2
		}
		spec, err := os.ReadFile(in.Path)
		if err != nil {
			out("spec: %v", err)
			return 2
		}
		patch := read("patch.diff")
		sum := func(b []byte) string { h := sha256.Sum256(b); return "sha256:" + hex.EncodeToString(h[:]) }
		patchHash := sum(patch)
		if lie {
			patchHash = sum([]byte("a patch the child never wrote"))
		}
		lines := []handoff.Ref{
			{Path: in.Path, Hash: sum(spec), Summary: "mount spec reviewed"},
			{Path: "artifact/patch.diff", Hash: patchHash, Kind: "patch", Summary: "suggested patch"},
		}
		var b strings.Builder
		for _, r := range lines {
			j, _ := json.Marshal(r)
			b.Write(append(j, '\n'))
		}
		for name, data := range map[string][]byte{"artifact/patch.diff": patch, "refs.jsonl": []byte(b.String()), "result.md": result} {
			if err := os.WriteFile(filepath.Join(output, name), data, 0o600); err != nil {
				out("write %s: %v", name, err)
				return 2
			}
		}
		say("review done")
		return 0
	}
	switch mode {
	case "coder":
		say("plan: hand the mount ABI review to a child")
		c, err := client.New(client.Config{Socket: os.Getenv("KIN_SOCKET")})
		if err != nil {
			out("client: %v", err)
			return 2
		}
		refs, err := handoff.InputRefs([]string{filepath.Join(work, "docs/spec/agent-tool-security.md")})
		if err != nil {
			out("input refs: %v", err)
			return 2
		}
		h := &kin.Handoff{Task: string(read("handoff.md")), Contract: read("contract.json")}
		// seed 001's mount subset: the work (docs and fixtures) read-only, the program it runs
		// (this test binary), and where it tells the test what it saw.
		pol := &kin.Policy{Mounts: map[string]kin.Mode{work: kin.ModeRO, filepath.Dir(os.Args[0]): kin.ModeRO}}
		if o := os.Getenv("KINTEST_CHILD_OUT"); o != "" {
			pol.Mounts[filepath.Dir(o)] = kin.ModeRW
		}
		for _, r := range refs {
			h.Refs = append(h.Refs, kin.Ref{Path: r.Path, Hash: r.Hash})
		}
		env := []string{"KINTEST_MODE=" + os.Getenv("KINTEST_CHILD"), "KINTEST_WORK=" + work, "KINTEST_OUT=" + os.Getenv("KINTEST_CHILD_OUT"),
			"KINTEST_PEEK=" + filepath.Join(os.Getenv("KIN_SESSION"), "messages.jsonl")}
		child, err := c.Spawn(ctx, kin.SpawnRequest{RegisterRequest: kin.RegisterRequest{Name: "rev-123", Role: "reviewer", Policy: pol},
			Command: []string{os.Args[0]}, Env: env, Handoff: h})
		if err != nil {
			out("spawn: %v", err)
			return 2
		}
		if os.Getenv("KINTEST_WAIT") != "1" {
			out("spawned %d", child.ID)
			break
		}
		res, err := c.Wait(ctx, kin.WaitRequest{ID: child.ID, Timeout: kin.Duration(time.Minute)})
		if err != nil {
			out("wait: %v", err)
			return 2
		}
		out("child %d %s", child.ID, res.Status)
	case "reviewer":
		return answer(read("result.md"), false)
	case "reviewer-lie":
		return answer(read("result.md"), true)
	case "reviewer-short":
		return answer([]byte("Summary:\nLooks fine.\n\nSuggested patch:\nsee artifact/patch.diff\n"), false)
	case "peek-parent":
		peek := os.Getenv("KINTEST_PEEK")
		_, err := os.ReadFile(peek)
		_, lerr := os.ReadDir(filepath.Dir(peek))
		out("peek %s", errText(err))
		out("list %s", errText(lerr))
		return answer(read("result.md"), false)
	case "chatty":
		say("working on it")
		out("chatty")
	}
	for {
		time.Sleep(time.Hour)
	}
}

func errText(err error) string {
	if err == nil {
		return "ok"
	}
	if os.IsPermission(err) {
		return "denied"
	}
	return fmt.Sprint(err)
}
