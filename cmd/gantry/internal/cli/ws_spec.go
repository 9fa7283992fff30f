package cli

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/gantryhq/gantry/workspace"
	wsclient "github.com/gantryhq/gantry/workspace/client"
)

// specFlags are the spec flags of `ws create` and `ws update`: the
// command's environment and the workspace's limits.
type specFlags struct {
	env    []string
	cpus   float64
	memory string
	pids   int64
	http   bool
	apps   []string
	unapps []string
}

func (f *specFlags) register(fs *pflag.FlagSet, verb string) {
	fs.StringArrayVar(&f.env, "env", nil, verb+" an environment variable of the command, KEY=VALUE (repeatable)")
	fs.Float64Var(&f.cpus, "cpus", 0, "CPUs the workspace may use, e.g. 1.5 (0: the server's --default-cpus)")
	fs.StringVar(&f.memory, "memory", "", "memory the workspace may use, e.g. 512MiB (past it the kernel kills: OOMKilled)")
	fs.Int64Var(&f.pids, "pids", 0, "processes and threads the workspace may run (a fork bomb stops there)")
	fs.BoolVar(&f.http, "http", false, "the command serves HTTP on $PORT: a start completes once it accepts connections")
	fs.StringArrayVar(&f.apps, "app", nil, verb+" an app: NAME=PORT[,share=owner|authenticated|public], served at {NAME}--{workspace}--{owner}.{apps domain}; "+
		"main[,share=LEVEL] sets the share level of the default app on $PORT (repeatable; NAME: a–z, 0–9, '-'; share defaults to owner)")
}

// memoryBytes is --memory in bytes ("" and "0": 0, the server's default).
func (f *specFlags) memoryBytes() (int64, error) {
	if f.memory == "" || f.memory == "0" {
		return 0, nil
	}
	n, err := parseSize(f.memory)
	if err != nil {
		return 0, fmt.Errorf("--memory: %w", err)
	}
	return n, nil
}

func newWSCreateCmd(client func() *wsclient.Client) *cobra.Command {
	var n workspace.NewWorkspace
	var desired string
	var sf specFlags
	var params []string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "create NAME [--cmd CMD] [--image IMG] [--env K=V]... [--http] [--app NAME=PORT[,share=LEVEL]]... [--cpus N] [--memory SIZE] [--pids N] | --template T [--param K=V]...",
		Short: "Create a workspace (it gets an empty volume: STANDBY); prints its id. --template T --desired RUNNING takes a ready one from T's warm pool if it has one",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			mem, err := sf.memoryBytes()
			if err != nil {
				return err
			}
			n.Name, n.Desired = args[0], workspace.Status(desired)
			apps, err := parseAppFlags(sf.apps)
			if err != nil {
				return err
			}
			n.Spec = workspace.Spec{Env: sf.env, CPUs: sf.cpus, Memory: mem, Pids: sf.pids, HTTP: sf.http, Apps: apps}
			if n.Params, err = parseKV("param", params); err != nil {
				return err
			}
			if n.Params != nil && n.Template == "" {
				return fmt.Errorf("--param fills a template's parameters: give --template")
			}
			w, err := client().Create(cmd.Context(), n)
			if err != nil || asJSON {
				return orJSON(cmd, w, err)
			}
			fmt.Fprintln(cmd.OutOrStdout(), w.ID)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, `print the workspace as JSON instead of its id ("pooled": true when it came RUNNING from its template's warm pool)`)
	cmd.Flags().StringVar(&n.Command, "cmd", "", "command run in the volume while RUNNING; it gets $PORT to serve HTTP on, proxied at /w/{id}/ (default: "+`"exec sleep infinity"`+")")
	cmd.Flags().StringVar(&n.Image, "image", "", "container image (docker and kubernetes providers; required there unless ws serve has a default)")
	cmd.Flags().StringVar(&desired, "desired", "", "initial desired state: STANDBY (default), RUNNING or PENDING")
	cmd.Flags().StringVar(&n.Template, "template", "", "make it from this template's latest version (ws template list): its image, command, env and limits")
	cmd.Flags().StringArrayVar(&params, "param", nil, "--template: a parameter's value, NAME=VALUE (repeatable)")
	sf.register(cmd.Flags(), "set")
	return cmd
}

