package api_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/api"
	"github.com/gantryhq/gantry/workspace/client"
	"github.com/gantryhq/gantry/workspace/store/storetest"
	"github.com/gantryhq/gantry/workspace/wstest"
)

// wantAPIError fails unless err is an API error of status whose message
// holds each of parts.
func wantAPIError(t *testing.T, what string, err error, status int, parts ...string) {
	t.Helper()
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != status {
		t.Fatalf("%s: %v; want HTTP %d", what, err, status)
	}
	for _, p := range parts {
		if !strings.Contains(ae.Message, p) {
			t.Fatalf("%s: %q; want it to name %q", what, ae.Message, p)
		}
	}
}

func webTemplate() workspace.Template {
	port, greet := "8000", "hello"
	one, big := int64(1024), int64(65535)
	return workspace.Template{Name: "web", Command: "serve --port {{ .port }} --greet {{.greet}}",
		Spec: workspace.Spec{Env: []string{"GREETING={{.greet}}"}, Pids: 100},
		Params: []workspace.Param{
			{Name: "port", Type: "int", Default: &port, Min: &one, Max: &big},
			{Name: "greet", Default: &greet, Pattern: "[a-z]+"},
			{Name: "size", Choices: []string{"s", "m"}},
		}}
}

// TestTemplatesOverTheAPI: admins write templates, owners read them and
// create from them; parameters are filled, validated (400 naming the
// parameter) and recorded with the version; a newer version marks the
// workspace outdated until it moves; a template in use cannot be deleted.
func TestTemplatesOverTheAPI(t *testing.T) {
	for _, b := range wstest.Backends {
		t.Run(b.Name, func(t *testing.T) {
			ctx := t.Context()
			st := wstest.OpenStore(t, b.DSN(t))
			env := wstest.NewAPIEnv(t, st, api.APIConfig{})
			admin, alice := env.Client(env.Admin), env.Client(storetest.Token(t, st, "alice", false))

			_, err := alice.CreateTemplate(ctx, webTemplate())
			wantAPIError(t, "an owner's template create", err, 403)
			bad := webTemplate()
			bad.Command = "serve {{.nope}}"
			_, err = admin.CreateTemplate(ctx, bad)
			wantAPIError(t, "a placeholder naming no parameter", err, 400, "nope")
			if _, err := admin.CreateTemplate(ctx, webTemplate()); err != nil {
				t.Fatal(err)
			}
			_, err = admin.CreateTemplate(ctx, webTemplate())
			wantAPIError(t, "a second create of one name", err, 409)

			for _, c := range []struct {
				params map[string]string
				names  string
			}{
				{map[string]string{"port": "http"}, "port"},
				{map[string]string{"port": "99999", "size": "s"}, "port"},
				{map[string]string{"greet": "Hi!", "size": "s"}, "greet"},
				{map[string]string{"size": "xl"}, "size"},
				{map[string]string{}, "size"}, // required: no default
				{map[string]string{"size": "s", "colour": "red"}, "colour"},
			} {
				_, err := alice.Create(ctx, workspace.NewWorkspace{Name: "w", Template: "web", Params: c.params})
				wantAPIError(t, "create with "+strings.Join(mapPairs(c.params), ","), err, 400, c.names)
			}
			_, err = alice.Create(ctx, workspace.NewWorkspace{Name: "w", Template: "web", Command: "sh", Params: map[string]string{"size": "s"}})
			wantAPIError(t, "a template and a command", err, 400, "template")
			_, err = alice.Create(ctx, workspace.NewWorkspace{Name: "w", Template: "nope"})
			wantAPIError(t, "an unknown template", err, 404, "nope")

			w, err := alice.Create(ctx, workspace.NewWorkspace{Name: "w", Template: "web", Params: map[string]string{"port": "9000", "size": "m"}})
			if err != nil {
				t.Fatal(err)
			}
			ref := w.Spec.Template
			if w.Command != "serve --port 9000 --greet hello" || len(w.Env) != 1 || w.Env[0] != "GREETING=hello" || w.Pids != 100 ||
				ref == nil || ref.Name != "web" || ref.Version != 1 || ref.Params["port"] != "9000" || w.TemplateLatest != 0 {
				t.Fatalf("workspace from web v1: command %q env %v pids %d template %+v latest %d", w.Command, w.Env, w.Pids, ref, w.TemplateLatest)
			}

			v2 := webTemplate()
			v2.Command = "serve2 --port {{.port}}"
			if got, err := admin.UpdateTemplate(ctx, v2); err != nil || got.Version != 2 {
				t.Fatalf("update: %+v, %v; want version 2", got, err)
			}
			if got, err := alice.Get(ctx, "w"); err != nil || got.TemplateLatest != 2 {
				t.Fatalf("get after the update: template_latest %d, %v; want 2", got.TemplateLatest, err)
			}
			if all, err := alice.List(ctx); err != nil || len(all) != 1 || all[0].TemplateLatest != 2 {
				t.Fatalf("list after the update: %+v, %v; want template_latest 2", all, err)
			}
			_, err = alice.Update(ctx, "w", workspace.SpecUpdate{TemplateVersion: "latest", Command: &v2.Command})
			wantAPIError(t, "template_version with a command", err, 400, "template_version")
			moved, err := alice.Update(ctx, "w", workspace.SpecUpdate{TemplateVersion: "latest"})
			if err != nil || moved.Command != "serve2 --port 9000" || moved.Spec.Template.Version != 2 || moved.TemplateLatest != 0 {
				t.Fatalf("move to latest: command %q template %+v, %v", moved.Command, moved.Spec.Template, err)
			}
			back, err := alice.Update(ctx, "w", workspace.SpecUpdate{TemplateVersion: "1"})
			if err != nil || back.Command != "serve --port 9000 --greet hello" || back.Spec.Template.Version != 1 {
				t.Fatalf("move to 1: command %q template %+v, %v", back.Command, back.Spec.Template, err)
			}

			err = alice.DeleteTemplate(ctx, "web")
			wantAPIError(t, "an owner's template delete", err, 403)
			err = admin.DeleteTemplate(ctx, "web")
			wantAPIError(t, "delete in use", err, 409, "1 workspace")
			if _, err := alice.Delete(ctx, "w"); err != nil {
				t.Fatal(err)
			}
			if err := admin.DeleteTemplate(ctx, "web"); err != nil {
				t.Fatalf("delete once unused: %v", err)
			}
			if all, err := alice.Templates(ctx); err != nil || len(all) != 0 {
				t.Fatalf("templates after delete: %+v, %v", all, err)
			}
		})
	}
}

