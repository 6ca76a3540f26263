package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/openrdmo/rdmo/cmd/rdmo/internal/demo"
	"github.com/openrdmo/rdmo/host/initiator"
	"github.com/openrdmo/rdmo/rdmo/wire"
	"github.com/openrdmo/rdmo/ucp"
)

// rowCheckTests holds each row's unit test of what it checks, by the row's
// Pattern. A new row adds its own (TestEveryRowHasCheckTest).
var rowCheckTests = map[string]func(t *testing.T, name string){
	ModePerftestAM:       testNoData,
	ModePerftestPut:      testNoData,
	ModeRawAM:            testSinkRow,
	ModePingPong:         testSinkRow,
	ModeNativeOwned:      testQueueRow,
	ModeNativeBlocking:   testQueueRow,
	ModeNativePipelined:  testQueueRow,
	ModeRDMOAppendOwned:  testQueueRow,
	ModeRDMOAppendCold:   testQueueRow,
	ModeRDMOAppendDrive:  testQueueRow,
	ModeRDMOAppendShared: testQueueRow,
	ModeFlushLoad:        testQueueRow,
	"scatter/<iovs>":     testScatterRow,
	ModeFlushIdle:        testFlushRow,
	ModeFlushIdleDrive:   testFlushRow,
	ModeWorkload:         testWorkloadRow,

	"chase/<depth>":                  testOpsRow(chaseAnswer),
	"chase/<depth>/call":             testOpsRow(chaseAnswer),
	"chase/<depth>/pipelined":        testOpsRow(nil), // answers checked inline, as chase/<depth>'s
	"native-chase/<depth>":           testOpsRow(nil),
	"native-chase/<depth>/pipelined": testOpsRow(nil),
	ModeKVLookup:                     testOpsRow(kvAnswer),
	ModeKVLookup + opsCallSuffix:     testOpsRow(kvAnswer),
	ModeNativeKVLookup:               testOpsRow(nil),
	ModeFetchAdd:                     testOpsRow(fetchAddAnswer),
	ModeFetchAdd + opsCallSuffix:     testOpsRow(fetchAddAnswer),
	ModeNativeFetchAdd:               testOpsRow(nil),
	ModeFetchAddPipelined:            testOpsRow(fetchAddAnyOrder),
	ModeFetchAddWasm:                 testOpsRow(fetchAddAnswer),
	ModeFetchAddWasmPipe:             testOpsRow(fetchAddAnyOrder),
	ModeFetchAddPlugin:               testOpsRow(fetchAddAnswer),
	ModeFetchAddPluginPipe:           testOpsRow(fetchAddAnyOrder),
}

func TestEveryRowHasCheckTest(t *testing.T) {
	all, err := expandModes([]string{"all"}, []int{1, 4})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range all {
		r := mustRow(name)
		test := rowCheckTests[r.Pattern]
		if test == nil {
			t.Errorf("row %s (%s) has no check test in rowCheckTests", name, r.Pattern)
			continue
		}
		t.Run(name, func(t *testing.T) { test(t, name) })
	}
}

// testTarget is a target process's memory side without a worker or a
// service: real UCX memory for the rows' checks.
func testTarget(t *testing.T) *benchTarget {
	t.Helper()
	ucxAvailable(t)
	uctx, err := ucp.NewContext(ucp.ContextOptions{Name: "bench-row-test"})
	if err != nil {
		t.Fatal(err)
	}
	tg := &benchTarget{uctx: uctx, workers: map[string]*workerState{}}
	t.Cleanup(func() {
		for _, m := range []*ucp.Memory{tg.queue.mem, tg.scat} {
			if m != nil {
				m.Close()
			}
		}
		tg.opsClose()
		tg.workloadClose()
		uctx.Close()
	})
	return tg
}

func wantErr(t *testing.T, what string, err error, says string) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), says) {
		t.Errorf("%s: %v, want an error saying %q", what, err, says)
	}
}

// testNoData: ucx_perftest checks no data; the row says so (never
// verified) rather than claiming a check.
func testNoData(t *testing.T, name string) {
	r := mustRow(name)
	if !r.NoData || r.Check != nil || r.Drive == nil {
		t.Errorf("%s: NoData %v, check %v, drive %v", name, r.NoData, r.Check != nil, r.Drive != nil)
	}
}

