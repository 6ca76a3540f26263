package e2e_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/openrdmo/rdmo/dpu"
	appendop "github.com/openrdmo/rdmo/plugins/append"
	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/ucp/ucptest"
)

// isolationConfigs are the worker placements the isolation tests run in.
var isolationConfigs = []struct {
	mode workerMode
	tr   ucptest.Transport
}{
	{modeInProcess, ucptest.Transports[0]},
	{modeInProcess, ucptest.Transports[1]},
	{modeUROM, ucptest.Transports[0]},
}

func startFor(t *testing.T, tr ucptest.Transport, mode workerMode) func() rdmoWorker {
	return func() rdmoWorker { return startWorker(t, tr, appendop.Owned, mode) }
}

// flushReport asks the initiator process to flush and returns what the
// flush reported: "" when no request failed, else the error text, which
// names the first failure's status.
func flushReport(t *testing.T, p *initiatorProc) string {
	t.Helper()
	p.Send("flush")
	f, err := p.Await("DONE", 30*time.Second)
	if err != nil {
		if !strings.Contains(err.Error(), ": ERR flush") {
			t.Fatalf("flush: %v", err)
		}
		return err.Error()
	}
	if len(f) != 4 || f[2] != "0" {
		t.Fatalf("flush answer %v", f)
	}
	return ""
}

// reports says whether a flush report names status as the first failure.
func reports(report string, st rdmo.Status) bool {
	return report != "" && strings.Contains(report, st.Err().Error())
}

