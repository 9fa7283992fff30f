package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/gantryhq/gantry/workspace"
	wsclient "github.com/gantryhq/gantry/workspace/client"
)

// `gantry ws template …`: named, versioned workspace specs with typed
// parameters (workspace.Template; admins write them, owners use them with
// `ws create NAME --template T --param k=v`).

func newWSTemplateCmd(client func() *wsclient.Client) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "template",
		Short: "Workspace templates: named, versioned specs with parameters (ws create --template)",
	}
	cmd.AddCommand(newTemplatePutCmd(client, true), newTemplatePutCmd(client, false), newTemplateListCmd(client),
		newTemplateGetCmd(client), newTemplatePoolCmd(client), idCmd("delete", "Delete a template, every version (refused while a workspace uses it)", func(ctx context.Context, name string) error {
			return client().DeleteTemplate(ctx, name)
		}))
	return cmd
}

// templateFlags are the flags of `ws template create` and `update`.
type templateFlags struct {
	sf      specFlags
	image   string
	command string
	params  []string
	file    string
	from    string
}

func (f *templateFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.command, "cmd", "", "the command; {{.NAME}} is replaced by parameter NAME's value")
	fs.StringVar(&f.image, "image", "", "container image (docker and kubernetes providers)")
	fs.StringArrayVar(&f.params, "param", nil, "a parameter, NAME[:string|int|bool][=DEFAULT] (repeatable; no default: required at create)")
	fs.StringVar(&f.from, "from", "", "start every workspace made from it with a copy of this workspace's files (stopped or archived), and take its image, command and spec unless given")
	fs.StringVar(&f.file, "file", "", "the whole template as JSON (a workspace.Template: params with pattern, choices, min, max); the flags above then may not be given")
	f.sf.register(fs, "set (values may hold {{.NAME}})")
}

// template is the template the flags describe: base (the latest version,
// for an update) with the given flags applied, or the --file's.
func (f *templateFlags) template(fs *pflag.FlagSet, name string, base workspace.Template) (workspace.Template, error) {
	if f.file != "" {
		for _, other := range []string{"cmd", "image", "param", "env", "cpus", "memory", "pids", "http", "app"} {
			if fs.Changed(other) {
				return base, fmt.Errorf("--file and --%s: give the whole template in the file", other)
			}
		}
		b, err := os.ReadFile(f.file)
		if err != nil {
			return base, err
		}
		var t workspace.Template
		if err := json.Unmarshal(b, &t); err != nil {
			return base, fmt.Errorf("--file %s: %w", f.file, err)
		}
		t.Name, t.From = name, f.from
		return t, nil
	}
	t := base
	t.Name, t.From = name, f.from
	return t, f.apply(fs, &t)
}

// apply sets the fields of t whose flags were given.
func (f *templateFlags) apply(fs *pflag.FlagSet, t *workspace.Template) error {
	if fs.Changed("cmd") {
		t.Command = f.command
	}
	if fs.Changed("image") {
		t.Image = f.image
	}
	if fs.Changed("env") {
		t.Env = f.sf.env
	}
	u, err := f.sf.update(fs)
	if err != nil {
		return err
	}
	if u.CPUs != nil {
		t.CPUs = *u.CPUs
	}
	if u.Memory != nil {
		t.Memory = *u.Memory
	}
	if u.Pids != nil {
		t.Pids = *u.Pids
	}
	if u.HTTP != nil {
		t.HTTP = *u.HTTP
	}
	if fs.Changed("app") {
		t.Apps = u.AppSet
	}
	if fs.Changed("param") {
		t.Params, err = parseParams(f.params)
	}
	return err
}

// parseParams reads --param NAME[:TYPE][=DEFAULT] values.
func parseParams(specs []string) ([]workspace.Param, error) {
	out := make([]workspace.Param, 0, len(specs))
	for _, s := range specs {
		head, def, hasDef := strings.Cut(s, "=")
		name, typ, _ := strings.Cut(head, ":")
		if name == "" {
			return nil, fmt.Errorf("--param %q: want NAME[:string|int|bool][=DEFAULT]", s)
		}
		p := workspace.Param{Name: name, Type: typ}
		if hasDef {
			p.Default = &def
		}
		out = append(out, p)
	}
	return out, nil
}

func newTemplatePutCmd(client func() *wsclient.Client, create bool) *cobra.Command {
	var f templateFlags
	var pool int
	use, short := "update NAME [flags] [--pool N]", "Write a new version of a template: the latest with the given flags changed (admin); --pool alone sizes its warm pool"
	if create {
		use, short = "create NAME [--cmd CMD] [--image IMG] [--param NAME[:TYPE][=DEFAULT]]... [--env K=V]... [limits] | --file T.json", "Create a template, version 1 (admin)"
	}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c := client()
			if !create && onlyFlag(cmd, "pool") {
				return setPool(cmd, c, args[0], pool, false)
			}
			var base workspace.Template
			if !create && f.file == "" {
				var err error
				if base, err = c.Template(cmd.Context(), args[0], 0); err != nil {
					return err
				}
			}
			t, err := f.template(cmd.Flags(), args[0], base)
			if err != nil {
				return err
			}
			if create {
				t, err = c.CreateTemplate(cmd.Context(), t)
			} else {
				t, err = c.UpdateTemplate(cmd.Context(), t)
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s version %d\n", t.Name, t.Version)
			if !create && cmd.Flags().Changed("pool") {
				return setPool(cmd, c, args[0], pool, false)
			}
			return nil
		},
	}
	f.register(cmd.Flags())
	if !create {
		cmd.Flags().IntVar(&pool, "pool", 0, fmt.Sprintf("keep this many workspaces of the template RUNNING ahead, for creates with --desired RUNNING (0–%d; 0 drains the pool)", workspace.MaxPoolSize))
	}
	return cmd
}

