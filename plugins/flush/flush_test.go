package flush_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"

	appendh "github.com/openrdmo/rdmo/plugins/append"
	"github.com/openrdmo/rdmo/plugins/flush"
	"github.com/openrdmo/rdmo/plugins/scatter"
	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/rdmotest"
	"github.com/openrdmo/rdmo/rdmo/wire"
)

var le = binary.LittleEndian

const (
	cl    = 0 // the reference target registers client 0
	regQ  = 0x5555_0000_1000
	baseQ = 0x7f12_3456_0000
	sizeQ = 128 << 10
)

func TestInfo(t *testing.T) {
	info := flush.New().Info()
	if info.Name != flush.Name || info.Version != flush.Version || flush.Version != "1.0.0" ||
		len(info.Ops) != 1 || info.Ops[0] != rdmo.OpFlush || !info.NoCachedState {
		t.Fatalf("%+v", info)
	}
}

// The reference demo at handler level: append 8 bytes of 0x33 to a 128 KiB
// queue whose first u64 is the tail (base+8), flush; scatter 16 chunks of 8
// bytes, flush; the bytes are there and the tail word is base+16.
func TestSeedFlow(t *testing.T) {
	for _, s := range []appendh.Strategy{appendh.Owned, appendh.Shared} {
		for _, deferPuts := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/defer=%v", s, deferPuts), func(t *testing.T) {
				tg := rdmotest.NewTarget(cl)
				tg.DeferPuts = deferPuts
				q := tg.AddRegion(regQ, baseQ, sizeQ)
				le.PutUint64(q, baseQ+8)
				app := appendh.New(appendh.Options{Strategy: s})
				sc := scatter.New(scatter.Options{})
				fl := flush.New()
				tg.Register(app, sc, fl)

				// The worker completes the append batch once its Puts are
				// done; here the flush runs before EndBatch so that only
				// the flush's own Flush can have made the data visible.
				a := rdmo.AppendHeader{PtrAddr: baseQ, PtrRkey: regQ, DataRkey: regQ}
				res := make([]rdmo.Result, 1)
				app.HandleBatch(tg, []rdmo.Request{tg.AppendReq(a, bytes.Repeat([]byte{0x33}, 8))}, res)
				if !res[0].Equal(rdmo.Result{Value: baseQ + 8}) {
					t.Fatalf("append: %+v", res[0])
				}
				fres := make([]rdmo.Result, 1)
				fl.HandleBatch(tg, []rdmo.Request{tg.FlushReq(0xBEEF)}, fres)
				if !fres[0].Equal(rdmo.Result{}) {
					t.Fatalf("flush: %+v", fres[0])
				}
				if !bytes.Equal(q[8:16], bytes.Repeat([]byte{0x33}, 8)) || le.Uint64(q) != baseQ+16 {
					t.Fatalf("after the first flush: % x", q[:16])
				}
				tg.EndBatch()

				var chunks []rdmotest.Chunk
				var want []byte
				for i := 0; i < 16; i++ {
					d := bytes.Repeat([]byte{byte(0x40 + i)}, 8)
					want = append(want, d...)
					chunks = append(chunks, rdmotest.Chunk{Rkey: regQ, Addr: baseQ + 16 + uint64(i)*8, Data: d})
				}
				res = make([]rdmo.Result, 1)
				sc.HandleBatch(tg, []rdmo.Request{tg.ScatterReq(chunks...)}, res)
				if !res[0].Equal(rdmo.Result{}) {
					t.Fatalf("scatter: %+v", res[0])
				}
				fl.HandleBatch(tg, []rdmo.Request{tg.FlushReq(0xBEF0)}, fres)
				if !fres[0].Equal(rdmo.Result{}) {
					t.Fatalf("flush: %+v", fres[0])
				}
				if !bytes.Equal(q[16:16+128], want) {
					t.Fatalf("scattered bytes: % x", q[16:16+128])
				}
				if got := le.Uint64(q); got != baseQ+16 {
					t.Fatalf("tail word %#x, want %#x", got, baseQ+16)
				}
				tg.EndBatch()
				if err := tg.CheckGuards(); err != nil {
					t.Fatal(err)
				}
				st := tg.Stats()
				if st.WriteBacks != 2 || st.Flushes != 2 {
					t.Fatalf("%+v", st)
				}
				// 1 append + 1 coalesced scatter + (owned) 1 tail write-back.
				wantPuts := uint64(2)
				if s == appendh.Owned {
					wantPuts = 3
				}
				if st.Puts != wantPuts {
					t.Fatalf("puts %d, want %d", st.Puts, wantPuts)
				}
			})
		}
	}
}

