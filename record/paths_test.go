package record

import "testing"

func TestHiddenObject(t *testing.T) {
	for name, want := range map[string]bool{
		"": true, "dir/": true, DoneMarker: true, ".gantry-dsort-j.partition.1": true, "a/.b/c": true,
		"partition.0": false, "in/obj001": false, "a.b/c.d": false,
	} {
		if got := HiddenObject(name); got != want {
			t.Errorf("HiddenObject(%q) = %v, want %v", name, got, want)
		}
	}
}
