package cli

import (
	"errors"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	wsclient "github.com/gantryhq/gantry/workspace/client"
	"github.com/gantryhq/gantry/workspace/provider"
)

func newWSExecCmd(client func() *wsclient.Client) *cobra.Command {
	var interactive, tty bool
	cmd := &cobra.Command{
		Use:   "exec ID [-i] [-t] -- CMD [ARG...]",
		Short: "Run a command in a running workspace; its output streams as it comes, its exit status is gantry's",
		Long: `Run a command in a running workspace: in its volume with its environment (process
provider), or in its container (docker). -i passes stdin; -t runs the command on a terminal
(sized like yours, resized with it, your terminal in raw mode while it runs): -it for a shell.`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			eio := wsclient.ExecIO{Stdout: cmd.OutOrStdout(), Stderr: cmd.ErrOrStderr()}
			if interactive {
				eio.Stdin = cmd.InOrStdin()
			}
			if tty {
				t, restore, err := localTerminal(interactive)
				if err != nil {
					return err
				}
				defer restore()
				eio.TTY = t
			}
			status, err := client().Exec(cmd.Context(), args[0], args[1:], eio)
			if err != nil {
				return err
			}
			if status != 0 {
				return withCode(status, errors.New(""))
			}
			return nil
		},
	}
	cmd.Flags().BoolVarP(&interactive, "interactive", "i", false, "pass stdin to the command")
	cmd.Flags().BoolVarP(&tty, "tty", "t", false, "run the command on a terminal (stdout and stderr merged, as a terminal shows them)")
	return cmd
}

// localTerminal is the terminal an exec -t asks for: the size of ours (if
// stdout is one) and its resizes; with raw, ours is put in raw mode so keys
// reach the remote terminal as typed. restore undoes both.
func localTerminal(raw bool) (*provider.TTY, func(), error) {
	t := &provider.TTY{Size: provider.DefaultWinSize}
	out := int(os.Stdout.Fd())
	if !term.IsTerminal(out) {
		return t, func() {}, nil
	}
	size := func() provider.WinSize {
		if c, r, err := term.GetSize(out); err == nil && c > 0 && r > 0 {
			return provider.WinSize{Rows: uint16(r), Cols: uint16(c)}
		}
		return provider.DefaultWinSize
	}
	t.Size = size()
	resize := make(chan provider.WinSize, 1)
	t.Resize = resize
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-winch:
				select {
				case <-resize:
				default:
				}
				resize <- size()
			case <-stop:
				return
			}
		}
	}()
	restoreRaw := func() {}
	if in := int(os.Stdin.Fd()); raw && term.IsTerminal(in) {
		if st, err := term.MakeRaw(in); err == nil {
			restoreRaw = func() { term.Restore(in, st) }
		}
	}
	return t, func() {
		signal.Stop(winch)
		close(stop)
		restoreRaw()
	}, nil
}
