package progress

import (
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/testutil"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestLinesThenSummary(t *testing.T) {
	old := LineInterval
	LineInterval = time.Millisecond
	defer func() { LineInterval = old }()
	var out testutil.Buffer
	r := Start(&out, "sort", 2000, Bytes)
	r.Add(1000)
	deadline := time.After(5 * time.Second)
	for !strings.Contains(out.String(), "50.0%") {
		select {
		case <-deadline:
			t.Fatalf("no progress line after 5 s; output %q", out.String())
		case <-time.After(time.Millisecond):
		}
	}
	r.Add(1000)
	r.Finish()
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	last := lines[len(lines)-1]
	if !strings.HasPrefix(last, "sort: 2.0 kB in ") || !strings.Contains(last, "MB/s") {
		t.Errorf("summary line %q, want \"sort: 2.0 kB in … (… MB/s)\"", last)
	}
	if r.Done() != 2000 {
		t.Errorf("Done() = %d, want 2000", r.Done())
	}
}

func TestNilWriterAndAbort(t *testing.T) {
	r := Start(nil, "x", 10, Records)
	r.Add(5)
	r.Finish() // no writer: nothing printed, no panic
	var out testutil.Buffer
	r = Start(&out, "x", 10, Records)
	r.Abort()
	r.Abort() // safe twice
	if out.String() != "" {
		t.Errorf("Abort printed %q", out.String())
	}
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 999: "999 B", 1500: "1.5 kB", 2_500_000: "2.5 MB", 1_000_000_000: "1.00 GB"} {
		if got := FormatBytes(n); got != want {
			t.Errorf("FormatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}
