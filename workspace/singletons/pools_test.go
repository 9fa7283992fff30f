package singletons

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/testutil"
	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/auth"
	"github.com/gantryhq/gantry/workspace/hints"
	"github.com/gantryhq/gantry/workspace/store/storetest"
	"github.com/gantryhq/gantry/workspace/wstest"
)

// adopter records the adoptions asked of it.
type adopter struct {
	mu   sync.Mutex
	done map[string]string
}

func (a *adopter) Adopt(_ context.Context, id, owner string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.done[id] = owner
	return nil
}

// TestPoolFiller: a pass fills a pool to its size and no further (a second
// pass adds nothing), refuses a template whose parameter has no default
// (draining it), and finishes the adoptions a claim left pending (a crash
// between the claim and the provider's adoption).
func TestPoolFiller(t *testing.T) {
	ctx := t.Context()
	st := wstest.OpenStore(t, storetest.SQLiteDSN(t))
	now := time.Now()
	def := "x"
	tp, err := st.Templates().Put(ctx, workspace.Template{Name: "t", Command: "serve {{.p}}",
		Params: []workspace.Param{{Name: "p", Default: &def}}}, true, now)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Pools().SetSize(ctx, "t", 3, now); err != nil {
		t.Fatal(err)
	}
	ad := &adopter{done: map[string]string{}}
	f := &PoolFiller{Pools: st.Pools(), Templates: st.Templates(), Adopter: ad}
	for range 2 {
		if err := f.Fill(ctx, now); err != nil {
			t.Fatal(err)
		}
	}
	if s, err := st.Pools().Status(ctx, "t", 1); err != nil || s.Starting != 3 {
		t.Fatalf("after two passes: %+v, %v; want 3 members", s, err)
	}
	members, _ := st.List(ctx)
	for _, m := range members {
		storetest.Force(t, st, m.ID, map[string]any{"observed_status": "RUNNING"})
	}
	n, _ := tp.Instantiate("w", nil)
	n.Owner, n.Desired = "alice", workspace.Running
	w, ok, err := st.Pools().Claim(ctx, n, auth.Quotas{}, workspace.PoolClaim{Adopt: true}, now)
	if err != nil || !ok {
		t.Fatalf("claim: %v, %v", ok, err)
	}
	if err := f.Fill(ctx, now); err != nil {
		t.Fatal(err)
	}
	if len(ad.done) != 0 {
		t.Fatalf("adopted at once: %v; want AdoptAfter (1 s) to pass first", ad.done)
	}
	if err := f.Fill(ctx, now.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if ad.done[w.ID] != "alice" {
		t.Fatalf("the pending adoption of %s: %v; want it handed to alice", w.ID, ad.done)
	}
	if p, err := st.Pools().PendingAdoptions(ctx); err != nil || len(p) != 0 {
		t.Fatalf("pending adoptions after the pass: %v, %v", p, err)
	}
	if s, _ := st.Pools().Status(ctx, "t", 1); s.Ready+s.Starting != 3 {
		t.Fatalf("after the claim and a pass: %+v; want refilled to 3", s)
	}

	if _, err := st.Templates().Put(ctx, workspace.Template{Name: "t", Command: "serve {{.p}}", Params: []workspace.Param{{Name: "p"}}}, false, now); err != nil {
		t.Fatal(err)
	}
	if err := f.Fill(ctx, now); err != nil {
		t.Fatal(err)
	}
	if s, _ := st.Pools().Status(ctx, "t", 2); s.Ready+s.Starting != 0 || s.Draining != 3 {
		t.Fatalf("a version whose parameter has no default: %+v; want the pool drained, none added", s)
	}
}

// TestPoolFillerWakesOnClaim: a claim's hint (hints.ChanPool) has the
// filler refill at once, not at its next pass (an hour away here).
func TestPoolFillerWakesOnClaim(t *testing.T) {
	ctx := t.Context()
	st := wstest.OpenStore(t, storetest.SQLiteDSN(t))
	now := time.Now()
	tp, err := st.Templates().Put(ctx, workspace.Template{Name: "t", Command: "serve"}, true, now)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Pools().SetSize(ctx, "t", 2, now); err != nil {
		t.Fatal(err)
	}
	bus := hints.NewLocal()
	f := &PoolFiller{Pools: st.Pools(), Templates: st.Templates(), Hints: bus, Interval: time.Hour}
	done := make(chan error, 1)
	run, stop := context.WithCancel(ctx)
	go func() { done <- f.Run(run) }()
	defer func() { stop(); <-done }()
	live := func() int {
		s, err := st.Pools().Status(ctx, "t", 1)
		if err != nil {
			t.Fatal(err)
		}
		return s.Ready + s.Starting
	}
	testutil.WaitFor(t, 10*time.Second, "the first pass to fill the pool", func() (bool, string) { n := live(); return n == 2, fmt.Sprint(n, " members") })
	members, _ := st.List(ctx)
	for _, m := range members {
		storetest.Force(t, st, m.ID, map[string]any{"observed_status": "RUNNING"})
	}
	n, _ := tp.Instantiate("w", nil)
	n.Owner, n.Desired = "alice", workspace.Running
	if _, ok, err := st.Pools().Claim(ctx, n, auth.Quotas{}, workspace.PoolClaim{}, now); !ok || err != nil {
		t.Fatalf("claim: %v, %v", ok, err)
	}
	if live() != 1 {
		t.Fatalf("after the claim: %d members; want 1", live())
	}
	if err := bus.Publish(ctx, hints.ChanPool, "t"); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "the pool refilled on the claim's hint", func() (bool, string) { n := live(); return n == 2, fmt.Sprint(n, " members") })
}
