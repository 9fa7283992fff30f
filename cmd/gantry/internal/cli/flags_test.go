package cli

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestExpandMultiValueFlags(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{"sort local -I a b c -O out", "sort local -I a -I b -I c -O out"},
		{"sort worker 10.0.0.1:30040 -I in1 in2 -O out --memory 1G", "sort worker 10.0.0.1:30040 -I in1 -I in2 -O out --memory 1G"},
		{"sort local --input a b -O o", "sort local --input a --input b -O o"},
		{"sort local -O o -I a", "sort local -O o -I a"},
		{"sort local -I -O o", "sort local -I -O o"}, // no value: pflag reports it
		{"sort local -I a -I b", "sort local -I a -I b"},
		{"x -- -I a b", "x -- -I a b"},
	}
	for _, tc := range tests {
		got := strings.Join(expandMultiValueFlags(strings.Fields(tc.in)), " ")
		if got != tc.want {
			t.Errorf("expand(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestParseSize(t *testing.T) {
	good := map[string]int64{
		"0": 0, "100": 100, "1k": 1 << 10, "1K": 1 << 10, "256MiB": 256 << 20, "256M": 256 << 20,
		"1G": 1 << 30, "2GiB": 2 << 30, "1.5G": 3 << 29, "1GB": 1e9, "5MB": 5e6, "1T": 1 << 40, " 64 MiB ": 64 << 20,
	}
	for in, want := range good {
		got, err := parseSize(in)
		if err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "lots", "-1G", "1Q", "G", "1.2.3M", "1e3"} {
		if n, err := parseSize(in); err == nil {
			t.Errorf("parseSize(%q) = %d, want an error", in, n)
		}
	}
}

func TestSizeValueRoundTrip(t *testing.T) {
	for _, n := range []int64{0, 100, 1 << 10, 256 << 20, 3 << 30, 123456789} {
		var v int64 = n
		s := sizeValue{&v}.String()
		var back int64
		if err := (sizeValue{&back}).Set(s); err != nil || back != n {
			t.Errorf("%d → %q → %d, %v", n, s, back, err)
		}
	}
}

// FuzzParseSize: any input either fails cleanly or gives a non-negative size
// that survives a String/Set round trip.
func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"256MiB", "1.5G", "0", "1e9", "-1", "9999999999999T", "1kib", "NaN", "Inf"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := parseSize(s)
		if err != nil {
			return
		}
		if n < 0 {
			t.Fatalf("parseSize(%q) = %d < 0", s, n)
		}
		var back int64
		if err := (sizeValue{&back}).Set(sizeValue{&n}.String()); err != nil || back != n {
			t.Fatalf("round trip of %d (from %q): %d, %v", n, s, back, err)
		}
	})
}

func TestExpandMultiValueFlagsKeepsOtherArgs(t *testing.T) {
	in := []string{"valsort", "-q", "a", "b"}
	if diff := cmp.Diff(in, expandMultiValueFlags(in)); diff != "" {
		t.Errorf("args without -I changed (-want +got):\n%s", diff)
	}
}

// A word that is no subcommand of a group fails (exit 1, naming it) at any
// depth, as at the root; a group alone prints its help and succeeds.
func TestUnknownSubcommandsFail(t *testing.T) {
	for _, args := range [][]string{{"sched", "nosuch"}, {"queue", "nosuch"}, {"queue", "tasks", "nosuch"}, {"ws", "nosuch"}, {"sort", "nosuch"}, {"nosuch"}} {
		code, _, stderr := runRecordCmd(t, args...)
		if code != 1 || !strings.Contains(stderr, `unknown command "nosuch"`) {
			t.Errorf("gantry %s: exit %d, stderr %q; want 1 naming the word", strings.Join(args, " "), code, stderr)
		}
	}
	if code, stdout, _ := runRecordCmd(t, "sched"); code != 0 || !strings.Contains(stdout, "bench") {
		t.Errorf("gantry sched: exit %d, %q; want its help", code, stdout)
	}
}

// sched bench refuses a scale that is not a finite factor within bounds
// (NaN and Inf ran each workload once and printed verdicts) and an idle
// window too short to measure.
func TestSchedBenchBounds(t *testing.T) {
	for _, a := range [][]string{{"--scale", "NaN"}, {"--scale", "Inf"}, {"--scale", "1e300"}, {"--idle", "1ns"}} {
		code, _, stderr := runRecordCmd(t, append([]string{"sched", "bench", "--runs", "1"}, a...)...)
		if code != 1 || !strings.Contains(stderr, a[0]) {
			t.Errorf("sched bench %v: exit %d, stderr %q; want 1 naming %s", a, code, stderr, a[0])
		}
	}
}
