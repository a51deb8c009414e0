package proctest

import (
	"os"
	"strconv"
	"strings"
	"syscall"
)

// SignalIgnored reports whether process pid ignores sig: its bit in the
// SigIgn mask of /proc/<pid>/status (a shell's `trap ” TERM`, kept across
// exec). The error is the read's or the mask's parse.
func SignalIgnored(pid int, sig syscall.Signal) (bool, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return false, err
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "SigIgn:"); ok {
			mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				return false, err
			}
			return mask&(1<<(uint(sig)-1)) != 0, nil
		}
	}
	return false, nil
}
