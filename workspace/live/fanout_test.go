package live

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"iter"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/testutil"
	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/auth"
	"github.com/gantryhq/gantry/workspace/store"
)

// fakeSource is a Source over a slice held in memory: what the hub tests
// need without a database.
type fakeSource struct {
	mu sync.Mutex
	ws []workspace.Workspace
}

func (f *fakeSource) States(context.Context) iter.Seq2[workspace.Workspace, error] {
	f.mu.Lock()
	ws := append([]workspace.Workspace(nil), f.ws...)
	f.mu.Unlock()
	return func(yield func(workspace.Workspace, error) bool) {
		for _, w := range ws {
			if !yield(w, nil) {
				return
			}
		}
	}
}

func (f *fakeSource) Get(ctx context.Context, id string) (workspace.Workspace, error) {
	return f.Lookup(ctx, id, "")
}

func (f *fakeSource) Lookup(_ context.Context, ref, owner string) (workspace.Workspace, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, w := range f.ws {
		if (w.ID == ref || w.Name == ref) && (owner == "" || owner == w.Owner) {
			return w, nil
		}
	}
	return workspace.Workspace{}, workspace.ErrNotFound
}

// as serves h to requests authenticated as p (what the API does before
// it hands a request to the live server).
func as(h http.Handler, p auth.Principal) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(auth.WithPrincipal(r.Context(), p)))
	})
}

var adminPrincipal = auth.Principal{TokenID: "t-admin", Owner: workspace.AdminOwner, Admin: true}

// fakeServer is a live server over src, synced, served over httptest to
// the admin.
func fakeServer(t *testing.T, src Source, keepAlive time.Duration) string {
	t.Helper()
	srv, err := NewServer(Config{Store: src, ResyncInterval: time.Hour, KeepAlive: keepAlive})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); srv.Run(ctx) }()
	hs := httptest.NewServer(as(srv, adminPrincipal))
	t.Cleanup(func() { hs.CloseClientConnections(); hs.Close(); cancel(); <-done })
	waitFor(t, "hub synced", srv.Hub().Synced)
	return hs.URL
}

// sseReader reads an SSE stream line by line, whatever a line's length.
type sseReader struct{ r *bufio.Reader }

// next returns the next line without its newline.
func (s sseReader) next() (string, error) {
	line, err := s.r.ReadString('\n')
	return strings.TrimSuffix(line, "\n"), err
}

func openStream(t *testing.T, ctx context.Context, url string) (sseReader, func()) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	return sseReader{bufio.NewReaderSize(resp.Body, 64<<10)}, func() { resp.Body.Close() }
}

