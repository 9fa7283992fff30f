package dsort

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gantryhq/gantry/dsort/dsortpb"
	"github.com/gantryhq/gantry/internal/clock"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// fakeHeartbeater returns a heartbeater on a fake clock whose master never
// answers, and a channel that gets a value at every heartbeat sent.
func fakeHeartbeater(fake *clock.Fake, interval, timeout time.Duration) (*heartbeater, <-chan struct{}) {
	sent := make(chan struct{}, 100)
	return &heartbeater{
		clock: fake, interval: interval, timeout: timeout,
		send: func(ctx context.Context, _ time.Duration) (State, *dsortpb.HeartbeatReply, error) {
			sent <- struct{}{}
			return Sorting, nil, status.Error(codes.Unavailable, "master down")
		},
		lostErr: func(last error) error { return errors.Join(ErrMasterLost, last) },
		fault:   func(context.Context, string) {},
		end:     make(chan *dsortpb.HeartbeatReply, 1), lost: make(chan error, 1),
	}, sent
}

// The worker gives up on a master that stays unreachable for longer than
// MasterTimeout, and not before; its clock is fake, so the test moves time
// instead of waiting for it.
func TestHeartbeatsGiveUpOnALostMaster(t *testing.T) {
	fake := clock.NewFake(time.Unix(1_000_000, 0))
	h, sent := fakeHeartbeater(fake, time.Second, 5*time.Second)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan struct{})
	go func() { defer close(done); h.run(ctx) }()
	// waitSent waits for the next heartbeat; the loop declares the master
	// lost, if it does, right after a heartbeat fails.
	waitSent := func(silence time.Duration) {
		t.Helper()
		select {
		case <-sent:
		case err := <-h.lost:
			t.Fatalf("declared lost before %s of silence: %v", silence, err)
		case <-time.After(10 * time.Second):
			t.Fatalf("no heartbeat sent after %s of silence", silence)
		}
	}
	waitSent(0)
	for i := range 4 { // 4s of silence: each interval brings one more try
		fake.Advance(time.Second)
		waitSent(time.Duration(i+1) * time.Second)
	}
	fake.Advance(2 * time.Second)
	select { // the sixth heartbeat; then the master is lost
	case <-sent:
	case <-time.After(10 * time.Second):
		t.Fatal("no heartbeat sent after 6s of silence")
	}
	select {
	case err := <-h.lost:
		if !errors.Is(err, ErrMasterLost) {
			t.Fatalf("lost = %v, want ErrMasterLost", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the master was not declared lost after 6s of silence with a 5s MasterTimeout")
	}
	<-done
}