func newWSUpdateCmd(client func() *wsclient.Client) *cobra.Command {
	var sf specFlags
	var image, command string
	var unset []string
	var restart bool
	var templateVersion string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "update ID [--cmd CMD] [--image IMG] [--env K=V]... [--unset-env K]... [--http] [--app NAME=PORT[,share=LEVEL]]... [--remove-app NAME]... [--cpus N] [--memory SIZE] [--pids N] [--template-version V] [--restart]",
		Short: "Change a workspace's command, image, environment, apps or limits: applied at its next start (--restart: now; apps' share levels: at once)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			u, err := sf.update(cmd.Flags())
			if err != nil {
				return err
			}
			if cmd.Flags().Changed("image") {
				u.Image = &image
			}
			if cmd.Flags().Changed("cmd") {
				u.Command = &command
			}
			u.EnvUnset = unset
			u.TemplateVersion = templateVersion
			c := client()
			w, err := c.Update(cmd.Context(), args[0], u)
			if err != nil {
				return err
			}
			if restart && w.DesiredState == workspace.Running {
				return restartWorkspace(cmd, c, w.ID, timeout)
			}
			return printJSON(cmd, w)
		},
	}
	cmd.Flags().StringVar(&command, "cmd", "", "the command run while RUNNING")
	cmd.Flags().StringVar(&image, "image", "", "container image (docker and kubernetes providers)")
	cmd.Flags().StringArrayVar(&unset, "unset-env", nil, "remove an environment variable (repeatable)")
	cmd.Flags().StringVar(&templateVersion, "template-version", "", "move a workspace made from a template to this version of it (latest, or a number), with its parameters")
	cmd.Flags().StringArrayVar(&sf.unapps, "remove-app", nil, "remove an app by name (repeatable)")
	cmd.Flags().BoolVar(&restart, "restart", false, "if the workspace should be RUNNING, stop it and start it again now (waiting for both)")
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Minute, "--restart: give up waiting after this long")
	sf.register(cmd.Flags(), "set or replace")
	return cmd
}

// update is the SpecUpdate of the spec flags given on the command line.
func (f *specFlags) update(fs *pflag.FlagSet) (workspace.SpecUpdate, error) {
	var u workspace.SpecUpdate
	u.EnvSet = f.env
	apps, err := parseAppFlags(f.apps)
	if err != nil {
		return u, err
	}
	u.AppSet, u.AppUnset = apps, f.unapps
	if fs.Changed("cpus") {
		u.CPUs = &f.cpus
	}
	if fs.Changed("memory") {
		mem, err := f.memoryBytes()
		if err != nil {
			return u, err
		}
		u.Memory = &mem
	}
	if fs.Changed("pids") {
		u.Pids = &f.pids
	}
	if fs.Changed("http") {
		u.HTTP = &f.http
	}
	return u, nil
}

// restartWorkspace applies an update now: desired STANDBY, wait for it,
// desired RUNNING, wait for that; it prints the workspace as it runs.
func restartWorkspace(cmd *cobra.Command, c *wsclient.Client, id string, timeout time.Duration) error {
	ctx := cmd.Context()
	if _, err := c.SetDesired(ctx, id, workspace.Standby); err != nil {
		return err
	}
	if err := runWSWait(ctx, c, id, string(workspace.Standby), timeout); err != nil {
		return fmt.Errorf("restart: stopping: %w", err)
	}
	if _, err := c.SetDesired(ctx, id, workspace.Running); err != nil {
		return err
	}
	if err := runWSWait(ctx, c, id, string(workspace.Running), timeout); err != nil {
		return fmt.Errorf("restart: starting: %w", err)
	}
	w, err := c.Get(ctx, id)
	if err != nil {
		return err
	}
	return printJSON(cmd, w)
}

// parseAppFlags parses --app values: NAME=PORT[,share=LEVEL], or
// main[,share=LEVEL] for the default app (on $PORT).
func parseAppFlags(vals []string) ([]workspace.App, error) {
	var apps []workspace.App
	for _, v := range vals {
		app, err := parseAppFlag(v)
		if err != nil {
			return nil, fmt.Errorf("--app %q: %w", v, err)
		}
		apps = append(apps, app)
	}
	return apps, nil
}

func parseAppFlag(v string) (workspace.App, error) {
	head, opts, _ := strings.Cut(v, ",")
	name, port, hasPort := strings.Cut(head, "=")
	app := workspace.App{Name: name}
	if err := workspace.ValidAppName(name); err != nil {
		return app, errors.New("want NAME=PORT[,share=LEVEL] with NAME of 1–20 characters of a–z, 0–9 and '-' (no \"--\", not starting or ending with '-')")
	}
	switch {
	case name == workspace.DefaultApp && hasPort:
		return app, errors.New("main is the default app, on $PORT: give it no port (main,share=LEVEL)")
	case name != workspace.DefaultApp && !hasPort:
		return app, errors.New("want NAME=PORT (main alone names the default app)")
	case hasPort:
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 {
			return app, fmt.Errorf("port %q: want 1–65535", port)
		}
		app.Port = n
	}
	if opts == "" {
		return app, nil
	}
	share, err := parseAppOptions(opts)
	app.Share = share
	return app, err
}

// parseAppOptions parses an --app value's options: share=LEVEL.
func parseAppOptions(opts string) (workspace.Share, error) {
	var share workspace.Share
	for opt := range strings.SplitSeq(opts, ",") {
		level, ok := strings.CutPrefix(opt, "share=")
		switch s := workspace.Share(level); {
		case ok && (s == workspace.ShareOwner || s == workspace.ShareAuthenticated || s == workspace.SharePublic):
			share = s
		case ok:
			return share, fmt.Errorf("share %q: want owner, authenticated or public", level)
		default:
			return share, fmt.Errorf("option %q: want share=owner|authenticated|public", opt)
		}
	}
	return share, nil
}
