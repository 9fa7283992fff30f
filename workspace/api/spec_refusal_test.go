package api_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/api"
	"github.com/gantryhq/gantry/workspace/wstest"
)

// A spec no provider could start is 400 on create and on PATCH, and
// nothing is written: a NUL in the environment, the command or the image,
// a memory near 2^63, absurd cpus or pids (before, each was created with
// 201 and retried until ERROR).
func TestAPIRefusesSpecsThatCannotStart(t *testing.T) {
	st := wstest.OpenStore(t, wstest.Backends[0].DSN(t))
	env := wstest.NewAPIEnv(t, st, api.APIConfig{})
	w, err := st.Create(t.Context(), workspace.NewWorkspace{Name: "valid"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	before, _ := st.List(t.Context())
	bodies := map[string]string{
		"env":     `"env":["X=a\u0000b"]`,
		"command": `"command":"echo a\u0000b"`,
		"image":   `"image":"alpine\u0000"`,
		"memory":  `"memory":9223372036854775807`,
		"cpus":    `"cpus":1e300`,
		"pids":    `"pids":9223372036854775807`,
	}
	for field, body := range bodies {
		for _, req := range []struct{ method, path, body string }{
			{"POST", "/v1/workspaces", `{"name":"bad-` + field + `",` + body + `}`},
			{"PATCH", "/v1/workspaces/" + w.ID, `{` + body + `}`},
		} {
			r, _ := http.NewRequest(req.method, env.Srv.URL+req.path, strings.NewReader(req.body))
			r.Header.Set("Authorization", "Bearer "+env.Admin)
			resp, err := http.DefaultClient.Do(r)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), field) {
				t.Errorf("%s %s %s: %d %s; want 400 naming %s", req.method, req.path, req.body, resp.StatusCode, b, field)
			}
		}
	}
	after, _ := st.List(t.Context())
	if d := cmp.Diff(before, after); d != "" {
		t.Errorf("refused requests changed the store (-before +after):\n%s", d)
	}
}
