package policy

import "github.com/kin-agents/kin/kin"

// randomMounts draws a valid mount map over paths (ancestors listed before
// descendants) or nil: each path is listed or not, with a mode at least as
// visible as its nearest listed ancestor's, as Validate demands.
func randomMounts(intn func(int) int, paths []string) map[string]kin.Mode {
	if intn(3) == 0 {
		return nil
	}
	all := []kin.Mode{kin.ModeHidden, kin.ModeRO, kin.ModeRW}
	m := map[string]kin.Mode{}
	for _, p := range paths {
		if intn(2) == 0 {
			continue
		}
		_, anc, _ := lookup(m, p)
		m[p] = all[anc.Rank()+intn(3-anc.Rank())]
	}
	return m
}