// testSinkRow: every message and byte each initiator sent reached the
// sink, none out of order.
func testSinkRow(t *testing.T, name string) {
	check := mustRow(name).Check
	tg := testTarget(t)
	req := targetReq{Mode: name, Size: 64, Counts: []uint64{3, 2}}
	tg.sinkCount[0].Store(3)
	tg.sinkBytes[0].Store(3 * 64)
	tg.sinkCount[1].Store(2)
	tg.sinkBytes[1].Store(2 * 64)
	if err := check(tg, req); err != nil {
		t.Fatalf("good round: %v", err)
	}
	tg.sinkCount[0].Add(3)
	tg.sinkBytes[0].Add(3 * 64)
	tg.sinkCount[1].Add(1) // one of the next round's two lost
	tg.sinkBytes[1].Add(64)
	wantErr(t, "lost message", check(tg, req), "initiator 1 sent 2 messages; the sink counted 1")
	tg.sinkCount[0].Add(3)
	tg.sinkBytes[0].Add(3*64 - 1)
	tg.sinkCount[1].Add(2)
	tg.sinkBytes[1].Add(2 * 64)
	wantErr(t, "short message", check(tg, req), "initiator 0 sent 192 bytes; the sink counted 191")
	tg.sinkErrs.Add(1)
	wantErr(t, "out of order", check(tg, targetReq{Size: 64, Counts: []uint64{0, 0}}), "out of order")
}

// testQueueRow: exactly the records sent, once each, intact; in order
// for the rows whose writers keep it.
func testQueueRow(t *testing.T, name string) {
	r := mustRow(name)
	tg := testTarget(t)
	const size, round = 24, 7
	ordered := name != ModeNativeBlocking && name != ModeNativePipelined
	write := func(recs [][2]int) {
		info, err := tg.resetQueue(context.Background(), 2*queueSlotBytes, nil, false, false)
		if err != nil {
			t.Fatal(err)
		}
		mem := tg.queue.mem.Bytes()
		data := mem[info.Data-tg.queue.mem.Address():]
		for i, rec := range recs {
			fillRecord(data[i*size:(i+1)*size], rec[0], round, uint32(rec[1]))
		}
		binary.LittleEndian.PutUint64(mem[info.Base-tg.queue.mem.Address():], info.Data+uint64(len(recs)*size))
	}
	req := targetReq{Mode: name, Size: size, Round: round, Counts: []uint64{3, 2}}
	write([][2]int{{0, 0}, {1, 0}, {0, 1}, {1, 1}, {0, 2}})
	if err := r.Check(tg, req); err != nil {
		t.Fatalf("good queue: %v", err)
	}
	write([][2]int{{0, 0}, {1, 0}, {0, 1}, {1, 1}})
	wantErr(t, "lost", r.Check(tg, req), "data was lost")
	write([][2]int{{0, 0}, {1, 0}, {0, 1}, {1, 1}, {0, 1}})
	wantErr(t, "duplicated", r.Check(tg, req), "twice")
	write([][2]int{{0, 0}, {1, 0}, {0, 1}, {1, 1}, {0, 2}})
	tg.queue.mem.Bytes()[queueSlotBytes+3*size+10] ^= 1
	wantErr(t, "corrupted", r.Check(tg, req), "not a record of this round")
	write([][2]int{{0, 1}, {1, 0}, {0, 0}, {1, 1}, {0, 2}})
	if err := r.Check(tg, req); ordered {
		wantErr(t, "reordered", err, "reordered")
	} else if err != nil {
		t.Errorf("%s writers interleave freely: %v", name, err)
	}
}

