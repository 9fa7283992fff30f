package workspace

import (
	"bufio"
	"os"
	"strings"
	"testing"
)

// TestSupersededTable checks Superseded, the rule that lets a change of
// desired state take over from an operation in flight, against the cases
// in testdata/superseded.txt; then, over every input, that it never gives
// up an operation whose call runs or that waits for observation (the
// seed's "finish, then plan again"), nor DELETING, nor anything for a state
// its plan still needs.
func TestSupersededTable(t *testing.T) {
	f, err := os.Open("testdata/superseded.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	phases := map[string]OpPhase{}
	for p := PhaseCalling; p <= PhaseFailed; p++ {
		phases[p.String()] = p
	}
	yesNo := map[string]bool{"yes": true, "no": false}
	sc := bufio.NewScanner(f)
	cases := 0
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fl := strings.Fields(line)
		phase, okPhase := phases[fl[1]]
		archive, okA := yesNo[fl[4]]
		committed, okC := yesNo[fl[5]]
		want, okW := yesNo[fl[len(fl)-1]]
		if len(fl) != 8 || fl[6] != "->" || !okPhase || !okA || !okC || !okW {
			t.Fatalf("testdata/superseded.txt:%d: %q: want `op phase observed desired yes|no yes|no -> yes|no`", n, line)
		}
		op, observed, desired := Operation(fl[0]), Status(fl[2]), Status(fl[3])
		if got := Superseded(op, phase, observed, desired, archive, committed); got != want {
			t.Errorf("testdata/superseded.txt:%d: Superseded(%s, %s, observed %s, desired %s, archive %v, committed %v) = %v, want %v",
				n, op, phase, observed, desired, archive, committed, got, want)
		}
		cases++
	}
	if err := sc.Err(); err != nil || cases < 30 {
		t.Fatalf("read %d cases: %v", cases, err)
	}

	ops := []Operation{OpProvisioning, OpRestoring, OpStarting, OpStopping, OpArchiving, OpDeleting}
	statuses := []Status{Pending, Standby, Running, Error}
	for _, op := range ops {
		for p := PhaseCalling; p <= PhaseFailed; p++ {
			for _, obs := range statuses {
				for _, des := range []Status{Pending, Standby, Running, Deleted} {
					for _, archive := range []bool{false, true} {
						if !Superseded(op, p, obs, des, archive, false) {
							continue
						}
						switch {
						case p == PhaseCalling || p == PhaseExecuted:
							t.Errorf("%s %s (observed %s, desired %s) superseded: an operation in flight must finish", op, p, obs, des)
						case op == OpDeleting:
							t.Errorf("DELETING %s superseded by %s", p, des)
						case des != Deleted && (obs == Error || Plan(obs, des, archive) == op || p == PhaseFailed):
							t.Errorf("%s %s (observed %s, desired %s) superseded though the plan still needs it or ERROR holds it", op, p, obs, des)
						}
					}
				}
			}
		}
	}
}
