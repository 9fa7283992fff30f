package dsort

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/dsort/dsortpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// startMaster runs a master on loopback and returns a client and a stop
// function that returns Run's error.
func startMaster(t *testing.T, cfg MasterConfig) (dsortpb.MasterClient, func() error) {
	t.Helper()
	addr, _, stop := runMaster(t, cfg)
	cc, err := dial(addr, creds{})
	if err != nil {
		t.Fatal(err)
	}
	return dsortpb.NewMasterClient(cc), func() error {
		cc.Close()
		return stop()
	}
}

// runMaster runs a master of cfg on 127.0.0.1 and returns its address, the
// master and a stop function that returns Run's error.
func runMaster(t *testing.T, cfg MasterConfig) (string, *Master, func() error) {
	t.Helper()
	addrCh := make(chan string, 1)
	cfg.Addr, cfg.OnListen = "127.0.0.1:0", func(a string) { addrCh <- a }
	cfg.ShutdownGrace = time.Millisecond
	m, err := NewMaster(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	return <-addrCh, m, func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(30 * time.Second):
			t.Fatal("master did not stop")
			return nil
		}
	}
}

func TestMasterRefusesExtraWorkersButTakesBackKnownOnes(t *testing.T) {
	c, stop := startMaster(t, MasterConfig{Workers: 1})
	ctx := t.Context()
	reg := func(addr, out string) (*dsortpb.RegisterReply, error) {
		return c.RegisterWorker(ctx, &dsortpb.RegisterRequest{Address: addr, InputDirs: []string{"/in"}, OutputDir: out})
	}
	first, err := reg("127.0.0.2:1000", "/out")
	if err != nil || first.GetIndex() != 0 || first.GetEpoch() != 1 || !first.GetNeedSample() {
		t.Fatalf("first registration: %v, %v", first, err)
	}
	if _, err := reg("127.0.0.3:1000", "/out"); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a registration beyond N: err = %v, want ResourceExhausted", err)
	}
	// Same host and dirs, new port: the worker restarted.
	again, err := reg("127.0.0.2:2000", "/out")
	if err != nil || again.GetIndex() != 0 || again.GetEpoch() != 2 {
		t.Fatalf("re-registration: %v, %v", again, err)
	}
	// The old process's heartbeats are told to stop.
	hb, err := c.Heartbeat(ctx, &dsortpb.HeartbeatRequest{JobId: first.GetJobId(), Index: 0, Epoch: 1})
	if err != nil || !hb.GetShouldAbort() {
		t.Fatalf("stale heartbeat: %v, %v", hb, err)
	}
	// Calls must carry the job's ID.
	_, err = c.SubmitSample(ctx, &dsortpb.SampleRequest{JobId: "other", Index: 0, Epoch: 2})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("wrong job ID: err = %v", err)
	}
	var ae *AbortError
	if err := stop(); !errors.As(err, &ae) || !errors.Is(err, ErrAborted) {
		t.Fatalf("Run after cancel = %v, want an AbortError", err)
	}
}

func TestTokenIsCheckedOnEveryCall(t *testing.T) {
	c, stop := startMaster(t, MasterConfig{Workers: 1, Token: "s3cret"})
	defer stop()
	ctx := t.Context()
	if _, err := c.GetJobStatus(ctx, &dsortpb.JobStatusRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("no token: err = %v", err)
	}
	bad := metadata.AppendToOutgoingContext(ctx, tokenKey, "wrong")
	if _, err := c.GetJobStatus(bad, &dsortpb.JobStatusRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("wrong token: err = %v", err)
	}
	good := metadata.AppendToOutgoingContext(ctx, tokenKey, "s3cret")
	js, err := c.GetJobStatus(good, &dsortpb.JobStatusRequest{})
	if err != nil || js.GetNumWorkers() != 1 || js.GetPhase() != "registering" {
		t.Fatalf("right token: %v, %v", js, err)
	}
}

