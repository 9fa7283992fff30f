package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/api"
	wsclient "github.com/gantryhq/gantry/workspace/client"
	"github.com/gantryhq/gantry/workspace/provider/fake"
	"github.com/gantryhq/gantry/workspace/reconcile"
	"github.com/gantryhq/gantry/workspace/singletons"
	"github.com/gantryhq/gantry/workspace/store/storetest"
	"github.com/gantryhq/gantry/workspace/wstest"
)

// replica runs a server over dsn and fk (shared by the replicas of a
// test) and returns its base URL.
func replica(t *testing.T, dsn string, fk *fake.Provider) (string, string) {
	t.Helper()
	data := filepath.Join(t.TempDir(), "data")
	ready := make(chan string, 1)
	cfg := ServerConfig{Data: data, DB: dsn, Listen: "127.0.0.1:0", Container: fk, Storage: fk, Ready: func(a string) { ready <- a },
		Reconciler:   reconcile.Config{Interval: 200 * time.Millisecond, Lease: 3 * time.Second},
		Monitor:      singletons.MonitorConfig{Interval: 200 * time.Millisecond},
		PoolInterval: 50 * time.Millisecond, LeaderLease: 2 * time.Second}
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	srv, err := NewServer(ctx, cfg)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	var addr string
	select {
	case addr = <-ready:
	case err := <-done:
		t.Fatal(err)
	}
	token, _ := os.ReadFile(filepath.Join(data, AdminTokenFile)) // only the first replica writes one
	return "http://" + addr, strings.TrimSpace(string(token))
}

// TestPoolAcrossReplicas: two API replicas on one Postgres, a pool of 50,
// 500 creates at once spread over both replicas and 10 owners. Every
// create is served (201, then RUNNING), no workspace is handed out twice,
// and the pool's members that stay never number more than 50 at any
// sample (every 5 ms) — nor after the burst, when it is refilled to 50.
func TestPoolAcrossReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("two servers, 550 workspaces")
	}
	ctx := t.Context()
	dsn := storetest.PostgresDSN(t)
	fk := fake.New(2 * time.Millisecond)
	urlA, token := replica(t, dsn, fk)
	urlB, _ := replica(t, dsn, fk)
	admin := &wsclient.Client{Base: urlA, Token: token, HTTP: http.DefaultClient}
	if _, err := admin.CreateTemplate(ctx, workspace.Template{Name: "t", Command: "serve"}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.SetPool(ctx, "t", 50); err != nil {
		t.Fatal(err)
	}
	waitPool(t, admin, 50)

	db := storetest.DB(t, dsn)
	var most atomic.Int64
	sampling, stop := context.WithCancel(ctx)
	var sampler sync.WaitGroup
	sampler.Go(func() {
		for sampling.Err() == nil {
			var n int64
			if err := db.QueryRowContext(sampling, `SELECT COUNT(*) FROM workspaces WHERE pool IS NOT NULL
				AND desired_state <> 'DELETED' AND observed_status <> 'ERROR'`).Scan(&n); err == nil && n > most.Load() {
				most.Store(n)
			}
			select {
			case <-sampling.Done():
			case <-time.After(5 * time.Millisecond):
			}
		}
	})

	var clients []*wsclient.Client
	for i := range 10 {
		tok, err := admin.CreateToken(ctx, api.TokenRequest{Owner: fmt.Sprint("o", i)})
		if err != nil {
			t.Fatal(err)
		}
		base := []string{urlA, urlB}[i%2]
		clients = append(clients, &wsclient.Client{Base: base, Token: tok.Secret, HTTP: http.DefaultClient})
	}
	var mu sync.Mutex
	ids := map[string]string{}
	pooled := 0
	var wg sync.WaitGroup
	for i := range 500 {
		wg.Go(func() {
			c := clients[i%10]
			w, err := c.Create(ctx, workspace.NewWorkspace{Name: fmt.Sprint("w", i), Template: "t", Desired: workspace.Running})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				t.Errorf("create %d on %s: %v", i, c.Base, err)
			case ids[w.ID] != "":
				t.Errorf("workspace %s handed to %s and to w%d", w.ID, ids[w.ID], i)
			default:
				ids[w.ID] = fmt.Sprint("w", i)
				if w.Pooled {
					pooled++
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		stop()
		sampler.Wait()
		return
	}
	t.Logf("500 creates: %d from the pool, %d cold", pooled, 500-pooled)
	if pooled < 50 {
		t.Errorf("only %d creates from a pool of 50 ready members", pooled)
	}
	wstest.WaitFor(t, 120*time.Second, "all 500 RUNNING", func() (bool, string) {
		running := 0
		for _, c := range clients {
			all, err := c.List(ctx)
			if err != nil {
				return false, err.Error()
			}
			for _, w := range all {
				if w.ObservedStatus == workspace.Running && ids[w.ID] != "" {
					running++
				}
			}
		}
		return running == 500, fmt.Sprint(running, " running")
	})
	waitPool(t, admin, 50)
	stop()
	sampler.Wait()
	if m := most.Load(); m > 50 || m == 0 {
		t.Fatalf("at most %d members at a sample; want 50 at most (and some)", m)
	}
}

// waitPool waits until template t's pool has size ready members and no
// other.
func waitPool(t *testing.T, c *wsclient.Client, size int) {
	t.Helper()
	wstest.WaitFor(t, 60*time.Second, fmt.Sprint("pool t at ", size, " ready"), func() (bool, string) {
		st, err := c.Pool(t.Context(), "t")
		var ae *wsclient.APIError
		if errors.As(err, &ae) {
			return false, err.Error()
		}
		return err == nil && st.Ready == size && st.Starting == 0, fmt.Sprintf("%+v %v", st, err)
	})
}