// Two clients on one worker: an initiator connected for client A can never
// touch client B's memory, whatever region ids, addresses or client id it
// names, and A's target cannot touch B's request queues or regions with
// commands. Every attempt is reported to A (never to B), B's memory stays
// byte for byte as it was, and B keeps working.
func TestIsolationTwoClients(t *testing.T) {
	for _, c := range isolationConfigs {
		t.Run(c.mode.String()+"/"+c.tr.Name, func(t *testing.T) {
			ucptest.CheckLeaks(t)
			tr := c.tr
			tgs := newTargets(t, tr, startFor(t, tr, c.mode), clientA, clientB)
			a, b := tgs[0], tgs[1]
			qA, sA := a.fencedQueue(64<<10, 8), a.fenced(4096, 0)
			qB, sB := b.fencedQueue(64<<10, 8), b.fenced(4096, 0)
			rnd := rand.New(rand.NewPCG(1, 2))
			for i := range sB.data() {
				sB.data()[i] = byte(rnd.Uint32())
			}
			// B is live: its queue's tail is cached in the worker.
			rawB := b.raw(t, tr)
			if err := sendRaw(rawB, appendReq(clientB, qB.base, qB.id, qB.id, ack), []byte("B's data"), 0); err != nil {
				t.Fatal(err)
			}
			if acks, rsp, err := flushRaw(rawB, clientB, 1, 1); err != nil || rsp.Failed != 0 || acks[0].Status != rdmo.StatusOK {
				t.Fatalf("B's first append: %+v %+v %v", acks, rsp, err)
			}
			snapB := [][]byte{bytes.Clone(qB.all), bytes.Clone(sB.all)}

			// A's initiator process, with B's region ids and addresses.
			pA := a.startInitiator(tr)
			expectFlush := func(cmd string, want rdmo.Status) {
				t.Helper()
				pA.Send(cmd)
				pA.Must(t, "DONE", 30*time.Second)
				if r := flushReport(t, pA); !reports(r, want) {
					t.Errorf("%s: flush reports %q; want %v", cmd, r, want)
				}
			}
			expectFlush(fmt.Sprintf("append8 %d %d", qB.base, qB.id), rdmo.StatusRegionNotOwned)
			expectFlush(fmt.Sprintf("scatter16 %d %d %d", sB.id, sB.base, 16), rdmo.StatusRegionNotOwned)
			expectFlush(fmt.Sprintf("scatter16 %d %d %d", sA.id, sB.base, 16), rdmo.StatusOutOfBounds)
			expectFlush(fmt.Sprintf("append8 %d %d", qB.base, qA.id), rdmo.StatusOutOfBounds)
			pA.Send(fmt.Sprintf("append8 %d %d", qA.base, qA.id))
			pA.Must(t, "DONE", 30*time.Second)
			if r := flushReport(t, pA); r != "" {
				t.Errorf("A's own append: %s", r)
			}

			// Every region id there is (and a few more), at B's addresses,
			// from A's connection; and B's client id in the header.
			rawA := a.raw(t, tr)
			maxID := slices.Max([]uint64{qA.id, sA.id, qB.id, sB.id})
			sent := 0
			for id := uint64(0); id <= maxID+16; id++ {
				for _, addr := range []uint64{sB.base, sB.base + 512, qB.base} {
					mustSend(t, rawA, scatterReq(clientA, ack, 1), iovs(t, addr, id, []byte("intruder")))
					mustSend(t, rawA, appendReq(clientA, addr, id, id, ack), []byte("intruder"))
					sent += 2
				}
			}
			mustSend(t, rawA, appendReq(clientB, qB.base, qB.id, qB.id, ack), []byte("intruder"))
			mustSend(t, rawA, scatterReq(clientB, ack, 1), iovs(t, sB.base, sB.id, []byte("intruder")))
			sent += 2
			acks, rsp, err := flushRaw(rawA, clientA, 2, sent)
			if err != nil {
				t.Fatal(err)
			}
			byStatus := map[rdmo.Status]int{}
			for _, ak := range acks {
				byStatus[ak.Status]++
			}
			for st := range byStatus {
				if !slices.Contains([]rdmo.Status{rdmo.StatusUnknownRegion, rdmo.StatusRegionNotOwned, rdmo.StatusOutOfBounds, rdmo.StatusClientMismatch}, st) {
					t.Errorf("a request aimed at B's memory ended with %v", st)
				}
			}
			if int(rsp.Failed) != sent || byStatus[rdmo.StatusClientMismatch] != 2 || byStatus[rdmo.StatusRegionNotOwned] == 0 {
				t.Errorf("flush %+v, acks by status %v for %d requests", rsp, byStatus, sent)
			}

			// Commands of A's target against B's objects.
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			wAddrB := func() []byte { b, _ := rawB.w.Address(); return b }()
			for _, cmd := range []struct {
				cmd  dpu.Command
				want error
			}{
				{dpu.MRDereg{Client: clientA, Region: qB.id}, rdmo.ErrRegionNotOwned},
				{dpu.RQDestroy{Client: clientA, RQ: rawB.rq}, rdmo.ErrClientMismatch},
				{dpu.RQCreate{Client: clientA, Addr: wAddrB}, rdmo.ErrClientMismatch}, // ErrRQExists
				{dpu.ClientInit{ID: clientB, Addr: a.addr}, rdmo.ErrClientMismatch},   // ErrClientExists
			} {
				if _, err := a.worker.Do(ctx, cmd.cmd); !errors.Is(err, cmd.want) {
					t.Errorf("%T %+v from A: %v, want %v", cmd.cmd, cmd.cmd, err, cmd.want)
				}
			}

			for i, f := range []fenced{qB, sB} {
				if err := f.unchanged(snapB[i]); err != nil {
					t.Errorf("B's memory: %v", err)
				}
			}
			for _, f := range []fenced{qA, sA} {
				if err := f.guardsOK(); err != nil {
					t.Error(err)
				}
			}
			// B never hears of A's failures, and still works.
			if err := sendRaw(rawB, appendReq(clientB, qB.base, qB.id, qB.id, ack), []byte("B again"), 0); err != nil {
				t.Fatal(err)
			}
			acks, rsp, err = flushRaw(rawB, clientB, 3, 1)
			if err != nil || rsp.Failed != 0 || acks[0].Status != rdmo.StatusOK {
				t.Fatalf("B after A's attempts: %+v %+v %v", acks, rsp, err)
			}
			if got := string(qB.data()[16:23]); got != "B again" {
				t.Fatalf("B's append: %q", got)
			}
			t.Logf("%d requests aimed at B's memory from A's connection: %v", sent, byStatus)
			pA.Send("quit")
		})
	}
}

