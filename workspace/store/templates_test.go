package store_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/store"
	"github.com/gantryhq/gantry/workspace/store/storetest"
)

func pyTemplate(cmd string) workspace.Template {
	def := "8000"
	return workspace.Template{Name: "py_web", Image: "python:3", Command: cmd,
		Spec:   workspace.Spec{Env: []string{"APP_PORT={{.port}}"}, CPUs: 1},
		Params: []workspace.Param{{Name: "port", Type: "int", Default: &def}}}
}

// TestTemplateVersions: a create is version 1 and refused twice, each
// update a new version; Get reads any version with the latest beside it;
// a workspace made from a template records its version, and the template
// cannot be deleted while the workspace lives.
func TestTemplateVersions(t *testing.T) {
	for _, b := range storetest.Backends {
		t.Run(b.Name, func(t *testing.T) {
			ctx := t.Context()
			st := storetest.Open(t, b.DSN(t))
			ts := st.Templates()
			now := time.Now()
			v1, err := ts.Put(ctx, pyTemplate("serve --port {{.port}}"), true, now)
			if err != nil || v1.Version != 1 {
				t.Fatalf("first put: %+v, %v; want version 1", v1, err)
			}
			if _, err := ts.Put(ctx, pyTemplate("x"), true, now); !errors.Is(err, workspace.ErrNameTaken) {
				t.Fatalf("second create: %v; want ErrNameTaken", err)
			}
			if _, err := ts.Put(ctx, workspace.Template{Name: "nope"}, false, now); !errors.Is(err, workspace.ErrNotFound) {
				t.Fatalf("update of an unknown template: %v; want ErrNotFound", err)
			}
			v2, err := ts.Put(ctx, pyTemplate("serve2 --port {{.port}}"), false, now)
			if err != nil || v2.Version != 2 {
				t.Fatalf("update: %+v, %v; want version 2", v2, err)
			}
			got, err := ts.Get(ctx, "py_web", 1)
			if err != nil || got.Command != "serve --port {{.port}}" || got.Latest != 2 || got.Version != 1 {
				t.Fatalf("Get v1: %+v, %v", got, err)
			}
			if got, err := ts.Get(ctx, "py_web", 0); err != nil || got.Version != 2 {
				t.Fatalf("Get latest: %+v, %v", got, err)
			}
			if _, err := ts.Get(ctx, "py_web", 3); !errors.Is(err, workspace.ErrNotFound) {
				t.Fatalf("Get v3: %v; want ErrNotFound", err)
			}
			if all, err := ts.Versions(ctx, "py_web"); err != nil || len(all) != 2 || all[0].Version != 2 {
				t.Fatalf("Versions: %+v, %v", all, err)
			}
			n, err := v1.Instantiate("web", map[string]string{"port": "9000"})
			if err != nil {
				t.Fatal(err)
			}
			n.Owner = "alice"
			w, err := st.Create(ctx, n, now)
			if err != nil {
				t.Fatal(err)
			}
			if w.Spec.Template == nil || w.Spec.Template.Version != 1 || w.Command != "serve --port 9000" || w.Env[0] != "APP_PORT=9000" {
				t.Fatalf("workspace from v1: %+v (template %+v)", w, w.Spec.Template)
			}
			if err := ts.Delete(ctx, "py_web"); !errors.Is(err, workspace.ErrConflict) {
				t.Fatalf("delete in use: %v; want ErrConflict", err)
			}
			if _, err := st.SetDesired(ctx, w.ID, workspace.Deleted, now); err != nil {
				t.Fatal(err)
			}
			if err := ts.Delete(ctx, "py_web"); err != nil {
				t.Fatalf("delete once unused: %v", err)
			}
			if list, err := ts.List(ctx); err != nil || len(list) != 0 {
				t.Fatalf("List after delete: %+v, %v", list, err)
			}
		})
	}
}

// TestTemplateDeleteRacesCreate: creates from a template and its delete,
// concurrent on two stores of one database, never leave a live workspace
// naming a template that is gone.
func TestTemplateDeleteRacesCreate(t *testing.T) {
	for _, b := range storetest.Backends {
		t.Run(b.Name, func(t *testing.T) {
			ctx := t.Context()
			dsn := b.DSN(t)
			stores := []*store.Store{storetest.Open(t, dsn), storetest.Open(t, dsn)}
			for round := range 5 {
				tp := pyTemplate("serve")
				tp.Name = fmt.Sprint("t", round)
				v, err := stores[0].Templates().Put(ctx, tp, true, time.Now())
				if err != nil {
					t.Fatal(err)
				}
				var wg sync.WaitGroup
				created := make([]bool, 8)
				for i := range created {
					wg.Go(func() {
						n, _ := v.Instantiate(fmt.Sprintf("r%d-%d", round, i), nil)
						_, err := stores[i%2].Create(ctx, n, time.Now())
						created[i] = err == nil
					})
				}
				var delErr error
				wg.Go(func() { delErr = stores[1].Templates().Delete(ctx, tp.Name) })
				wg.Wait()
				users, err := stores[0].Templates().InUse(ctx, tp.Name)
				if err != nil {
					t.Fatal(err)
				}
				_, getErr := stores[0].Templates().Get(ctx, tp.Name, 0)
				if users > 0 && getErr != nil {
					t.Fatalf("round %d: %d workspaces name template %s, which is gone (delete: %v)", round, users, tp.Name, delErr)
				}
				if delErr == nil && users != 0 {
					t.Fatalf("round %d: delete succeeded with %d users", round, users)
				}
			}
		})
	}
}
