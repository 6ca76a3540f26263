package ops_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/openrdmo/rdmo/plugins/ops"
	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/ucp"
	"github.com/openrdmo/rdmo/ucp/ucptest"
)

// BenchmarkRoundTrips compares ops of the pack, one call at a time
// (latency), with the initiator doing the same work one-sidedly over its
// own endpoint to the target's memory, in the same run: chase/D (an
// indirect read through D pointers) against native-chase/D (D dependent
// gets, then the read), kv-lookup against native-kv-lookup (read the
// bucket, then the value), fetch-add against a native atomic. Compare a
// row's ns/op with its native row's. The worker is a separate process on
// this machine, so the native side has the same kind of path to the
// memory as the worker; the transport is ucptest's first (shm) or the one
// named by RDMO_BENCH_TRANSPORT (tcp: every access a network round trip,
// the topology these ops are for).
func BenchmarkRoundTrips(b *testing.B) {
	tr := ucptest.Transports[0]
	for _, t := range ucptest.Transports {
		if t.Name == os.Getenv("RDMO_BENCH_TRANSPORT") {
			tr = t
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	fx := newFixture(b, ctx, tr, false)
	in := fx.connect(b, ctx)
	mem, base, region := fx.mem.Bytes(), fx.mem.Address(), rdmo.RegionID(fx.reg.ID)
	le := binary.LittleEndian
	// A chain: word i points at word i+1, 8 words, then a 16-byte value.
	for i := uint64(0); i < 8; i++ {
		le.PutUint64(mem[8*i:], base+8*(i+1))
	}
	// A kv table of 64 buckets of 16-byte values holding key 7.
	const tbl, nb, vs = 0x1000, 64, 16
	hdr, _ := ops.KVLayout(nb, vs)
	copy(mem[tbl:], hdr)
	bucket := tbl + ops.KVHeaderLen + ops.KVHome(7, nb)*(8+vs)
	le.PutUint64(mem[bucket:], 7)
	value := []byte("value-of-key-07!")
	copy(mem[bucket+8:], value)
	const counter = 0x800

	// The native side: the initiator's own endpoint to the target's memory,
	// made in each native sub-benchmark on its own goroutine (UCX binds a
	// worker to the thread that made it; b.Run runs each on a new one).
	uctx := ucptest.NewContext(b, tr)
	native := func(b *testing.B, body func(ep *ucp.Endpoint, rkey *ucp.RemoteKey)) {
		w, err := uctx.NewWorker(ucp.WorkerOptions{})
		if err != nil {
			b.Fatal(err)
		}
		defer w.Close()
		ep, err := w.Connect(fx.local.Address(), ucp.EndpointOptions{})
		if err != nil {
			b.Fatal(err)
		}
		defer ep.CloseForce()
		rkey, err := ep.UnpackRkey(fx.reg.Rkey)
		if err != nil {
			b.Fatal(err)
		}
		defer rkey.Close()
		body(ep, rkey)
	}
	const tmo = 10 * time.Second
	word, buf := make([]byte, 8), make([]byte, 8+vs)

	for _, d := range []int{1, 2, 4, 8} {
		sub := ops.IndirectReq{Region: region, Addr: base, Depth: uint16(d), Len: 8}.Sub()
		b.Run(fmt.Sprintf("chase/%d", d), func(b *testing.B) {
			for b.Loop() {
				res, err := in.Call(ctx, ops.OpIndirectRead, sub, nil)
				if err != nil || res.Value != base+8*uint64(d) {
					b.Fatalf("%+v %v", res, err)
				}
			}
		})
		b.Run(fmt.Sprintf("native-chase/%d", d), func(b *testing.B) {
			native(b, func(ep *ucp.Endpoint, rkey *ucp.RemoteKey) {
				for b.Loop() {
					p := base
					for hop := 0; hop < d; hop++ {
						if err := ep.GetSync(word, p, rkey, tmo); err != nil {
							b.Fatal(err)
						}
						p = le.Uint64(word)
					}
					if err := ep.GetSync(word, p, rkey, tmo); err != nil || p != base+8*uint64(d) {
						b.Fatal(err)
					}
				}
			})
		})
	}
	kvSub := ops.KVReq{Region: region, Table: base + tbl, Key: 7}.Sub()
	b.Run("kv-lookup", func(b *testing.B) {
		for b.Loop() {
			res, err := in.Call(ctx, ops.OpKVLookup, kvSub, nil)
			if err != nil || !bytes.Equal(res.Data, value) {
				b.Fatalf("%+v %v", res, err)
			}
		}
	})
	b.Run("native-kv-lookup", func(b *testing.B) {
		// The initiator knows the layout: read the home bucket's key, then
		// the value.
		at := base + bucket
		native(b, func(ep *ucp.Endpoint, rkey *ucp.RemoteKey) {
			for b.Loop() {
				if err := ep.GetSync(buf[:8], at, rkey, tmo); err != nil || le.Uint64(buf) != 7 {
					b.Fatal(err)
				}
				if err := ep.GetSync(buf[8:], at+8, rkey, tmo); err != nil || !bytes.Equal(buf[8:], value) {
					b.Fatal(err)
				}
			}
		})
	})
	faSub := ops.AtomicReq{Region: region, Addr: base + counter, Operand: 1}.FetchAddSub()
	b.Run("fetch-add", func(b *testing.B) {
		for b.Loop() {
			if _, err := in.Call(ctx, ops.OpFetchAdd, faSub, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("native-fetch-add", func(b *testing.B) {
		native(b, func(ep *ucp.Endpoint, rkey *ucp.RemoteKey) {
			for b.Loop() {
				if _, err := ep.AtomicSync(ucp.AtomicFetchAdd, 1, 0, base+counter, rkey, tmo); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
}