// testScatterRow: every chunk of every scatter at its place, intact.
func testScatterRow(t *testing.T, name string) {
	r := mustRow(name)
	tg := testTarget(t)
	l := scatterLayout{IOVs: r.IOVs, Size: 16, Lane: 16 * 4}
	m, err := tg.uctx.Allocate(int(2 * l.area()))
	if err != nil {
		t.Fatal(err)
	}
	tg.scat = m
	counts := []uint64{4, 3}
	for id, n := range counts {
		for op := 0; op < int(n); op++ {
			for iov := 0; iov < l.IOVs; iov++ {
				off := l.offset(id, op, iov)
				fillRecord(m.Bytes()[off:off+16], id, 5, l.chunkSeq(op, iov))
			}
		}
	}
	req := targetReq{Mode: name, Round: 5, Counts: counts, Layout: l}
	if err := r.Check(tg, req); err != nil {
		t.Fatalf("good scatters: %v", err)
	}
	req.Counts = []uint64{4, 4}
	wantErr(t, "lost scatter", r.Check(tg, req), "initiator 1 scatter 3 chunk 0")
	req.Counts = counts
	m.Bytes()[l.offset(1, 2, l.IOVs-1)+3] ^= 0xff
	wantErr(t, "corrupted chunk", r.Check(tg, req), "did not land")
}

// testFlushRow: an idle flush row checks every flush's answer: one that
// reports failed requests fails the round.
func testFlushRow(t *testing.T, name string) {
	r := mustRow(name)
	if r.Check != nil || !r.RoundTrip {
		t.Errorf("%s: a flush round trip with its own check expected", name)
	}
	ok := func(context.Context) (wire.FlushResponse, error) { return wire.FlushResponse{}, nil }
	if err := checkFlush(ok); err != nil {
		t.Fatal(err)
	}
	failed := func(context.Context) (wire.FlushResponse, error) { return wire.FlushResponse{Failed: 2}, nil }
	wantErr(t, "failed requests", checkFlush(failed), "2 failed requests")
	broken := func(context.Context) (wire.FlushResponse, error) { return wire.FlushResponse{}, errors.New("gone") }
	wantErr(t, "no answer", checkFlush(broken), "gone")
}

// testWorkloadRow: the demo server's verification of the regions: every
// record once, intact, in order, the tail after the last, every chunk at
// its place, nothing else written.
func testWorkloadRow(t *testing.T, name string) {
	r := mustRow(name)
	tg := testTarget(t)
	const ops = 600
	req := workloadReq{Ops: ops, Seeds: []uint64{11, 12}, FlushEvery: demo.DefaultFlushEvery}
	tg.wl = workloadTarget{ws: &workerState{}, req: req}
	for i, seed := range req.Seeds {
		qn, sn := demo.WorkloadRegions(req.workload(i, ops))
		q, err := tg.uctx.Allocate(qn)
		if err != nil {
			t.Fatal(err)
		}
		s, err := tg.uctx.Allocate(sn)
		if err != nil {
			t.Fatal(err)
		}
		tg.wl.queues, tg.wl.scats = append(tg.wl.queues, q), append(tg.wl.scats, s)
		clear(q.Bytes())
		clear(s.Bytes())
		// What the worker writes for the first `done` operations.
		g, off := demo.NewGenerator(seed), 8
		for n := 0; n < ops-100*i; n++ {
			op := g.Next()
			if op.Scatter {
				for k, c := range op.Chunks {
					demo.FillWorkloadChunk(s.Bytes()[c.Off:], seed, op.Index, k, c.Len)
				}
				continue
			}
			demo.FillWorkloadRecord(q.Bytes()[off:], seed, op.Seq, op.Size)
			off += op.Size
		}
		binary.LittleEndian.PutUint64(q.Bytes(), q.Address()+uint64(off))
	}
	good := targetReq{Mode: name, Counts: []uint64{ops, ops - 100}}
	if err := r.Check(tg, good); err != nil {
		t.Fatalf("good workload: %v", err)
	}
	wantErr(t, "lost operations", r.Check(tg, targetReq{Counts: []uint64{ops, ops - 99}}), "initiator 1")
	wantErr(t, "extra operations", r.Check(tg, targetReq{Counts: []uint64{ops - 1, ops - 100}}), "initiator 0")
	q := tg.wl.queues[0].Bytes()
	q[20] ^= 0x40
	wantErr(t, "corrupted record", r.Check(tg, good), "initiator 0: queue: record")
	q[20] ^= 0x40
	s := tg.wl.scats[1].Bytes()
	s[len(s)-1] = 1
	wantErr(t, "stray write", r.Check(tg, good), "initiator 1: scatter: stray byte")
}

