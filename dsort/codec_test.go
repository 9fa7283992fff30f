package dsort

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/gantryhq/gantry/dsort/dsortpb"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// chunkCodec decodes what proto encodes, into a reused message, from one
// buffer or several, skipping unknown fields; other messages go to proto.
func TestChunkCodecDecodesWhatProtoEncodes(t *testing.T) {
	c := chunkCodec{proto: recvChunksCodec()}
	rng := rand.New(rand.NewPCG(1, 2))
	reused := &dsortpb.ShuffleDataChunk{}
	for i := range 200 {
		want := &dsortpb.ShuffleDataChunk{Sender: rng.Int32N(100) - 3, SenderEpoch: rng.Int64(), Partition: rng.Int32N(1000),
			Offset: rng.Int64N(1 << 40), IsLastChunk: i%3 == 0, TotalBytes: rng.Int64N(1 << 40)}
		if i%5 != 0 {
			want.Data = make([]byte, rng.IntN(3000))
			for j := range want.Data {
				want.Data[j] = byte(rng.Uint32())
			}
		}
		b, err := proto.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		if i%7 == 0 { // a field this version does not know
			b = protowire.AppendTag(b, 99, protowire.BytesType)
			b = protowire.AppendBytes(b, []byte("future"))
		}
		var in mem.BufferSlice
		if i%2 == 0 { // as gRPC may hand it over: in pieces
			k := len(b) / 2
			in = mem.BufferSlice{mem.SliceBuffer(b[:k]), mem.SliceBuffer(b[k:])}
		} else {
			in = mem.BufferSlice{mem.SliceBuffer(b)}
		}
		if err := c.Unmarshal(in, reused); err != nil {
			t.Fatal(err)
		}
		got := &dsortpb.ShuffleDataChunk{Sender: reused.Sender, SenderEpoch: reused.SenderEpoch, Partition: reused.Partition,
			Offset: reused.Offset, Data: reused.Data, IsLastChunk: reused.IsLastChunk, TotalBytes: reused.TotalBytes}
		if len(got.Data) == 0 {
			got.Data = nil
		}
		if !proto.Equal(got, want) || !bytes.Equal(reused.Data, want.Data) {
			t.Fatalf("chunk %d: decoded %v, want %v", i, got, want)
		}
	}
	// Other messages take the proto path.
	req := &dsortpb.ShuffleRequest{JobId: "j", Receiver: 2, ReceiverEpoch: 3, Partition: 4}
	b, _ := proto.Marshal(req)
	var got dsortpb.ShuffleRequest
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, &got); err != nil || !proto.Equal(&got, req) {
		t.Fatalf("ShuffleRequest: %v, %v", &got, err)
	}
	// Garbage is an error, not a panic.
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer([]byte{0x2a, 0xff, 0xff})}, reused); err == nil {
		t.Fatal("a truncated data field decoded without error")
	}
}

// FuzzDecodeChunk: on any input decodeChunk does not panic, and where
// proto accepts the bytes as a ShuffleDataChunk, both decode the same.
func FuzzDecodeChunk(f *testing.F) {
	for _, m := range []*dsortpb.ShuffleDataChunk{{}, {Sender: 1, SenderEpoch: 2, Partition: 3, Offset: 400, Data: []byte("abc"), IsLastChunk: true, TotalBytes: 403}} {
		b, _ := proto.Marshal(m)
		f.Add(b)
	}
	f.Add([]byte{0x2a, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		got := &dsortpb.ShuffleDataChunk{Data: make([]byte, 0, 8)}
		err := decodeChunk(b, got)
		var want dsortpb.ShuffleDataChunk
		if proto.Unmarshal(b, &want) != nil {
			return
		}
		if err != nil {
			t.Fatalf("proto decodes %x, decodeChunk fails: %v", b, err)
		}
		if got.Sender != want.Sender || got.SenderEpoch != want.SenderEpoch || got.Partition != want.Partition ||
			got.Offset != want.Offset || !bytes.Equal(got.Data, want.Data) || got.IsLastChunk != want.IsLastChunk || got.TotalBytes != want.TotalBytes {
			t.Fatalf("%x: decodeChunk %v, proto %v", b, got, &want)
		}
	})
}

// chunkCodec encodes a chunk whose data is a send buffer without copying
// the data, into what proto decodes as the same message; the buffer goes
// back to sendBuffers once gRPC frees the encoding.
func TestChunkCodecEncodesWithoutCopying(t *testing.T) {
	c := chunkCodec{proto: recvChunksCodec()}
	for _, want := range []*dsortpb.ShuffleDataChunk{
		{Sender: 2, SenderEpoch: 7, Partition: 11, Offset: 1 << 33, Data: []byte("0123456789")},
		{Data: []byte("x")},
		{Sender: 1, Partition: 3, Offset: 500, IsLastChunk: true, TotalBytes: 500},
	} {
		buf := *sendBuffers.Get(chunkBytes)
		msg := proto.Clone(want).(*dsortpb.ShuffleDataChunk)
		msg.Data = append(buf, want.Data...)
		enc, err := c.Marshal(msg)
		if err != nil {
			t.Fatal(err)
		}
		var got dsortpb.ShuffleDataChunk
		if err := proto.Unmarshal(enc.Materialize(), &got); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(&got, want) {
			t.Errorf("encoded %v, decoded %v", want, &got)
		}
		shared := false
		for _, b := range enc {
			if d := b.ReadOnlyData(); len(d) > 0 && len(msg.Data) > 0 && &d[0] == &msg.Data[0] {
				shared = true
			}
		}
		if shared != (len(want.Data) > 0) {
			t.Errorf("%v: data shared with the encoding: %v", want, shared)
		}
		enc.Free()
	}
}
