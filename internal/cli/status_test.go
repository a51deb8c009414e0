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
	for _, want := range []string{
		"Version     test",
		"PID         " + strconv.Itoa(os.Getpid()),
		"Home        " + d.Home,
		"Socket      " + d.SocketPath(),
		"HTTP        off",
		"Profile     default",
		"Agents      7",
		"Last event  13",
	} {
		if !strings.Contains(r.stdout, want+"\n") {
			t.Errorf("output lacks %q:\n%s", want, r.stdout)
		}
	}
	r = kinAt(t, d, "status", "--json")
	wantOK(t, r)
	var st kin.DaemonStatus
	decodeOne(t, r.stdout, &st)
	if st.Agents != 7 || st.LastEvent != 13 || st.Home != d.Home || st.StartedAt.IsZero() {
		t.Errorf("status = %+v", st)
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
	t.Setenv("KIN_TOKEN", d.Token())
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
