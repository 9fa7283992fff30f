package dsort

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/gantryhq/gantry/dsort/dsortpb"
	"github.com/gantryhq/gantry/extsort"
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

// The piece server refuses until the sort is done, then serves only real
// partitions, each only to its owner: its records of the partition,
// followed by a last chunk with the byte count.
func TestPieceServer(t *testing.T) {
	dir := t.TempDir()
	data := make([]byte, 10*record.Size)
	for i := range 10 {
		data[i*record.Size] = byte('a' + i) // sorted keys
	}
	run := filepath.Join(dir, "run")
	if err := os.WriteFile(run, data, 0o644); err != nil {
		t.Fatal(err)
	}
	s := newPieceServer(dir, func(context.Context, string) {})
	var got []byte
	var last *dsortpb.ShuffleDataChunk
	send := func(c *dsortpb.ShuffleDataChunk) error {
		if c.GetIsLastChunk() {
			last = c
		}
		got = append(got, c.GetData()...)
		return nil
	}
	if err := s.serve(t.Context(), 1, 1, send); !errors.Is(err, ErrNotReady) {
		t.Fatalf("before the sort: err = %v, want ErrNotReady", err)
	}
	sorted := &sortedInput{runs: []extsort.Run{{Path: run, Records: 10}}, splits: [][]int64{{0, 4 * record.Size, 10 * record.Size}}}
	s.ready(&pieceSource{sorted: sorted, layout: jobLayout{self: 0, workers: 2, ppw: 1}, epoch: 3, memory: minMergeMemory}, 1)
	if err := s.serve(t.Context(), 1, 2, send); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("partition 2 of 2: err = %v, want ErrBadRequest", err)
	}
	if err := s.serve(t.Context(), 0, 1, send); !errors.Is(err, ErrNotOwner) {
		t.Fatalf("partition 1 to worker 0: err = %v, want ErrNotOwner", err)
	}
	if err := s.serve(t.Context(), 1, 1, send); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data[4*record.Size:]) {
		t.Fatalf("served %d bytes, want records 4..9", len(got))
	}
	if last == nil || last.GetTotalBytes() != 6*record.Size || last.GetSenderEpoch() != 3 || last.GetPartition() != 1 {
		t.Fatalf("last chunk = %v", last)
	}
	s.close()
}
