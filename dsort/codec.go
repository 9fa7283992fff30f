package dsort

import (
	"encoding/binary"
	"fmt"
	"slices"
	"sync"

	"github.com/gantryhq/gantry/dsort/dsortpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"

	// The standard proto codec, which chunkCodec falls back on.
	_ "google.golang.org/grpc/encoding/proto"
)

// chunkCodec is the proto codec, except for ShuffleDataChunks, in both
// directions. It decodes a chunk into the message it is given reusing that
// message's Data buffer, where proto.Unmarshal allocates a new one for
// every chunk: a receiver that passes the same message to each RecvMsg
// (pieceReceiver) then takes in a whole piece without allocating per
// chunk. It encodes a chunk's data without copying it: the encoding is the
// fields before and after the data, and the data buffer itself, handed to
// gRPC, which gives it back to sendBuffers once written (so the sender
// must not touch a chunk's Data after sending it; chunkWriter takes a new
// buffer). The wire format is the proto's. The receiving side of
// ShuffleData uses it through the call option recvChunks, the worker's
// server through sendChunks.
type chunkCodec struct{ proto encoding.CodecV2 }

var (
	recvChunks = grpc.ForceCodecV2(chunkCodec{proto: recvChunksCodec()})
	sendChunks = grpc.ForceServerCodecV2(chunkCodec{proto: recvChunksCodec()})
)

// recvChunksCodec is the standard proto codec chunkCodec builds on.
func recvChunksCodec() encoding.CodecV2 { return encoding.GetCodecV2("proto") }

func (c chunkCodec) Name() string { return c.proto.Name() }

// Marshal encodes v; a ShuffleDataChunk whose data is one of sendBuffers'
// goes out without its data being copied.
func (c chunkCodec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(*dsortpb.ShuffleDataChunk)
	if !ok || cap(m.Data) != chunkBytes {
		return c.proto.Marshal(v)
	}
	// The fields in field order, as proto writes them: 1–4, the data (5),
	// then 6 and 7; zero values are left out.
	var head, tail []byte
	head = appendVarintField(head, 1, uint64(m.Sender))
	head = appendVarintField(head, 2, uint64(m.SenderEpoch))
	head = appendVarintField(head, 3, uint64(m.Partition))
	head = appendVarintField(head, 4, uint64(m.Offset))
	if len(m.Data) > 0 {
		head = protowire.AppendTag(head, 5, protowire.BytesType)
		head = protowire.AppendVarint(head, uint64(len(m.Data)))
	}
	tail = appendVarintField(tail, 6, uint64(protowire.EncodeBool(m.IsLastChunk)))
	tail = appendVarintField(tail, 7, uint64(m.TotalBytes))
	out := mem.BufferSlice{mem.SliceBuffer(head)}
	if len(m.Data) > 0 {
		data := m.Data
		out = append(out, mem.NewBuffer(&data, sendBuffers))
	}
	if len(tail) > 0 {
		out = append(out, mem.SliceBuffer(tail))
	}
	return out, nil
}

// appendVarintField appends field num with value v unless v is zero.
func appendVarintField(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	return protowire.AppendVarint(protowire.AppendTag(b, num, protowire.VarintType), v)
}

// sendBuffers holds the chunk buffers of the streams served: a buffer is
// filled by chunkWriter, sent, and comes back here once gRPC has written
// it (mem.BufferPool).
var sendBuffers = &chunkPool{}

// chunkPool is a mem.BufferPool of chunkBytes buffers.
type chunkPool struct{ p sync.Pool }

var _ mem.BufferPool = (*chunkPool)(nil)

// Get returns an empty buffer of capacity chunkBytes (length is ignored:
// only chunkWriter takes buffers, always whole ones).
func (c *chunkPool) Get(int) *[]byte {
	if b, ok := c.p.Get().(*[]byte); ok {
		return b
	}
	b := make([]byte, 0, chunkBytes)
	return &b
}

// Put takes a buffer back; buffers of another size are left to the
// garbage collector.
func (c *chunkPool) Put(b *[]byte) {
	if cap(*b) == chunkBytes {
		*b = (*b)[:0]
		c.p.Put(b)
	}
}

func (c chunkCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(*dsortpb.ShuffleDataChunk)
	if !ok {
		return c.proto.Unmarshal(data, v)
	}
	// A chunk arrives in pieces (one per HTTP/2 data frame): it is decoded
	// from them in place, its data copied once, straight into m.Data,
	// instead of first gathering the pieces in a buffer of its own.
	r := &sliceReader{bufs: make([][]byte, 0, len(data))}
	for _, b := range data {
		r.bufs = append(r.bufs, b.ReadOnlyData())
	}
	return decodeChunkFrom(r, m)
}

