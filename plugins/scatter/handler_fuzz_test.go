package scatter_test

import (
	"bytes"
	"testing"

	"github.com/openrdmo/rdmo/plugins/scatter"
	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/rdmotest"
	"github.com/openrdmo/rdmo/rdmo/wire"
)

const (
	fzClient  = 1
	fzOwn     = 1
	fzOwnAt   = 0x10000
	fzOwn2    = 2
	fzOwn2At  = 0x20000
	fzForeign = 3
	fzSize    = 512
)

func fzScatter(count uint64, elems ...any) ([]byte, []byte) {
	hdr := wire.AppendScatterRequest(nil, wire.Header{ClientID: fzClient}, rdmo.ScatterHeader{Count: count})
	var p []byte
	for i := 0; i+2 < len(elems); i += 3 {
		d := elems[i+2].([]byte)
		p, _ = wire.AppendIOV(p, wire.IOV{Addr: elems[i].(uint64), Rkey: rdmo.RegionID(elems[i+1].(uint64)), Len: uint16(len(d))}, d)
	}
	return hdr, p
}

// FuzzScatterHandleBatch runs one arbitrary request (header and payload,
// eager or rendezvous) through the SCATTER handler against rdmotest's
// checked target: no panic, guards and the other client's region intact,
// a failed request writes nothing, a successful one wrote exactly its
// chunks (in payload order).
func FuzzScatterHandleBatch(f *testing.F) {
	add := func(h, p []byte) { f.Add(h, p, false) }
	add(fzScatter(2, uint64(fzOwnAt), uint64(fzOwn), []byte("abc"), uint64(fzOwn2At+5), uint64(fzOwn2), []byte("def")))
	add(fzScatter(2, uint64(fzOwnAt), uint64(fzOwn), []byte("abc"), uint64(fzOwnAt+3), uint64(fzOwn), []byte("adjacent")))
	add(fzScatter(1, uint64(0x30000), uint64(fzForeign), []byte("foreign")))
	add(fzScatter(1, uint64(fzOwnAt+fzSize-2), uint64(fzOwn), []byte("past")))
	add(fzScatter(1, ^uint64(0)-1, uint64(fzOwn), []byte("wrap")))
	add(fzScatter(3, uint64(fzOwnAt), uint64(fzOwn), []byte("count")))
	h, p := fzScatter(1, uint64(fzOwnAt), uint64(fzOwn), []byte("rendezvous"))
	f.Add(h, p, true)
	f.Fuzz(func(t *testing.T, hdr, payload []byte, rndv bool) {
		if len(hdr) > 256 || len(payload) > 8192 {
			return
		}
		tg := rdmotest.NewTarget(fzClient)
		tg.AddRegion(fzOwn, fzOwnAt, fzSize)
		tg.AddRegion(fzOwn2, fzOwn2At, fzSize)
		foreign := tg.AddRegionFor(fzClient+1, fzForeign, 0x30000, 64)
		for i := range foreign {
			foreign[i] = 0x77
		}
		hd := scatter.New(scatter.Options{MaxCoalesce: 16})
		tg.Register(hd)
		ids := []rdmo.RegionID{fzOwn, fzOwn2, fzForeign}
		snap := map[rdmo.RegionID][]byte{}
		for _, id := range ids {
			snap[id] = bytes.Clone(tg.Memory(id))
		}
		// The worker hands the handler only SCATTERs whose header passes
		// its checks, and checks an eager payload too; a rendezvous
		// payload is the handler's to check.
		rh, err := wire.ParseRequest(hdr)
		if err != nil || rh.Header.Op != rdmo.OpScatter || rh.Header.ClientID != fzClient {
			return
		}
		var req rdmo.Request
		if rndv {
			req = rh.Request(0, fzClient, hdr, nil)
			req.Length, req.Rendezvous = uint64(len(payload)), true
			tg.SetRendezvousPayload(0, payload)
		} else {
			if rh.CheckPayload(payload) != nil {
				return
			}
			req = rh.Request(0, fzClient, hdr, payload)
		}
		res := tg.RunBatch(hd, req)[0]
		if err := tg.CheckGuards(); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(tg.Memory(fzForeign), snap[fzForeign]) {
			t.Fatal("the other client's region changed")
		}
		if res.Status != rdmo.StatusOK {
			for _, id := range ids {
				if !bytes.Equal(tg.Memory(id), snap[id]) {
					t.Fatalf("failed scatter (%v: %s) changed region %d", res.Status, res.Detail, id)
				}
			}
			return
		}
		if err := wire.ForEachIOV(payload, rh.Scatter.Count, func(v wire.IOV, d []byte) error {
			r, err := tg.Region(v.Rkey)
			if err != nil {
				if v.Len == 0 {
					return nil
				}
				t.Fatalf("scatter into region %d succeeded: %v", v.Rkey, err)
			}
			if err := r.CheckRange(v.Addr, uint64(v.Len)); err != nil {
				t.Fatalf("scatter chunk succeeded: %v", err)
			}
			copy(snap[v.Rkey][v.Addr-r.Base:], d)
			return nil
		}); err != nil {
			t.Fatalf("scatter with a bad payload (%v) succeeded", err)
		}
		for _, id := range ids {
			if !bytes.Equal(tg.Memory(id), snap[id]) {
				t.Fatalf("region %d differs from the request's chunks", id)
			}
		}
	})
}