type failingWriteBack struct {
	rdmo.BaseHandler
	err error
}

func (failingWriteBack) Info() rdmo.HandlerInfo                                 { return rdmo.HandlerInfo{Name: "failing"} }
func (failingWriteBack) HandleBatch(rdmo.Target, []rdmo.Request, []rdmo.Result) {}
func (f failingWriteBack) WriteBack(rdmo.Target) error                          { return f.err }

func TestFailures(t *testing.T) {
	t.Run("fence fails, flush still runs", func(t *testing.T) {
		tg := rdmotest.NewTarget(cl)
		tg.Register(failingWriteBack{err: fmt.Errorf("write-back: %w", rdmo.ErrRegionGone)})
		res := tg.RunBatch(flush.New(), tg.FlushReq(1))
		if res[0].Status != rdmo.StatusRegionGone || tg.Stats().Flushes != 1 {
			t.Fatalf("%+v %+v", res, tg.Stats())
		}
	})
	t.Run("fence fails with a plain error", func(t *testing.T) {
		tg := rdmotest.NewTarget(cl)
		tg.Register(failingWriteBack{err: errors.New("boom")})
		if res := tg.RunBatch(flush.New(), tg.FlushReq(1)); res[0].Status != rdmo.StatusHandlerFailed {
			t.Fatalf("%+v", res)
		}
	})
	t.Run("flush fails", func(t *testing.T) {
		tg := rdmotest.NewTarget(cl)
		tg.Faults.Flush = rdmo.ErrTargetUnreachable
		if res := tg.RunBatch(flush.New(), tg.FlushReq(1)); res[0].Status != rdmo.StatusTargetUnreachable {
			t.Fatalf("%+v", res)
		}
	})
}

// TestInvalid: malformed FLUSH requests never reach the handler (the
// worker refuses them with these statuses, as rdmotest.ParseReq does);
// the flags of a well-formed one do not matter to it.
func TestInvalid(t *testing.T) {
	tg := rdmotest.NewTarget(cl)
	h := func(client uint64, flags uint32) []byte {
		return wire.AppendFlushRequest(nil, wire.Header{ClientID: client, Flags: flags}, rdmo.FlushHeader{FlushID: 9})
	}
	refused := []struct {
		name    string
		hdr     []byte
		payload []byte
		want    rdmo.Status
	}{
		{"payload", h(cl, rdmo.FlagFence), []byte("x"), rdmo.StatusPayloadMismatch},
		{"short header", h(cl, 0)[:20], nil, rdmo.StatusShortHeader},
		{"long header", append(h(cl, 0), 1), nil, rdmo.StatusHeaderTooLong},
		{"unknown flags", h(cl, 1<<4), nil, rdmo.StatusUnknownFlags},
		{"client mismatch", h(1, 0), nil, rdmo.StatusClientMismatch},
	}
	for _, c := range refused {
		if _, err := tg.ParseReq(c.hdr, c.payload); rdmo.StatusOf(err) != c.want {
			t.Errorf("%s: %v, want %s", c.name, err, c.want.Name())
		}
	}
	cases := []struct {
		name string
		req  rdmo.Request
	}{
		{"no fence flag is still a flush", tg.Req(h(cl, 0), nil)},
		{"ack flag accepted", tg.Req(h(cl, rdmo.FlagFence|rdmo.FlagAck), nil)},
	}
	fl := flush.New()
	for _, c := range cases {
		tg.ResetStats()
		res := tg.RunBatch(fl, c.req)
		if res[0].Status != rdmo.StatusOK {
			t.Errorf("%s: %s (%s)", c.name, res[0].Status.Name(), res[0].Detail)
		}
		if st := tg.Stats(); st.WriteBacks != 1 || st.Flushes != 1 {
			t.Errorf("%s: %+v", c.name, st)
		}
	}
	// Several flushes in a batch: each writes back and flushes.
	tg.ResetStats()
	res := tg.RunBatch(fl, tg.FlushReq(1), tg.FlushReq(2))
	if res[0].Status != 0 || res[1].Status != 0 {
		t.Fatalf("%+v", res)
	}
	if st := tg.Stats(); st.WriteBacks != 2 || st.Flushes != 2 {
		t.Fatalf("%+v", st)
	}
}
