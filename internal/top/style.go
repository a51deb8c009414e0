package top

import (
	"charm.land/lipgloss/v2"

	"github.com/kin-agents/kin/kin"
)

// Colours by state: live green, in trouble yellow, gone grey, held blue,
// ended badly red, ended normally dim.
var stateStyles = map[kin.State]lipgloss.Style{
	kin.StateActive:     fg("2"),
	kin.StateStale:      fg("3"),
	kin.StateOffline:    fg("8"),
	kin.StateSuspended:  fg("4"),
	kin.StateStopping:   fg("5"),
	kin.StateCancelled:  fg("1"),
	kin.StateFailed:     fg("1").Bold(true),
	kin.StateTerminated: fg("1"),
	kin.StateExited:     lipgloss.NewStyle().Faint(true),
}

// Colours by status, for the agents not active.
var statusStyles = map[kin.Status]lipgloss.Style{
	kin.StatusSuspended:  fg("4"),
	kin.StatusRevoked:    fg("1"),
	kin.StatusTerminated: fg("1"),
}

var (
	plainStyle    = lipgloss.NewStyle()
	headerStyle   = lipgloss.NewStyle().Bold(true)
	headingStyle  = lipgloss.NewStyle().Faint(true)
	selectedStyle = lipgloss.NewStyle().Reverse(true)
	foldStyle     = lipgloss.NewStyle().Faint(true)
	promptStyle   = fg("3").Bold(true)
	errorStyle    = fg("1")
	keysStyle     = lipgloss.NewStyle().Faint(true)
)

func fg(c string) lipgloss.Style { return lipgloss.NewStyle().Foreground(lipgloss.Color(c)) }

// styleOf returns the style of a state or status, plain for those without.
func styleOf[K comparable](m map[K]lipgloss.Style, k K) lipgloss.Style {
	if s, ok := m[k]; ok {
		return s
	}
	return plainStyle
}