// The initial snapshot of /events holds every workspace, not only as many
// as a subscriber's queue: 5,000 arrive before the first keep-alive, and
// the "synced" event after them counts them.
func TestSnapshotHoldsEveryWorkspace(t *testing.T) {
	const n = 5000
	src := &fakeSource{}
	now := time.Now().UTC()
	for i := range n {
		src.ws = append(src.ws, workspace.Workspace{ID: fmt.Sprintf("id-%05d", i), Name: fmt.Sprintf("w%05d", i), Owner: "alice",
			DesiredState: workspace.Standby, ObservedStatus: workspace.Standby, Operation: workspace.OpNone, CreatedAt: now, UpdatedAt: now})
	}
	url := fakeServer(t, src, 2*time.Second)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	rd, closeStream := openStream(t, ctx, url+"/events")
	defer closeStream()
	seen := map[string]bool{}
	for {
		line, err := rd.next()
		if err != nil {
			t.Fatalf("stream ended (%v) after %d of %d workspaces", err, len(seen), n)
		}
		if strings.HasPrefix(line, ": keep-alive") {
			t.Fatalf("the snapshot stopped at %d of %d workspaces (a keep-alive came next)", len(seen), n)
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		var e struct {
			Type, ID string
			Count    int
		}
		if err := json.Unmarshal([]byte(data), &e); err != nil {
			t.Fatal(err)
		}
		if e.Type == "state" {
			seen[e.ID] = true
		}
		if e.Type == "" { // synced
			if len(seen) != n || e.Count != n {
				t.Fatalf("synced after %d workspaces (it says %d); want %d", len(seen), e.Count, n)
			}
			return
		}
	}
}

// An event carries what the page shows, never the spec: a workspace with a
// 1 MiB command, 64 KiB of environment and a long error gives an event of
// a few hundred bytes that still has every field app.js reads.
func TestEventCarriesNoSpec(t *testing.T) {
	now := time.Now().UTC()
	env := []string{"BIG=" + strings.Repeat("e", 64<<10)}
	w := workspace.Workspace{ID: "id-big", Name: "big", Owner: "alice", Image: "img", Command: strings.Repeat("x", 1<<20),
		Spec: workspace.Spec{Env: env}, DesiredState: workspace.Running, ObservedStatus: workspace.Standby, Operation: workspace.OpStarting,
		ErrorCount: 2, ErrorInfo: &workspace.ErrorInfo{Reason: workspace.ReasonExited, Operation: workspace.OpStarting, ErrorCount: 2,
			LastError: "exit 3: " + strings.Repeat("l", 100<<10), Output: strings.Repeat("o", 100<<10), OccurredAt: now},
		CreatedAt: now, UpdatedAt: now}
	url := fakeServer(t, &fakeSource{ws: []workspace.Workspace{w}}, time.Minute)
	for _, path := range []string{"/events", "/workspaces/id-big/events", "/workspaces/big/events"} {
		rd, closeStream := openStream(t, t.Context(), url+path)
		var data string
		for data == "" {
			line, err := rd.next()
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			if d, ok := strings.CutPrefix(line, "data: "); ok {
				data = d
			}
		}
		closeStream()
		if len(data) > 4<<10 {
			t.Errorf("%s: an event of %d bytes; want at most 4 KiB (%.200s…)", path, len(data), data)
		}
		var e struct {
			ID        string         `json:"id"`
			Type      string         `json:"type"`
			Workspace map[string]any `json:"workspace"`
		}
		if err := json.Unmarshal([]byte(data), &e); err != nil {
			t.Fatal(err)
		}
		if e.ID != w.ID || e.Type != "state" {
			t.Errorf("%s: event %s %s, want state of %s", path, e.Type, e.ID, w.ID)
		}
		for _, k := range []string{"id", "name", "owner", "desired_state", "observed_status", "operation", "error_count", "created_at", "updated_at"} {
			if _, ok := e.Workspace[k]; !ok {
				t.Errorf("%s: the event's workspace lacks %q: %v", path, k, e.Workspace)
			}
		}
		for _, k := range []string{"command", "env", "image"} {
			if _, ok := e.Workspace[k]; ok {
				t.Errorf("%s: the event's workspace carries %q", path, k)
			}
		}
		info, _ := e.Workspace["error_info"].(map[string]any)
		for _, k := range []string{"reason", "operation", "is_terminal", "error_count", "last_error"} {
			if _, ok := info[k]; !ok {
				t.Errorf("%s: the event's error_info lacks %q: %v", path, k, info)
			}
		}
		if last, _ := info["last_error"].(string); !strings.HasPrefix(last, "exit 3: lll") {
			t.Errorf("%s: last_error %.40q…, want its start kept", path, last)
		}
	}
}

// fanoutEnv names the command size of TestFanoutServerChild's big workspace;
// set only when TestSSEFanoutBounded runs it as a child process.
const fanoutEnv = "GANTRY_LIVE_FANOUT_CHILD"

// fanoutWorkspaces is how many workspaces the child serves (one is "big").
const fanoutWorkspaces = 10

// TestFanoutServerChild is the server of TestSSEFanoutBounded, alone in its
// own process so that its peak RSS is the server's only: SQLite, the live
// server and its hub, /events for the admin; POST /change flips the big
// workspace's desired state; GET /rss answers "VmHWM VmRSS" in KiB.
func TestFanoutServerChild(t *testing.T) {
	size, ok := os.LookupEnv(fanoutEnv)
	if !ok {
		t.Skip("the server process of TestSSEFanoutBounded")
	}
	n, _ := strconv.Atoi(size)
	command := "exec sleep infinity"
	if n > 0 {
		command = "# " + strings.Repeat("x", n-2)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	st, err := store.Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "ws.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	big, err := st.Create(ctx, workspace.NewWorkspace{Name: "big", Command: command, Desired: workspace.Pending}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < fanoutWorkspaces; i++ {
		if _, err := st.Create(ctx, workspace.NewWorkspace{Name: fmt.Sprintf("small-%d", i), Command: "exec sleep infinity"}, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	srv, err := NewServer(Config{Store: st, ResyncInterval: 500 * time.Millisecond, KeepAlive: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); srv.Run(ctx) }()
	mux := http.NewServeMux()
	mux.Handle("GET /events", as(srv, adminPrincipal))
	var mu sync.Mutex
	desired := workspace.Pending
	mux.HandleFunc("POST /change", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		desired = map[workspace.Status]workspace.Status{workspace.Pending: workspace.Standby, workspace.Standby: workspace.Pending}[desired]
		if _, err := st.SetDesired(r.Context(), big.ID, desired, time.Now()); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
		srv.Hub().Poke(r.Context(), big.ID)
	})
	mux.HandleFunc("GET /rss", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, procStatus("VmHWM")+" "+procStatus("VmRSS"))
	})
	hs := httptest.NewServer(mux)
	waitFor(t, "hub synced", srv.Hub().Synced)
	fmt.Printf("fanout-url %s\n", hs.URL)
	io.Copy(io.Discard, os.Stdin) // until the parent is done
	hs.CloseClientConnections()
	hs.Close()
	cancel()
	<-done
}

// procStatus is a field of /proc/self/status in KiB ("0" if absent).
func procStatus(field string) string {
	b, _ := os.ReadFile("/proc/self/status")
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strings.TrimSuffix(strings.TrimSpace(v), " kB")
		}
	}
	return "0"
}

