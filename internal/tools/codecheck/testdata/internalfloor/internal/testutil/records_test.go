package testutil

import (
	"testing"

	"example.com/floor/record"
)

func TestSize(t *testing.T) {
	if record.Size != 100 {
		t.Fatal(record.Size)
	}
}
