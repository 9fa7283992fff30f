package cli

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	wsclient "github.com/gantryhq/gantry/workspace/client"
)

func newWSSSHCmd(client func() *wsclient.Client) *cobra.Command {
	var stdio bool
	cmd := &cobra.Command{
		Use:   "ssh --stdio ID",
		Short: "Carry an SSH connection into a workspace over stdin and stdout (OpenSSH's ProxyCommand: see ws config-ssh)",
		Long: `Open an SSH connection into a running workspace and carry it over stdin and stdout, for
OpenSSH's ProxyCommand: ` + "`gantry ws config-ssh`" + ` writes the ssh config that uses it, then
` + "`ssh gantry-NAME`" + `, ` + "`ssh gantry-NAME CMD`" + `, ` + "`scp`" + `, ` + "`sftp`" + ` and ` + "`rsync -e ssh`" + ` work
(where the workspace has sftp-server and rsync), and ` + "`ssh -L LOCAL:localhost:PORT`" + ` reaches the workspace's PORT.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !stdio {
				return errors.New("ws ssh needs --stdio (it is OpenSSH's ProxyCommand: run `gantry ws config-ssh`, then `ssh gantry-NAME`)")
			}
			conn, err := client().SSH(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return pipeStdio(conn, cmd.InOrStdin(), cmd.OutOrStdout())
		},
	}
	cmd.Flags().BoolVar(&stdio, "stdio", false, "carry the connection over stdin and stdout")
	return cmd
}

// pipeStdio copies in to conn and conn to out until either ends, then
// closes conn.
func pipeStdio(conn io.ReadWriteCloser, in io.Reader, out io.Writer) error {
	defer conn.Close()
	up := make(chan error, 1)
	go func() {
		_, err := io.Copy(conn, in)
		up <- err
	}()
	down := make(chan error, 1)
	go func() {
		_, err := io.Copy(out, conn)
		down <- err
	}()
	select {
	case err := <-down:
		return err
	case err := <-up:
		return err // ssh closed our stdin: it is done with the connection
	}
}

func newWSConfigSSHCmd(cf *wsClientFlags) *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "config-ssh [--file PATH]",
		Short: "Write an ssh config with a Host gantry-NAME for each of your workspaces, for ssh, scp, sftp and rsync",
		Long: `Write an OpenSSH config file of its own (default: gantry/ssh_config under your config
directory) with a "Host gantry-NAME" for each of your workspaces: its ProxyCommand is
` + "`gantry ws ssh --stdio ID`" + ` against this server, the host key is accepted the first
time and checked after (gantry_known_hosts beside the file). Your ~/.ssh/config is never
written: add the Include line this prints at its top. The token is not written either: ssh
passes it on from $GANTRY_TOKEN in its environment.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runConfigSSH(cmd, cf, file)
		},
	}
	cmd.Flags().StringVar(&file, "file", "", "the ssh config file to write (default <config dir>/gantry/ssh_config)")
	return cmd
}

// runConfigSSH writes the config of `ws config-ssh` to file.
func runConfigSSH(cmd *cobra.Command, cf *wsClientFlags, file string) error {
	if file == "" {
		dir, err := os.UserConfigDir()
		if err != nil {
			return fmt.Errorf("config-ssh: %w (give --file)", err)
		}
		file = filepath.Join(dir, "gantry", "ssh_config")
	}
	file, err := filepath.Abs(file)
	if err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("config-ssh: this program's path: %w", err)
	}
	c := cf.client()
	me, err := c.Whoami(cmd.Context())
	if err != nil {
		return err
	}
	wss, err := c.List(cmd.Context())
	if err != nil {
		return err
	}
	proxy := []string{exe, "ws", "--server", c.Base}
	if ca := firstOf(cf.caCert, os.Getenv("GANTRY_CA_CERT")); ca != "" {
		if ca, err = filepath.Abs(ca); err != nil {
			return err
		}
		proxy = append(proxy, "--ca-cert", ca)
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Written by `gantry ws config-ssh` for %s (owner %s); it is rewritten each time.\n", c.Base, me.Owner)
	known := filepath.Join(filepath.Dir(file), "gantry_known_hosts")
	n := 0
	for _, ws := range wss {
		if ws.Owner != me.Owner {
			continue // an admin's list holds other owners' workspaces: their names may collide
		}
		fmt.Fprintf(&b, "\nHost gantry-%s\n  User %s\n  ProxyCommand %s\n  StrictHostKeyChecking accept-new\n  UserKnownHostsFile %s\n",
			ws.Name, me.Owner, sshPercent(shellJoin(append(proxy, "ssh", "--stdio", ws.ID))), sshQuote(sshPercent(known)))
		n++
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return err
	}
	if err := writeFileAtomic(file, b.Bytes()); err != nil {
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "wrote %d host(s) to %s; add this line at the top of ~/.ssh/config:\nInclude %s\n", n, file, sshQuote(file))
	return nil
}

// writeFileAtomic writes file (mode 0600: ssh refuses a config others
// can write) by renaming a temporary file over it.
func writeFileAtomic(file string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(file), ".ssh_config-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), file)
}

// shellJoin quotes args for /bin/sh (ssh runs a ProxyCommand with it).
func shellJoin(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		if a != "" && strings.Trim(a, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:=@") == "" {
			q[i] = a
		} else {
			q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(q, " ")
}

// sshPercent escapes ssh_config's % tokens.
func sshPercent(s string) string { return strings.ReplaceAll(s, "%", "%%") }

// sshQuote double-quotes a path with spaces for ssh_config.
func sshQuote(s string) string {
	if strings.ContainsAny(s, " \t") {
		return `"` + s + `"`
	}
	return s
}