// fanoutResult is what one run of the fan-out measured.
type fanoutResult struct {
	bytes        int64 // received by all subscribers, SSE bodies
	peakKiB      int64 // the server process's VmHWM
	events       int   // per subscriber
	subscribers  int
	commandBytes int
	sinceConnect time.Duration
	serverRSSKiB int64 // VmRSS at the end
}

// SSE with 2,000 subscribers and a workspace whose command is as long as a
// command may be (workspace.MaxCommandBytes, 120 KiB) costs
// the server about what it costs without that command: bytes sent and peak
// RSS within 2x. Each run is its own server process (TestFanoutServerChild):
// every subscriber gets the snapshot of 10 workspaces, then 5 changes of the
// big one.
func TestSSEFanoutBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("2,000 connections and two server processes")
	}
	const subscribers, changes = 2000, 5
	small := runFanout(t, 0, subscribers, changes, 1<<62)
	big := runFanout(t, workspace.MaxCommandBytes, subscribers, changes, 2*small.bytes)
	for _, r := range []fanoutResult{small, big} {
		t.Logf("command %7d B, %d subscribers × %d events: %10d bytes sent (%.0f per event), server peak RSS %6d KiB (end %d KiB), %v",
			r.commandBytes, r.subscribers, r.events, r.bytes, float64(r.bytes)/float64(r.subscribers*r.events), r.peakKiB, r.serverRSSKiB, r.sinceConnect.Round(time.Millisecond))
	}
	if big.bytes > 2*small.bytes {
		t.Errorf("bytes sent: %d with the longest command, %d without; want within 2x", big.bytes, small.bytes)
	}
	if big.peakKiB > 2*small.peakKiB {
		t.Errorf("server peak RSS: %d KiB with the longest command, %d KiB without; want within 2x", big.peakKiB, small.peakKiB)
	}
}

// fanoutChild starts TestFanoutServerChild with a command of commandBytes
// and returns its URL; stop ends it.
func fanoutChild(t *testing.T, ctx context.Context, commandBytes int) (url string, stop func()) {
	t.Helper()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestFanoutServerChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), fanoutEnv+"="+strconv.Itoa(commandBytes))
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stop = func() {
		stdin.Close()
		if err := cmd.Wait(); err != nil {
			t.Errorf("server process: %v\n%s", err, stderr.String())
		}
	}
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if u, ok := strings.CutPrefix(sc.Text(), "fanout-url "); ok {
			go io.Copy(io.Discard, stdout)
			return u, stop
		}
	}
	stop()
	t.Fatalf("the server process printed no URL")
	return "", nil
}

// runFanout measures one server process: subscribers streams of /events
// each get the snapshot and changes events; it fails as soon as the
// subscribers together received more than budget bytes.
func runFanout(t *testing.T, commandBytes, subscribers, changes int, budget int64) fanoutResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	url, stop := fanoutChild(t, ctx, commandBytes)
	defer stop()
	streamCtx, cancelStreams := context.WithCancel(ctx)
	var total atomic.Int64
	counts := make([]atomic.Int32, subscribers)
	tr := &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: subscribers}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	var wg sync.WaitGroup
	defer func() { cancelStreams(); wg.Wait() }()
	start := time.Now()
	for i := range subscribers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			countStream(streamCtx, hc, url+"/events", &total, &counts[i])
		}()
	}
	want := fanoutWorkspaces
	waitAll := func(what string) {
		testutil.WaitFor(t, 2*time.Minute, what, func() (bool, string) {
			if got := total.Load(); got > budget {
				t.Fatalf("%s: subscribers received %d bytes, over the budget of %d", what, got, budget)
			}
			for i := range counts {
				if int(counts[i].Load()) < want {
					return false, fmt.Sprintf("subscriber %d has %d of %d events, %d bytes in all", i, counts[i].Load(), want, total.Load())
				}
			}
			return true, ""
		})
	}
	waitAll("every subscriber's snapshot")
	for range changes {
		resp, err := hc.Post(url+"/change", "", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		want++
		waitAll("every subscriber's change event")
	}
	took := time.Since(start)
	resp, err := hc.Get(url + "/rss")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var peak, rss int64
	fmt.Sscan(string(b), &peak, &rss)
	return fanoutResult{bytes: total.Load(), peakKiB: peak, serverRSSKiB: rss, events: want, subscribers: subscribers,
		commandBytes: commandBytes, sinceConnect: took}
}

// countStream reads one SSE stream to its end, adding the bytes read to
// total and each "state" event to events.
func countStream(ctx context.Context, hc *http.Client, url string, total *atomic.Int64, events *atomic.Int32) {
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	resp, err := hc.Do(req)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	rd := bufio.NewReaderSize(resp.Body, 4<<10)
	lineStart := true
	for {
		chunk, err := rd.ReadSlice('\n')
		total.Add(int64(len(chunk)))
		if lineStart && bytes.HasPrefix(chunk, []byte("event: state\n")) {
			events.Add(1)
		}
		lineStart = err == nil
		if err != nil && err != bufio.ErrBufferFull {
			return
		}
	}
}
