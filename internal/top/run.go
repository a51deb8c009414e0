package top

import (
	"context"
	"errors"
	"io"
	"os"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/term"

	"github.com/kin-agents/kin/kin"
)

// ErrNoTerminal is Run's error when its input or output is not a terminal.
var ErrNoTerminal = kin.Errorf(kin.ECodeInvalid,
	`kin top needs a terminal (its input and output are not one); for a snapshot use "kin tree", for a stream "kin events --follow"`)

// Run runs kin top on the terminal in and out until the user quits or ctx
// ends (neither is an error).
func Run(ctx context.Context, svc kin.Service, opt Options, in io.Reader, out io.Writer) error {
	if err := CheckTerminal(in, out); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the event stream with the program
	opt.Live = true
	p := tea.NewProgram(New(ctx, svc, opt), tea.WithContext(ctx), tea.WithInput(in), tea.WithOutput(out))
	_, err := p.Run()
	if errors.Is(err, tea.ErrInterrupted) || errors.Is(err, tea.ErrProgramKilled) && ctx.Err() != nil && !errors.Is(err, tea.ErrProgramPanic) {
		return nil
	}
	return err
}

// CheckTerminal returns ErrNoTerminal unless in and out are terminals.
func CheckTerminal(in io.Reader, out io.Writer) error {
	if !isTerminal(in) || !isTerminal(out) {
		return ErrNoTerminal
	}
	return nil
}

func isTerminal(f any) bool {
	file, ok := f.(*os.File)
	return ok && term.IsTerminal(file.Fd())
}
