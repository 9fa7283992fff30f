package dsort

import (
	"testing"

	"github.com/gantryhq/gantry/dsort/dsortpb"
	"github.com/gantryhq/gantry/record"
	"github.com/google/go-cmp/cmp"
)

func TestChunkWriterCutsAtOneMiB(t *testing.T) {
	var sizes []int
	var offs []int64
	cw := &chunkWriter{buf: make([]byte, 0, chunkBytes), send: func(c *dsortpb.ShuffleDataChunk) error {
		sizes, offs = append(sizes, len(c.GetData())), append(offs, c.GetOffset())
		return nil
	}}
	data := make([]byte, 3*chunkBytes+5*record.Size)
	for i := 0; i < len(data); i += 7 * record.Size {
		cw.Write(data[i:min(i+7*record.Size, len(data))])
	}
	cw.flush()
	if d := cmp.Diff([]int{chunkBytes, chunkBytes, chunkBytes, 5 * record.Size}, sizes); d != "" {
		t.Fatal(d)
	}
	if d := cmp.Diff([]int64{0, chunkBytes, 2 * chunkBytes, 3 * chunkBytes}, offs); d != "" {
		t.Fatal(d)
	}
	if chunkBytes > 1<<20 || chunkBytes%record.Size != 0 {
		t.Fatalf("chunkBytes = %d", chunkBytes)
	}
}
