package dsort

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/dsort/dsortpb"
	"github.com/gantryhq/gantry/internal/clock"
	"github.com/gantryhq/gantry/internal/testutil"
)

// A worker silent past LostAfter is reported lost but kept; one silent past
// RejoinTimeout aborts the job. The master's clock is fake: the test moves
// time instead of waiting for it.
func TestMasterHeartbeatTimeouts(t *testing.T) {
	fake := clock.NewFake(time.Unix(1_000_000, 0))
	addrCh := make(chan string, 1)
	m, err := NewMaster(MasterConfig{Workers: 1, Clock: fake, LostAfter: 5 * time.Second, RejoinTimeout: time.Minute,
		ShutdownGrace: time.Millisecond, OnListen: func(a string) { addrCh <- a }})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- m.Run(t.Context()) }()
	cc, err := dial(<-addrCh, creds{})
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	c := dsortpb.NewMasterClient(cc)
	reg, err := c.RegisterWorker(t.Context(), &dsortpb.RegisterRequest{Address: "127.0.0.2:1000", InputDirs: []string{"/in"}, OutputDir: "/out"})
	if err != nil {
		t.Fatal(err)
	}
	fake.BlockUntil(1) // the control loop's ticker
	lost := func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.members[0].lost
	}

	fake.Advance(4 * time.Second)
	m.step(t.Context(), fake.Now()) // what the loop does on its tick, done here to check a non-event
	if st := m.Status(); !st[0].Alive || lost() {
		t.Fatalf("silent for 4s of a 5s LostAfter: %+v, lost %v", st[0], lost())
	}
	fake.Advance(2 * time.Second)
	testutil.WaitFor(t, 10*time.Second, "the worker marked lost", func() (bool, string) {
		return lost(), m.Status()[0].State.String()
	})
	if m.Status()[0].Alive {
		t.Fatal("a lost worker is reported alive")
	}

	// It comes back: no longer lost, and its silence counts from now.
	hb := &dsortpb.HeartbeatRequest{JobId: reg.GetJobId(), Index: 0, Epoch: reg.GetEpoch(), State: stateToPB(Sampling)}
	if _, err := c.Heartbeat(t.Context(), hb); err != nil {
		t.Fatal(err)
	}
	if lost() || !m.Status()[0].Alive {
		t.Fatal("a worker that reported again is still lost")
	}
	fake.Advance(50 * time.Second)
	m.step(t.Context(), fake.Now())
	if p := m.Job().Phase; p.Ended() {
		t.Fatalf("the job is %s after 50s of silence with a 1m RejoinTimeout", p)
	}
	fake.Advance(11 * time.Second)
	select {
	case err := <-done:
		var ae *AbortError
		if !errors.As(err, &ae) || !strings.Contains(ae.Reason, "did not come back") {
			t.Fatalf("Run = %v, want an abort for a worker that did not come back", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the job did not abort after the rejoin timeout")
	}
}