// decodeChunk sets every field of m from b, a ShuffleDataChunk in proto
// wire format, copying the data into m.Data's own buffer when it is large
// enough. Unknown fields are skipped, as proto does.
func decodeChunk(b []byte, m *dsortpb.ShuffleDataChunk) error {
	return decodeChunkFrom(&sliceReader{bufs: [][]byte{b}}, m)
}

// decodeChunkFrom is decodeChunk over the pieces of r.
func decodeChunkFrom(r *sliceReader, m *dsortpb.ShuffleDataChunk) error {
	data := m.Data[:0]
	m.Reset()
	m.Data = data
	for r.len() > 0 {
		num, typ, n := protowire.ConsumeTag(r.peek())
		if n < 0 {
			return fmt.Errorf("dsort: decode ShuffleDataChunk: %w", protowire.ParseError(n))
		}
		r.skip(n)
		switch {
		case num == 5 && typ == protowire.BytesType:
			v, n := protowire.ConsumeVarint(r.peek())
			if n < 0 || v > uint64(r.len()-n) {
				return fmt.Errorf("dsort: decode ShuffleDataChunk data: %w", protowire.ParseError(min(n, -1)))
			}
			r.skip(n)
			m.Data = r.read(m.Data[:0], int(v))
		case typ == protowire.VarintType && num >= 1 && num <= 7:
			v, n := protowire.ConsumeVarint(r.peek())
			if n < 0 {
				return fmt.Errorf("dsort: decode ShuffleDataChunk field %d: %w", num, protowire.ParseError(n))
			}
			setChunkField(m, num, v)
			r.skip(n)
		default:
			if err := r.skipField(num, typ); err != nil {
				return fmt.Errorf("dsort: decode ShuffleDataChunk field %d: %w", num, err)
			}
		}
	}
	return nil
}

// sliceReader reads a message that lies in several buffers, in order.
type sliceReader struct {
	bufs    [][]byte // what is left: bufs[0] is never empty unless len is 0
	scratch [binary.MaxVarintLen64 + 1]byte
}

// len is the number of bytes left.
func (r *sliceReader) len() int {
	n := 0
	for _, b := range r.bufs {
		n += len(b)
	}
	return n
}

// peek returns the next bytes: all of the current buffer, or, when a tag or
// varint may straddle it and the next, up to len(scratch) bytes gathered
// across buffers (enough for any tag or varint).
func (r *sliceReader) peek() []byte {
	r.trim()
	if len(r.bufs) == 0 {
		return nil
	}
	if len(r.bufs[0]) >= len(r.scratch) || len(r.bufs) == 1 {
		return r.bufs[0]
	}
	n := 0
	for _, b := range r.bufs {
		n += copy(r.scratch[n:], b)
		if n == len(r.scratch) {
			break
		}
	}
	return r.scratch[:n]
}

// skip drops n bytes (at most len).
func (r *sliceReader) skip(n int) {
	for n > 0 && len(r.bufs) > 0 {
		k := min(n, len(r.bufs[0]))
		r.bufs[0] = r.bufs[0][k:]
		n -= k
		r.trim()
	}
}

// read appends the next n bytes (at most len) to dst.
func (r *sliceReader) read(dst []byte, n int) []byte {
	dst = slices.Grow(dst, n)
	for n > 0 && len(r.bufs) > 0 {
		k := min(n, len(r.bufs[0]))
		dst = append(dst, r.bufs[0][:k]...)
		r.bufs[0] = r.bufs[0][k:]
		n -= k
		r.trim()
	}
	return dst
}

// trim drops the empty buffers at the front.
func (r *sliceReader) trim() {
	for len(r.bufs) > 0 && len(r.bufs[0]) == 0 {
		r.bufs = r.bufs[1:]
	}
}

// skipField skips the value of an unknown field, as proto does.
func (r *sliceReader) skipField(num protowire.Number, typ protowire.Type) error {
	if typ != protowire.BytesType {
		// Varints and fixed-size values fit in what peek returns;
		// groups, deprecated, are not expected and must lie in one buffer.
		n := protowire.ConsumeFieldValue(num, typ, r.peek())
		if n < 0 {
			return protowire.ParseError(n)
		}
		r.skip(n)
		return nil
	}
	v, n := protowire.ConsumeVarint(r.peek())
	if n < 0 || v > uint64(r.len()-n) {
		return protowire.ParseError(min(n, -1))
	}
	r.skip(n + int(v))
	return nil
}

// setChunkField sets varint field num of m to v.
func setChunkField(m *dsortpb.ShuffleDataChunk, num protowire.Number, v uint64) {
	switch num {
	case 1:
		m.Sender = int32(v)
	case 2:
		m.SenderEpoch = int64(v)
	case 3:
		m.Partition = int32(v)
	case 4:
		m.Offset = int64(v)
	case 6:
		m.IsLastChunk = protowire.DecodeBool(v)
	case 7:
		m.TotalBytes = int64(v)
	}
	// Field 5 as a varint is, as for proto, an unknown field: skipped.
}
