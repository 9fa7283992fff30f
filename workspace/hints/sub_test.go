package hints

import (
	"slices"
	"testing"
)

// TestPendingSetMergesHints: an id published again while still pending is
// one hint; once taken, it is pending again when published again.
func TestPendingSetMergesHints(t *testing.T) {
	s := newPendingSet()
	for _, id := range []string{"a", "b", "a", "c", "b"} {
		s.add(id)
	}
	if got := s.take(); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("take = %q, want [a b c]", got)
	}
	s.add("a")
	if got := s.take(); !slices.Equal(got, []string{"a"}) || len(s.pending) != 0 {
		t.Fatalf("take = %q (pending %v), want [a]", got, s.pending)
	}
}