// A completed worker's heartbeat is held until the job ends (a long poll),
// so the whole job exits as soon as its last worker completes; the
// heartbeat that first reports Completed is answered at once.
func TestCompletedWorkersHeartbeatWaitsForTheEnd(t *testing.T) {
	c, stop := startMaster(t, MasterConfig{Workers: 2, HeartbeatInterval: 10 * time.Second, LostAfter: time.Minute})
	ctx := t.Context()
	reg, err := c.RegisterWorker(ctx, &dsortpb.RegisterRequest{Address: "127.0.0.2:1000", InputDirs: []string{"/in"}, OutputDir: "/out"})
	if err != nil {
		t.Fatal(err)
	}
	hb := &dsortpb.HeartbeatRequest{JobId: reg.GetJobId(), Index: 0, Epoch: reg.GetEpoch(), State: stateToPB(Completed)}
	start := time.Now()
	if rep, err := c.Heartbeat(ctx, hb); err != nil || rep.GetShouldAbort() {
		t.Fatalf("first Completed report: %v, %v; want a plain reply", rep, err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("the first Completed report took %s: it must be answered at once", d)
	}
	type answer struct {
		rep *dsortpb.HeartbeatReply
		err error
	}
	held := make(chan answer, 1)
	go func() {
		rep, err := c.Heartbeat(ctx, hb)
		held <- answer{rep, err}
	}()
	select {
	case a := <-held:
		t.Fatalf("the job has not ended, yet a completed worker's heartbeat was answered: %v, %v", a.rep, a.err)
	case <-time.After(300 * time.Millisecond): // poll: the hold lasts a heartbeat interval (10 s)
	}
	// A completed worker's last report (it is shutting down) is answered
	// at once.
	last := proto.Clone(hb).(*dsortpb.HeartbeatRequest)
	last.Error = "interrupted"
	start = time.Now()
	if rep, err := c.Heartbeat(ctx, last); err != nil || rep.GetShouldAbort() {
		t.Fatalf("last report: %v, %v; want a plain reply", rep, err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("a completed worker's last report took %s: it must be answered at once", d)
	}
	// The other worker fails: the job ends, aborted.
	reg1, err := c.RegisterWorker(ctx, &dsortpb.RegisterRequest{Address: "127.0.0.3:1000", InputDirs: []string{"/in"}, OutputDir: "/out"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Heartbeat(ctx, &dsortpb.HeartbeatRequest{JobId: reg1.GetJobId(), Index: reg1.GetIndex(), Epoch: reg1.GetEpoch(),
		State: stateToPB(Failed), Error: "disk full"}); err != nil {
		t.Fatal(err)
	}
	select {
	case a := <-held:
		if a.err != nil || !a.rep.GetShouldAbort() || a.rep.GetJobSucceeded() {
			t.Fatalf("held heartbeat answered %v, %v; want the job's end (aborted)", a.rep, a.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the held heartbeat was not answered when the job ended")
	}
	if err := stop(); !errors.Is(err, ErrAborted) {
		t.Fatalf("Run = %v, want an abort", err)
	}
}

// A worker's reports can reach the master out of order: a heartbeat the
// worker gave up waiting for (an interrupt ended its context) may arrive
// after its last report, Failed. Within an epoch nothing follows Failed or
// Completed, so the late report leaves the worker where it was. (It used to
// take the worker back to WaitingForShuffleSignal before the master's loop
// saw the failure: the job then waited out the lost-worker timeout instead
// of aborting.) The master's loop does not run here, so nothing acts on
// the first report before the second arrives.
func TestLateReportDoesNotUndoATerminalState(t *testing.T) {
	for _, terminal := range []State{Failed, Completed} {
		t.Run(terminal.String(), func(t *testing.T) {
			m, err := NewMaster(MasterConfig{Workers: 2})
			if err != nil {
				t.Fatal(err)
			}
			reg, err := m.register(&dsortpb.RegisterRequest{Address: "127.0.0.2:1000", InputDirs: []string{"/in"}, OutputDir: "/out"})
			if err != nil {
				t.Fatal(err)
			}
			defer m.closeConns()
			report := func(st State, msg string) {
				t.Helper()
				req := &dsortpb.HeartbeatRequest{JobId: reg.GetJobId(), Index: 0, Epoch: reg.GetEpoch(), State: stateToPB(st), Error: msg}
				if _, err := m.heartbeat(t.Context(), req); err != nil {
					t.Fatal(err)
				}
			}
			report(terminal, "the last report")
			report(WaitingForShuffleSignal, "") // the late one
			m.mu.Lock()
			st, msg := m.members[0].state, m.members[0].errMsg
			m.mu.Unlock()
			if st != terminal || msg != "the last report" {
				t.Errorf("after the late report the worker is %v (%q), want %v (%q)", st, msg, terminal, "the last report")
			}
		})
	}
}

// Two workers of a job never write one S3 output: each commit deletes the
// partitions of its output that are not its own, so the second would
// delete the first's. The master refuses a new worker whose S3 prefix is
// another's, or one inside the other (a bucket's root holds them all), and
// takes sibling prefixes, another store, a restart of the same worker and
// local paths (a path names no one place: each worker locks its dir,
// TestTwoWorkersGivenOneOutputDirFail).
func TestTwoWorkersNeverShareAnS3Output(t *testing.T) {
	const s3 = "s3://bucket/%s?endpoint=http://127.0.0.1:9000"
	for _, tc := range []struct {
		name         string
		first, again *dsortpb.RegisterRequest
		refused      bool
	}{
		{"the same prefix", reg("127.0.0.2", "/in1", fmt.Sprintf(s3, "out")), reg("127.0.0.3", "/in2", fmt.Sprintf(s3, "out/")), true},
		{"a prefix inside the other", reg("127.0.0.2", "/in1", fmt.Sprintf(s3, "out")), reg("127.0.0.3", "/in2", fmt.Sprintf(s3, "out/w1")), true},
		{"the bucket's root", reg("127.0.0.2", "/in1", fmt.Sprintf(s3, "out/w0")), reg("127.0.0.3", "/in2", fmt.Sprintf(s3, "")), true},
		{"sibling prefixes", reg("127.0.0.2", "/in1", fmt.Sprintf(s3, "out/w0")), reg("127.0.0.3", "/in2", fmt.Sprintf(s3, "out/w1")), false},
		{"another store", reg("127.0.0.2", "/in1", fmt.Sprintf(s3, "out")), reg("127.0.0.3", "/in2", "s3://bucket/out?endpoint=http://127.0.0.9:9000"), false},
		{"a restart of the same worker", reg("127.0.0.2", "/in1", fmt.Sprintf(s3, "out")), reg("127.0.0.2", "/in1", fmt.Sprintf(s3, "out")), false},
		{"one local path", reg("127.0.0.2", "/in1", "/out"), reg("127.0.0.3", "/in2", "/out"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := NewMaster(MasterConfig{Workers: 2})
			if err != nil {
				t.Fatal(err)
			}
			defer m.closeConns()
			if _, err := m.register(tc.first); err != nil {
				t.Fatal(err)
			}
			_, err = m.register(tc.again)
			switch {
			case tc.refused && (!errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), "already writes its partitions")):
				t.Fatalf("second worker: %v, want it refused for writing worker 0's output", err)
			case !tc.refused && err != nil:
				t.Fatalf("second worker: %v, want it taken", err)
			}
		})
	}
}

func reg(host, in, out string) *dsortpb.RegisterRequest {
	return &dsortpb.RegisterRequest{Address: host + ":1000", InputDirs: []string{in}, OutputDir: out}
}
