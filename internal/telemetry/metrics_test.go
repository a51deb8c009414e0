package telemetry

import (
	"fmt"
	"testing"

	"github.com/kin-agents/kin/kin"
)

// capRoles keeps the profile's roles and the first maxRoleLabels others (by
// name) as labels, and folds the rest into "other", keeping every count.
func TestCapRolesFoldsFreeFormRolesPastTheLimit(t *testing.T) {
	prof := kin.Profile{Roles: map[string]kin.RoleRule{"GO": {}}}
	counts := map[[2]string]int{{"active", "GO"}: 1, {"active", "none"}: 2}
	for i := range maxRoleLabels + 5 {
		counts[[2]string{"active", fmt.Sprintf("r%03d", i)}] = 1
	}
	got := capRoles(counts, prof)
	total := 0
	for k, n := range got {
		total += n
		if k[1] != "GO" && k[1] != "none" && k[1] != "other" && k[1] >= fmt.Sprintf("r%03d", maxRoleLabels) {
			t.Errorf("role %q kept as a label; only the first %d free-form roles are", k[1], maxRoleLabels)
		}
	}
	if got[[2]string{"active", "other"}] != 5 || got[[2]string{"active", "GO"}] != 1 || got[[2]string{"active", "none"}] != 2 {
		t.Errorf("folded counts = %v", got)
	}
	if total != 1+2+maxRoleLabels+5 {
		t.Errorf("%d agents counted after folding, want %d", total, 1+2+maxRoleLabels+5)
	}
	small := map[[2]string]int{{"active", "x"}: 3}
	if got := capRoles(small, prof); len(got) != 1 || got[[2]string{"active", "x"}] != 3 {
		t.Errorf("under the limit nothing folds: %v", got)
	}
}