// newTemplatePoolCmd is `ws template pool NAME [SIZE] [--wait]`.
func newTemplatePoolCmd(client func() *wsclient.Client) *cobra.Command {
	var wait bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "pool NAME [SIZE] [--wait]",
		Short: "Show a template's warm pool, or size it (admin): SIZE workspaces kept RUNNING ahead for `ws create --template NAME --desired RUNNING`",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c := client()
			if len(args) == 1 && !wait {
				st, err := c.Pool(cmd.Context(), args[0])
				return orJSON(cmd, st, err)
			}
			if len(args) == 1 {
				st, err := c.Pool(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				args = append(args, strconv.Itoa(st.Size))
			}
			size, err := strconv.Atoi(args[1])
			if err != nil {
				return fmt.Errorf("SIZE %q: want a number of workspaces, 0–%d", args[1], workspace.MaxPoolSize)
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			cmd.SetContext(ctx)
			return setPool(cmd, c, args[0], size, wait)
		},
	}
	cmd.Flags().BoolVar(&wait, "wait", false, "wait until every member of the pool is ready (and no old one is left)")
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Minute, "--wait: give up after this long")
	return cmd
}

// setPool sizes template name's pool and prints its status, once ready
// if wait.
func setPool(cmd *cobra.Command, c *wsclient.Client, name string, size int, wait bool) error {
	ctx := cmd.Context()
	st, err := c.Pool(ctx, name)
	if err == nil && st.Size != size {
		st, err = c.SetPool(ctx, name, size)
	}
	for err == nil && wait && (st.Ready != st.Size || st.Starting+st.Draining > 0) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("pool %s: %d of %d ready (%d starting, %d draining) when the wait ended: %w", name, st.Ready, st.Size, st.Starting, st.Draining, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
		st, err = c.Pool(ctx, name)
	}
	return orJSON(cmd, st, err)
}

func newTemplateListCmd(client func() *wsclient.Client) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List templates (each one's latest version)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			all, err := client().Templates(cmd.Context())
			if err != nil || asJSON {
				return orJSON(cmd, all, err)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 2, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tVERSION\tIMAGE\tCOMMAND\tPARAMS")
			for _, t := range all {
				names := make([]string, len(t.Params))
				for i, p := range t.Params {
					names[i] = p.Name
				}
				fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", t.Name, t.Version, t.Image, t.Command, strings.Join(names, ","))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func newTemplateGetCmd(client func() *wsclient.Client) *cobra.Command {
	var version int
	var all bool
	cmd := &cobra.Command{
		Use:   "get NAME",
		Short: "Show a template as JSON (the latest version; --version N, or --versions for all)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if all {
				v, err := client().TemplateVersions(cmd.Context(), args[0])
				return orJSON(cmd, v, err)
			}
			t, err := client().Template(cmd.Context(), args[0], version)
			return orJSON(cmd, t, err)
		},
	}
	cmd.Flags().IntVar(&version, "version", 0, "this version (default: the latest)")
	cmd.Flags().BoolVar(&all, "versions", false, "every version, newest first")
	return cmd
}

// orJSON prints v as JSON, or returns err.
func orJSON(cmd *cobra.Command, v any, err error) error {
	if err != nil {
		return err
	}
	return printJSON(cmd, v)
}

// parseKV reads --param k=v values of `ws create`.
func parseKV(flag string, kvs []string) (map[string]string, error) {
	if len(kvs) == 0 {
		return nil, nil
	}
	out := map[string]string{}
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--%s %q: want NAME=VALUE", flag, kv)
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("--%s %s given twice", flag, k)
		}
		out[k] = v
	}
	return out, nil
}

// templateColumn is ws list's TEMPLATE: name@version, and the latest when
// newer ("web@1 (latest 2)").
func templateColumn(w workspace.Workspace) string {
	ref := w.Spec.Template
	if ref == nil {
		return "-"
	}
	s := fmt.Sprintf("%s@%d", ref.Name, ref.Version)
	if w.TemplateLatest > 0 {
		s += fmt.Sprintf(" (latest %d)", w.TemplateLatest)
	}
	return s
}

// onlyFlag says whether name is the one flag of cmd's own given.
func onlyFlag(cmd *cobra.Command, name string) bool {
	n := 0
	cmd.LocalNonPersistentFlags().VisitAll(func(f *pflag.Flag) {
		if f.Changed {
			n++
		}
	})
	return n == 1 && cmd.Flags().Changed(name)
}
