package sandbox

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"
)

// BenchmarkShimExec compares starting /bin/true through the shim (re-exec,
// parse, open the granted paths, Landlock, exec) with starting it directly,
// alternating the two in one run: the machines here are noisy, so only the
// ratio is worth comparing across runs.
func BenchmarkShimExec(b *testing.B) {
	requireLandlock(b)
	args, err := Args(Spec{Restrict: true, RO: DefaultSystemRO(), RW: DefaultSystemRW(), Argv: []string{"/bin/true"}})
	if err != nil {
		b.Fatal(err)
	}
	exe := testExe(b)
	env := append(os.Environ(), helperEnv+"=1")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var raw, shim time.Duration
	n := 0
	for b.Loop() {
		t0 := time.Now()
		if err := exec.CommandContext(ctx, "/bin/true").Run(); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		cmd := exec.CommandContext(ctx, exe, append([]string{"shim"}, args...)...)
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("shim: %v: %s", err, out)
		}
		shim += time.Since(t1)
		raw += t1.Sub(t0)
		n++
	}
	b.ReportMetric(float64(raw.Microseconds())/float64(n)/1000, "raw-ms/op")
	b.ReportMetric(float64(shim.Microseconds())/float64(n)/1000, "shim-ms/op")
	b.ReportMetric(float64(shim)/float64(raw), "shim/raw")
}