// countRecords walks a queue of self-describing records and returns how
// many it holds for each initiator; checkQueue then proves them intact and
// exactly once.
func countRecords(mem []byte) map[int]int {
	n := map[int]int{}
	for off := 0; off+recordHeader <= len(mem); {
		size := int(binary.LittleEndian.Uint32(mem[off:]))
		if size < recordHeader || size > len(mem)-off {
			break
		}
		n[int(binary.LittleEndian.Uint16(mem[off+4:]))]++
		off += size
	}
	return n
}

// A region deregistered while an initiator streams appends into it: the
// MR_DEREG answer comes with the cached tail written back over whole
// records; every later request naming the region fails (RegionGone or
// UnknownRegion: region ids are never reused) and is reported; and from the
// answer on the region is never written again, while the client's other
// regions keep working.
func TestIsolationDeregMidStream(t *testing.T) {
	for _, c := range isolationConfigs {
		t.Run(c.mode.String()+"/"+c.tr.Name, func(t *testing.T) {
			ucptest.CheckLeaks(t)
			tr := c.tr
			tg := newTargets(t, tr, startFor(t, tr, c.mode), clientA)[0]
			r := tg.fencedQueue(16<<20, 8)
			other := tg.fencedQueue(4<<20, 8)
			p := tg.startInitiator(tr)
			p.Send(fmt.Sprintf("records 0 1000000 %d %d 50 5", r.base, r.id))
			deadline := time.Now().Add(30 * time.Second)
			for r.tail() < r.base+8+256<<10 {
				if time.Now().After(deadline) {
					t.Fatal("the stream did not get going")
				}
				time.Sleep(time.Millisecond)
			}
			regions := tg.worker.Stats().Regions
			tg.do(dpu.MRDereg{Client: clientA, Region: r.id})
			snap := bytes.Clone(r.all)
			written := countRecords(r.data()[8 : r.tail()-r.base])
			if err := checkQueue(r.data()[8:r.tail()-r.base], written); err != nil {
				t.Fatalf("queue as MR_DEREG left it: %v", err)
			}
			if st := tg.worker.Stats(); st.Regions != regions-1 {
				t.Errorf("%d regions after MR_DEREG, had %d", st.Regions, regions)
			}

			gone := func(err error) bool {
				return err != nil && (strings.Contains(err.Error(), rdmo.StatusRegionGone.Err().Error()) ||
					strings.Contains(err.Error(), rdmo.StatusUnknownRegion.Err().Error()))
			}
			if _, err := p.Await("DONE", time.Minute); !gone(err) {
				t.Fatalf("the stream into the deregistered region: %v, want a region-gone report", err)
			}
			// More traffic naming the region.
			p.Send(fmt.Sprintf("records 1 300 %d %d 10 6", r.base, r.id))
			if _, err := p.Await("DONE", time.Minute); !gone(err) {
				t.Fatalf("appends to the deregistered region: %v", err)
			}
			p.Send(fmt.Sprintf("scatter16 %d %d %d", r.id, r.base+64, 8))
			p.Must(t, "DONE", 30*time.Second)
			if r := flushReport(t, p); !reports(r, rdmo.StatusRegionGone) && !reports(r, rdmo.StatusUnknownRegion) {
				t.Errorf("scatter into the deregistered region: flush reports %q", r)
			}
			// The client's other queue works.
			p.Send(fmt.Sprintf("records 2 300 %d %d 10 7", other.base, other.id))
			p.Must(t, "DONE", time.Minute)
			if err := checkQueue(other.data()[8:other.tail()-other.base], map[int]int{2: 300}); err != nil {
				t.Fatal(err)
			}
			if err := r.unchanged(snap); err != nil {
				t.Fatalf("written after MR_DEREG answered: %v", err)
			}
			t.Logf("%d records in the queue when MR_DEREG answered; nothing written after", written[0])
			p.Send("quit")
		})
	}
}
