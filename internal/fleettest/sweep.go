package fleettest

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/kin-agents/kin/internal/ctxfuse"
	"github.com/kin-agents/kin/internal/pgtest"
	"github.com/kin-agents/kin/internal/proctest"
)

// What a fleet makes, by name; the first group is the test binary's pid.
var (
	staleNetns = regexp.MustCompile(`^kinfleet-([0-9]+)-[0-9a-z]+-[a-z][a-z0-9-]*$`)
	staleLink  = regexp.MustCompile(`^k[bv]([0-9]+)-[0-9a-z]+(-[0-9a-z]+)?$`)
	staleDir   = regexp.MustCompile(`^kinfleet-([0-9]+)-[0-9a-z]+-`)
)

// sweep removes what fleets of test binaries that died before their
// cleanups (kill -9, a timeout's panic) left: the processes in their
// namespaces (daemons PDEATHSIG has not killed, and agents) by pid, the
// cgroup roots their daemons reported (recorded in their directories),
// their veths, bridges and namespaces, their directories, and their
// PostgreSQL clusters' files (pgtest.Sweep). Only what
// carries the pid of a process that is gone is touched.
func sweep() {
	dead := func(re *regexp.Regexp, name string) bool {
		m := re.FindStringSubmatch(name)
		if m == nil {
			return false
		}
		pid, err := strconv.Atoi(m[1])
		return err == nil && pid != os.Getpid() && !proctest.Alive(pid)
	}
	var namespaces []string
	ents, _ := os.ReadDir(netnsDir)
	for _, e := range ents {
		if dead(staleNetns, e.Name()) {
			namespaces = append(namespaces, e.Name())
			killNetns(e.Name())
		}
	}
	var dirs []string
	for _, parent := range []string{os.TempDir(), "/tmp"} {
		ents, _ := os.ReadDir(parent)
		for _, e := range ents {
			if e.IsDir() && dead(staleDir, e.Name()) {
				dirs = append(dirs, filepath.Join(parent, e.Name()))
			}
		}
		if parent == "/tmp" {
			break
		}
	}
	for _, dir := range dirs {
		for _, cg := range readLines(filepath.Join(dir, "cgroups")) {
			if strings.HasPrefix(cg, "/sys/fs/cgroup/") && strings.HasPrefix(filepath.Base(cg), "kin-") {
				removeCgroup(cg)
			}
		}
	}
	for _, link := range links() {
		if dead(staleLink, link) {
			ipCmd("link", "del", link)
		}
	}
	for _, ns := range namespaces {
		ipCmd("netns", "del", ns)
	}
	for _, dir := range dirs {
		ctxfuse.DetachUnder(dir) // its daemons' served agent/, dead with them
		os.RemoveAll(dir)
	}
	pgtest.Sweep() // the store's cluster: its server died with the binary (PDEATHSIG)
}

// links are the names of the root namespace's network devices.
func links() []string {
	out, err := exec.Command("ip", "-o", "link", "show").Output()
	if err != nil {
		return nil
	}
	var names []string
	for _, line := range strings.Split(string(out), "\n") {
		// "7: kv123-1-0@if2: <BROADCAST,...> ..."
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
		names = append(names, name)
	}
	return names
}

func readLines(path string) []string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			lines = append(lines, l)
		}
	}
	return lines
}
