package wire

import (
	"bytes"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"

	"github.com/openrdmo/rdmo/internal/msgpackcheck"
)

// libCodecName names the alternative codec: the same messages carried by a
// maintained MessagePack library (github.com/vmihailenco/msgpack/v5, by
// reflection, structs as arrays), with the bounds check every msgpack
// decode of an untrusted peer needs (internal/msgpackcheck). It is
// registered so the benchmark can compare both codecs on one plugin
// process: the server answers each call in the codec the call names. Only
// the worker names it (pluginhost uses CodecName), so a plugin cannot make
// the worker decode its answers with this codec.
const LibCodecName = "rdmo-msgpack-lib"

// libMaxDepth bounds the nesting of a message (CallResp → ops → Sync →
// one op is the deepest).
const libMaxDepth = 8

func init() { encoding.RegisterCodecV2(libCodec{}) }

type libCodec struct{}

func (libCodec) Name() string { return LibCodecName }

func (libCodec) Marshal(v any) (mem.BufferSlice, error) {
	var buf bytes.Buffer
	enc := msgpack.GetEncoder()
	enc.Reset(&buf)
	enc.UseArrayEncodedStructs(true)
	err := enc.Encode(v)
	msgpack.PutEncoder(enc)
	if err != nil {
		return nil, fmt.Errorf("rdmo plugin codec: %w", err)
	}
	return mem.BufferSlice{mem.SliceBuffer(buf.Bytes())}, nil
}

func (libCodec) Unmarshal(data mem.BufferSlice, v any) error {
	b := data.Materialize()
	if err := msgpackcheck.Value(b, libMaxDepth); err != nil {
		return fmt.Errorf("rdmo plugin wire: %w", err)
	}
	return msgpack.Unmarshal(b, v)
}
