package urom

import (
	"bytes"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/openrdmo/rdmo/internal/msgpackcheck"
	"github.com/openrdmo/rdmo/urom/internal/uromwire"
)

// bodyKinds makes a value of every body type that crosses a UROM
// connection: what a host sends the service (Hello, SpawnOptions,
// StopRequest, uromwire.CommandRequest), what the service sends a worker process
// (WorkerSpec, uromwire.CommandRequest) and what comes back to hosts (HelloReply,
// plugin and worker lists, SpawnReply, WorkerDied, the ready pid), and
// the host's authentication proof.
func bodyKinds() []any {
	return []any{new(Hello), new(HelloReply), new([]PluginInfo), new(SpawnOptions), new(WorkerSpec),
		new(SpawnReply), new(StopRequest), new([]WorkerInfo), new(uromwire.CommandRequest), new(WorkerDied), new(int), new(uromwire.AuthProof)}
}

// FuzzDecodeBody decodes arbitrary bytes as each body type the way a
// connection does: FuzzReadFrame covers the envelope, whose msgpack check
// (msgpackcheck.Value) covers the body inside it, and then decodeBody
// decodes the body into its type. That must never panic, and what decodes
// must survive a re-encode and decode unchanged.
func FuzzDecodeBody(f *testing.F) {
	samples := []any{
		Hello{Component: "rdmo", ComponentVersion: "1.0.0"},
		HelloReply{Service: "rdmo-urom", ComponentVersion: "1.0.0"},
		[]PluginInfo{{ID: 1, Name: "append", Version: "1.0.0", Ops: []uint32{1}, Builtin: true}},
		SpawnOptions{Plugins: []string{"append", "plugin:scatter"}, Env: []string{"UCX_TLS=shm"}, CPUs: "0-1", Config: map[string]string{"append-strategy": "shared"}},
		WorkerSpec{ID: 3, Plugins: []PluginInfo{{Name: "flush", Path: "/x"}}, Config: map[string]string{"k": "v"}},
		SpawnReply{Worker: 3, PID: 99},
		StopRequest{Worker: 3},
		[]WorkerInfo{{ID: 3, PID: 99, Plugins: []string{"append"}}},
		uromwire.CommandRequest{Worker: 3, Kind: "mr-reg", Body: msgpack.RawMessage{0x80}},
		WorkerDied{Worker: 3, Reason: "signal: killed"},
		1234,
		uromwire.AuthProof{MAC: bytes.Repeat([]byte{1}, 32)},
	}
	for i, s := range samples {
		b, err := msgpack.Marshal(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(uint8(i), b)
	}
	for i, s := range []any{
		Hello{Component: "rdmo", ComponentVersion: "1.0.0", Auth: true, Nonce: bytes.Repeat([]byte{7}, 32)},
		HelloReply{Service: "rdmo-urom", Auth: true, Nonce: bytes.Repeat([]byte{9}, 32), MAC: bytes.Repeat([]byte{1}, 32)},
	} {
		b, _ := msgpack.Marshal(s)
		f.Add(uint8(i), b)
	}
	f.Add(uint8(3), []byte{0x81, 0xa3, 'e', 'n', 'v', 0xdd, 0xff, 0xff, 0xff, 0xff})       // hostile count
	f.Add(uint8(4), []byte{0x81, 0xa6, 'c', 'o', 'n', 'f', 'i', 'g', 0xdf, 0, 0, 0, 0x10}) // map count past the end
	f.Add(uint8(8), []byte{0x81, 0xa4, 'b', 'o', 'd', 'y', 0xc1})
	f.Fuzz(func(t *testing.T, kind uint8, b []byte) {
		if msgpackcheck.Value(b, uromwire.MaxNesting) != nil {
			return
		}
		k := int(kind) % len(bodyKinds())
		v := bodyKinds()[k]
		if err := uromwire.DecodeBody(b, v); err != nil {
			return
		}
		enc, err := msgpack.Marshal(v)
		if err != nil {
			t.Fatalf("%T: re-encode: %v", v, err)
		}
		v2 := bodyKinds()[k]
		if err := uromwire.DecodeBody(enc, v2); err != nil {
			t.Fatalf("%T: decoding the re-encoding: %v", v, err)
		}
		if enc2, _ := msgpack.Marshal(v2); !bytes.Equal(enc, enc2) {
			t.Fatalf("%T: round trip not stable: % x then % x", v, enc, enc2)
		}
	})
}
