package cli

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/kin"
)

func TestStatus(t *testing.T) {
	d := kintest.StartDaemon(t)
	seedLineage(t, d)
	r := kinAt(t, d, "status")
	wantOK(t, r)
	r = kinAt(t, d, "status", "--json")
	wantOK(t, r)
	var st kin.DaemonStatus
	decodeOne(t, r.stdout, &st)
	if st.Agents != 7 || st.LastEvent != 13 || st.Home != d.Home || st.StartedAt.IsZero() || st.Running != 0 {
		t.Errorf("status = %+v", st)
	}
	containment := containmentString(st.Containment, st.ContainmentReason)
	switch st.Containment {
	case "cgroup2":
		if st.CgroupRoot == "" {
			t.Errorf("cgroup2 without a cgroup root: %+v", st)
		}
	case "process-groups":
		if st.ContainmentReason == "" {
			t.Errorf("the process-groups fallback without a reason: %+v", st)
		}
	default:
		t.Errorf("containment %q is not cgroup2 or process-groups", st.Containment)
	}
	r = kinAt(t, d, "status")
	wantOK(t, r)
	want := []string{
		"Version      test",
		"PID          " + strconv.Itoa(os.Getpid()),
		"Home         " + d.Home,
		"Socket       " + d.SocketPath(),
		"HTTP         off",
		"Profile      default",
		"Agents       7",
		"Running      0",
		"Containment  " + containment,
		"Last event   13",
	}
	if st.CgroupRoot != "" {
		want = append(want, "Cgroup root  "+st.CgroupRoot)
	}
	for _, w := range want {
		if !strings.Contains(r.stdout, w+"\n") {
			t.Errorf("output lacks %q:\n%s", w, r.stdout)
		}
	}
}

// TestStatusContainment: the fallback says why; a forced choice too.
func TestStatusContainment(t *testing.T) {
	d := kintest.StartDaemon(t, kintest.WithContainment("process-groups"))
	r := kinAt(t, d, "status", "--json")
	wantOK(t, r)
	var st kin.DaemonStatus
	decodeOne(t, r.stdout, &st)
	if st.Containment != "process-groups" || st.CgroupRoot != "" {
		t.Fatalf("status = %+v, want process-groups without a cgroup root", st)
	}
	r = kinAt(t, d, "status")
	wantOK(t, r)
	if !strings.Contains(r.stdout, "Containment  "+containmentString(st.Containment, st.ContainmentReason)+"\n") || strings.Contains(r.stdout, "Cgroup root") {
		t.Errorf("output:\n%s", r.stdout)
	}
	for _, c := range []struct{ containment, reason, want string }{
		{"cgroup2", "", "cgroup2"},
		{"process-groups", "no writable cgroup v2", "process-groups (no writable cgroup v2)"},
		{"", "", "unknown"},
	} {
		if got := containmentString(c.containment, c.reason); got != c.want {
			t.Errorf("containmentString(%q, %q) = %q, want %q", c.containment, c.reason, got, c.want)
		}
	}
}

func TestStatusErrors(t *testing.T) {
	d := kintest.StartDaemon(t)
	wantUsage(t, kinAt(t, d, "status", "extra"), "extra")
	wantUsage(t, kinAt(t, d, "status", "--bogus"), "--bogus")
}

// TestStatusOverHTTP: KIN_ADDR and KIN_TOKEN select TCP instead of the socket.
func TestStatusOverHTTP(t *testing.T) {
	d := kintest.StartDaemon(t, kintest.WithHTTP())
	t.Setenv("KIN_ADDR", d.HTTPAddr())
	t.Setenv("KIN_TOKEN", d.OperatorToken())
	home := kintest.TempHome(t) // no socket there: only TCP can answer
	r := runCLI(t, "status", "--json", "--home", home)
	wantOK(t, r)
	var st kin.DaemonStatus
	decodeOne(t, r.stdout, &st)
	if st.HTTP != d.HTTPAddr() {
		t.Errorf("status = %+v", st)
	}
	t.Setenv("KIN_TOKEN", strings.Repeat("0", 64))
	wantError(t, runCLI(t, "status", "--json"), kin.ECodeUnauthorized)
	t.Setenv("KIN_ADDR", "::not an address::")
	wantError(t, runCLI(t, "status", "--json"), kin.ECodeInvalid)
}