// testOpsRow: the target's check after an op-pack round (every counter
// moved by exactly the fetch-adds done, nothing else changed), and the
// initiator's check of every answer (answer: nil for rows whose answers
// another test covers or which check them on the native path).
func testOpsRow(answer func(t *testing.T, s roundSpec)) func(t *testing.T, name string) {
	return func(t *testing.T, name string) {
		r := mustRow(name)
		tg := testTarget(t)
		sp, err := tg.opsLayout(context.Background(), opsLayoutReq{Round: 3, Initiators: 2, ValueSizes: []int{8}, ValueSize: 8})
		if err != nil {
			t.Fatal(err)
		}
		fetchAdds := strings.Contains(name, "fetch-add")
		adds := []uint64{0, 0}
		if fetchAdds {
			adds = []uint64{5, 2}
		}
		mem := tg.ops.mem.Bytes()
		for i, n := range adds {
			binary.LittleEndian.PutUint64(mem[i*opsLine:], sp.Starts[i]+n)
		}
		req := targetReq{Mode: name, Counts: []uint64{5, 2}}
		if err := r.Check(tg, req); err != nil {
			t.Fatalf("good round: %v", err)
		}
		binary.LittleEndian.PutUint64(mem[opsLine:], sp.Starts[1]+adds[1]+1)
		wantErr(t, "counter moved wrongly", r.Check(tg, req), "initiator 1's counter")
		binary.LittleEndian.PutUint64(mem[opsLine:], sp.Starts[1]+adds[1])
		mem[len(mem)-1] ^= 1
		wantErr(t, "stray write", r.Check(tg, req), "changed target memory")
		if answer != nil {
			answer(t, roundSpec{Mode: name, Round: 3, Ops: &sp})
		}
	}
}

func chaseAnswer(t *testing.T, s roundSpec) {
	d, _, _ := parseChase(s.Mode)
	c := chaseCall(d)(s, 1)
	end := s.Ops.Chains[1][d]
	if err := c.check(0, initiator.Result{Value: end}); err != nil {
		t.Errorf("right answer: %v", err)
	}
	wantErr(t, "wrong address", c.check(1, initiator.Result{Value: end + 64}), "call 1 reached")
	wantErr(t, "data with the answer", c.check(1, initiator.Result{Value: end, Data: []byte{1}}), "with 1 bytes")
}

func kvAnswer(t *testing.T, s roundSpec) {
	c := kvCall(s, 1)
	v := make([]byte, s.Ops.ValueSize)
	fillRecord(v, 1, s.Round, 2)
	if err := c.check(2, initiator.Result{Data: v}); err != nil {
		t.Errorf("right answer: %v", err)
	}
	wantErr(t, "another key's value", c.check(3, initiator.Result{Data: v}), "not its value")
	wantErr(t, "short value", c.check(2, initiator.Result{Data: v[:4]}), "not its value")
}

func fetchAddAnswer(t *testing.T, s roundSpec) {
	c := fetchAddCall(s, 0)
	if err := c.check(4, initiator.Result{Value: s.Ops.Starts[0] + 4}); err != nil {
		t.Errorf("right answer: %v", err)
	}
	wantErr(t, "lost add", c.check(4, initiator.Result{Value: s.Ops.Starts[0] + 3}), "fetch-add returned")
}

// fetchAddAnyOrder: a pipelined round's answers may come in any order,
// but each is the start plus a number below the calls issued, never twice.
func fetchAddAnyOrder(t *testing.T, s roundSpec) {
	c := fetchAddCall(s, 1)
	start := s.Ops.Starts[1]
	for _, n := range []uint64{2, 0, 1, 70, 3} { // 70: the bitmap grows
		if err := c.unordered(80, initiator.Result{Value: start + n}); err != nil {
			t.Errorf("answer %d: %v", n, err)
		}
	}
	wantErr(t, "the same answer twice", c.unordered(80, initiator.Result{Value: start + 70}), "twice")
	wantErr(t, "beyond the calls issued", c.unordered(80, initiator.Result{Value: start + 80}), "fetch-add returned")
	wantErr(t, "below the start", c.unordered(80, initiator.Result{Value: start - 1}), "fetch-add returned")
	if err := fetchAddCall(s, 1).unordered(80, initiator.Result{Value: start + 2}); err != nil {
		t.Errorf("a new round's first answer: %v", err)
	}
}
