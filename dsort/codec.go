package dsort

import (
	"fmt"

	"github.com/gantryhq/gantry/dsort/dsortpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"

	// The standard proto codec, which chunkCodec falls back on.
	_ "google.golang.org/grpc/encoding/proto"
)

// chunkCodec is the proto codec, except that it decodes a ShuffleDataChunk
// into the message it is given reusing that message's Data buffer, where
// proto.Unmarshal allocates a new one for every chunk: a receiver that
// passes the same message to each RecvMsg (pieceReceiver) then takes in a
// whole piece without allocating per chunk. The wire format is the proto's;
// only the receiving side of ShuffleData uses it (the call option
// recvChunks).
type chunkCodec struct{ proto encoding.CodecV2 }

var recvChunks = grpc.ForceCodecV2(chunkCodec{proto: recvChunksCodec()})

// recvChunksCodec is the standard proto codec chunkCodec builds on.
func recvChunksCodec() encoding.CodecV2 { return encoding.GetCodecV2("proto") }

func (c chunkCodec) Name() string { return c.proto.Name() }

func (c chunkCodec) Marshal(v any) (mem.BufferSlice, error) { return c.proto.Marshal(v) }

func (c chunkCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(*dsortpb.ShuffleDataChunk)
	if !ok {
		return c.proto.Unmarshal(data, v)
	}
	if len(data) == 1 {
		return decodeChunk(data[0].ReadOnlyData(), m)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	return decodeChunk(buf.ReadOnlyData(), m)
}

// decodeChunk sets every field of m from b, a ShuffleDataChunk in proto
// wire format, copying the data into m.Data's own buffer when it is large
// enough. Unknown fields are skipped, as proto does.
func decodeChunk(b []byte, m *dsortpb.ShuffleDataChunk) error {
	data := m.Data[:0]
	m.Reset()
	m.Data = data
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("dsort: decode ShuffleDataChunk: %w", protowire.ParseError(n))
		}
		b = b[n:]
		switch {
		case num == 5 && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return fmt.Errorf("dsort: decode ShuffleDataChunk data: %w", protowire.ParseError(n))
			}
			m.Data = append(m.Data[:0], v...)
			b = b[n:]
		case typ == protowire.VarintType && num >= 1 && num <= 7:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return fmt.Errorf("dsort: decode ShuffleDataChunk field %d: %w", num, protowire.ParseError(n))
			}
			setChunkField(m, num, v)
			b = b[n:]
		default:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return fmt.Errorf("dsort: decode ShuffleDataChunk field %d: %w", num, protowire.ParseError(n))
			}
			b = b[n:]
		}
	}
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
