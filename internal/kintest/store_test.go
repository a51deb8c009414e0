package kintest_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/internal/pgtest"
)

func TestMain(m *testing.M) {
	code := pgtest.Main(m)
	kintest.RemoveAgentBinary()
	os.Exit(code)
}

func TestStoreIsSQLiteByDefault(t *testing.T) {
	for _, v := range []string{"", "sqlite"} {
		t.Setenv(kintest.EnvStore, v)
		if got := kintest.Store(t, kintest.TempHome(t)); got != "" {
			t.Errorf("%s=%q: store %q, want \"\" (the home's kin.db)", kintest.EnvStore, v, got)
		}
	}
}

func TestStoreOnPostgresIsOneDatabasePerHome(t *testing.T) {
	t.Setenv(kintest.EnvStore, "postgres")
	home, other := kintest.TempHome(t), kintest.TempHome(t)
	dsn := kintest.Store(t, home)
	if !strings.HasPrefix(dsn, "postgres://") {
		t.Fatalf("store %q, want a postgres:// DSN", dsn)
	}
	if again := kintest.Store(t, home); again != dsn {
		t.Errorf("a restart on one home would get another store: %q, then %q", dsn, again)
	}
	if o := kintest.Store(t, other); o == dsn {
		t.Errorf("two homes share the store %q", dsn)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("the home's database: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE TABLE t (x int)"); err != nil {
		t.Error(err)
	}
}

// helper runs TestHelper in a copy of this test binary under $KIN_TEST_STORE=store.
func helper(t *testing.T, store, mode string) (string, error) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelper$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), kintest.EnvStore+"="+store, "KINTEST_HELPER="+mode)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestHelper is run by the tests below in a child test binary.
func TestHelper(t *testing.T) {
	switch os.Getenv("KINTEST_HELPER") {
	case "store":
		kintest.Store(t, kintest.TempHome(t))
	case "daemon":
		d := kintest.StartDaemon(t)
		t.Logf("store=%s", d.Config.Store)
	default:
		t.Skip("run by the tests of KIN_TEST_STORE")
	}
}

func TestStoreRefusesAnUnknownStore(t *testing.T) {
	out, err := helper(t, "mysql", "store")
	if err == nil || !strings.Contains(out, "--- FAIL: TestHelper") || !strings.Contains(out, `KIN_TEST_STORE="mysql": want sqlite, postgres`) {
		t.Errorf("KIN_TEST_STORE=mysql should fail the test, naming what it takes (%v):\n%s", err, out)
	}
}

func TestStartDaemonOnPostgres(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a daemon")
	}
	out, err := helper(t, "postgres", "daemon")
	switch {
	case strings.Contains(out, "--- SKIP: TestHelper") && os.Getenv(pgtest.EnvRequire) != "1":
		t.Skipf("no PostgreSQL:\n%s", out)
	case err == nil:
		if !strings.Contains(out, "store=postgres://") {
			t.Errorf("the daemon did not run on PostgreSQL:\n%s", out)
		}
	case strings.Contains(out, "PostgreSQL driver is not built yet") && strings.Contains(out, "postgres://"):
		// Until storeopen opens postgres:// DSNs: the daemon was
		// pointed at the home's database.
		t.Logf("the daemon was given a postgres:// store; the driver is not built yet")
	default:
		t.Errorf("StartDaemon under KIN_TEST_STORE=postgres (%v):\n%s", err, out)
	}
}
