package append_test

import (
	"bytes"
	"encoding/binary"
	"testing"

	appendh "github.com/openrdmo/rdmo/plugins/append"
	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/rdmotest"
	"github.com/openrdmo/rdmo/rdmo/wire"
)

// The address space every fuzz input runs against: a queue region of the
// client whose first word is the tail, a second region of the client, and a
// region of another client.
const (
	fzClient   = 1
	fzQueue    = 1
	fzQueueAt  = 0x10000
	fzData     = 2
	fzDataAt   = 0x20000
	fzForeign  = 3
	fzRegionSz = 512
)

func fzAppendHeader(ptr uint64, ptrRkey, dataRkey rdmo.RegionID, flags uint32) []byte {
	return wire.AppendAppendRequest(nil, wire.Header{ClientID: fzClient, Flags: flags},
		rdmo.AppendHeader{PtrAddr: ptr, PtrRkey: ptrRkey, DataRkey: dataRkey})
}

// FuzzAppendHandleBatch runs one arbitrary request (header and payload,
// eager or rendezvous) through the APPEND handler, in both strategies,
// against rdmotest's checked target. The handler must not panic; nothing
// outside the regions (the guards) and nothing of the other client may
// change; a failed request writes nothing (in Shared mode it may have
// moved the tail word, as documented); a successful one put its payload
// at the address its result names and advanced the tail past it.
func FuzzAppendHandleBatch(f *testing.F) {
	f.Add(fzAppendHeader(fzQueueAt, fzQueue, fzQueue, 0), []byte("hello"), false, false)
	f.Add(fzAppendHeader(fzQueueAt, fzQueue, fzData, 0), []byte("into the other region"), true, false)
	f.Add(fzAppendHeader(fzQueueAt, fzQueue, fzForeign, 0), []byte("foreign"), false, false)
	f.Add(fzAppendHeader(fzQueueAt+8, fzQueue, fzQueue, 0), []byte("tail word is the data"), false, false)
	f.Add(fzAppendHeader(fzQueueAt, fzQueue, fzQueue, 0), bytes.Repeat([]byte("x"), fzRegionSz), false, true)
	f.Add(fzAppendHeader(fzQueueAt+fzRegionSz-8, fzQueue, fzQueue, 0), []byte("at the end"), false, false)
	f.Add(fzAppendHeader(^uint64(0)-7, fzQueue, fzQueue, 0), []byte("wrap"), true, false)
	f.Add(fzAppendHeader(fzQueueAt, fzQueue, fzQueue, 0)[:20], []byte("short"), false, false)
	f.Add([]byte{}, []byte{}, false, false)
	f.Fuzz(func(t *testing.T, hdr, payload []byte, shared, rndv bool) {
		if len(hdr) > 256 || len(payload) > 8192 {
			return
		}
		strategy := appendh.Owned
		if shared {
			strategy = appendh.Shared
		}
		tg := rdmotest.NewTarget(fzClient)
		q := tg.AddRegion(fzQueue, fzQueueAt, fzRegionSz)
		binary.LittleEndian.PutUint64(q, fzQueueAt+8)
		tg.AddRegion(fzData, fzDataAt, fzRegionSz)
		foreign := tg.AddRegionFor(fzClient+1, fzForeign, 0x30000, 64)
		for i := range foreign {
			foreign[i] = 0x77
		}
		h := appendh.New(appendh.Options{Strategy: strategy})
		tg.Register(h)
		snap := map[rdmo.RegionID][]byte{}
		for _, id := range []rdmo.RegionID{fzQueue, fzData, fzForeign} {
			snap[id] = bytes.Clone(tg.Memory(id))
		}
		// The worker hands the handler only APPENDs that pass its checks.
		req, err := tg.ParseReq(hdr, payload)
		if err != nil || req.Op != rdmo.OpAppend {
			return
		}
		if rndv {
			tg.SetRendezvousPayload(0, payload)
			req.Payload, req.Rendezvous = nil, true
		}
		res := tg.RunBatch(h, req)[0]
		if err := tg.WriteBackAll(); err != nil && res.Status == rdmo.StatusOK {
			t.Fatalf("fence after a successful append: %v", err)
		}
		tg.EndBatch()
		if err := tg.CheckGuards(); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(tg.Memory(fzForeign), snap[fzForeign]) {
			t.Fatal("the other client's region changed")
		}
		rh := req
		if res.Status != rdmo.StatusOK {
			for _, id := range []rdmo.RegionID{fzQueue, fzData} {
				got, want := tg.Memory(id), snap[id]
				if shared && id == rh.Append.PtrRkey {
					// The tail word may have moved; nothing else.
					base := uint64(fzQueueAt)
					if id == fzData {
						base = fzDataAt
					}
					if off := rh.Append.PtrAddr - base; rh.Append.PtrAddr >= base && off+8 <= fzRegionSz {
						got, want = bytes.Clone(got), bytes.Clone(want)
						copy(got[off:off+8], make([]byte, 8))
						copy(want[off:off+8], make([]byte, 8))
					}
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("failed append (%v: %s) changed region %d", res.Status, res.Detail, id)
				}
			}
			return
		}
		a := rh.Append
		data, err := tg.Region(a.DataRkey)
		if err != nil {
			t.Fatalf("append into region %d succeeded: %v", a.DataRkey, err)
		}
		if err := data.CheckRange(res.Value, uint64(len(payload))); err != nil {
			t.Fatalf("append succeeded at %#x: %v", res.Value, err)
		}
		mem := tg.Memory(a.DataRkey)
		if got := mem[res.Value-data.Base:][:len(payload)]; !bytes.Equal(got, payload) {
			t.Fatalf("payload not at %#x", res.Value)
		}
		ptr, _ := tg.Region(a.PtrRkey)
		if tail := binary.LittleEndian.Uint64(tg.Memory(a.PtrRkey)[a.PtrAddr-ptr.Base:]); tail != res.Value+uint64(len(payload)) {
			t.Fatalf("tail %#x after an append of %d bytes at %#x", tail, len(payload), res.Value)
		}
	})
}