func mapPairs(m map[string]string) []string {
	var out []string
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	return out
}

// TestTemplateMoveKeepsShares: moving a workspace to another version of
// its template keeps the share levels its owner gave its apps (the app's
// port and any new app come from the version).
func TestTemplateMoveKeepsShares(t *testing.T) {
	ctx := t.Context()
	st := wstest.OpenStore(t, storetest.SQLiteDSN(t))
	env := wstest.NewAPIEnv(t, st, api.APIConfig{})
	admin, alice := env.Client(env.Admin), env.Client(storetest.Token(t, st, "alice", false))
	v1 := workspace.Template{Name: "site", Command: "serve", Spec: workspace.Spec{Apps: []workspace.App{{Name: "api", Port: 8081}}}}
	if _, err := admin.CreateTemplate(ctx, v1); err != nil {
		t.Fatal(err)
	}
	w, err := alice.Create(ctx, workspace.NewWorkspace{Name: "s", Template: "site"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := alice.Update(ctx, w.ID, workspace.SpecUpdate{AppSet: []workspace.App{
		{Name: "api", Port: 8081, Share: workspace.SharePublic}, {Name: workspace.DefaultApp, Share: workspace.ShareAuthenticated}}}); err != nil {
		t.Fatal(err)
	}
	v2 := v1
	v2.Spec.Apps = []workspace.App{{Name: "api", Port: 9091}, {Name: "docs", Port: 9000}}
	if _, err := admin.UpdateTemplate(ctx, v2); err != nil {
		t.Fatal(err)
	}
	moved, err := alice.Update(ctx, w.ID, workspace.SpecUpdate{TemplateVersion: "latest"})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]workspace.App{
		"api":                {Name: "api", Port: 9091, Share: workspace.SharePublic},
		"docs":               {Name: "docs", Port: 9000, Share: workspace.ShareOwner},
		workspace.DefaultApp: {Name: workspace.DefaultApp, Share: workspace.ShareAuthenticated},
	} {
		if got, ok := moved.Spec.App(name); !ok || got != want {
			t.Fatalf("app %s after the move: %+v (%v); want %+v (apps %+v)", name, got, ok, want, moved.Spec.Apps)
		}
	}
}
