package e2e_test

import (
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/openrdmo/rdmo/dpu"
	"github.com/openrdmo/rdmo/internal/testproc"
	"github.com/openrdmo/rdmo/internal/testutil"
	"github.com/openrdmo/rdmo/ucp/ucptest"
)

// A local peer that dies between claiming a slot of the worker's
// shared-memory receive FIFO and marking it ready blocks that FIFO for
// every local peer (docs/SECURITY.md finding 9). Such a death is a matter
// of microseconds; this test makes it happen for sure by claiming a slot
// in each of the worker process's FIFOs and never filling it, as the dead
// peer would have, and then kills an initiator (a peer failure starts the
// worker's check).
//
// "filled": the worker finds the slots still waited on after its check's
// timeout, fills them, and reads on: every other initiator's records
// arrive, exactly once, and the worker lives. "repair-off": with
// RDMO_SHM_FIFO_REPAIR=0 in the worker's environment (and so on a UCX
// whose FIFO layout ucp does not know) the worker must say why and end its
// process, and the other initiators must get an error instead of waiting
// for good.
func TestFaultShmReceiveQueueBlocked(t *testing.T) {
	tr := ucptest.Transports[0]
	if tr.Name != "shm" || !tr.PeerFailureDetection() {
		t.Fatalf("transport %s (peer-failure detection %v), want shm with detection", tr.Name, tr.PeerFailureDetection())
	}
	for _, repair := range []bool{true, false} {
		name := "filled"
		if !repair {
			name = "repair-off"
		}
		t.Run(name, func(t *testing.T) {
			testproc.CheckNoLeftovers(t)
			ucptest.CheckLeaks(t)
			if !repair {
				t.Setenv("RDMO_SHM_FIFO_REPAIR", "0") // the worker process inherits it
			}
			rw, tg, other := twoClientsOfUROMWorker(t, tr)
			qs := other.fencedQueue(16<<20, 8)
			first := tg.startInitiator(tr)
			victim := tg.startInitiator(tr)
			survivor := other.startInitiator(tr)
			// Served before: the FIFOs work.
			bg := startAppender(survivor, qs, 100, 1)
			if err := bg.stop(qs); err != nil {
				t.Fatalf("before the block: %v", err)
			}
			// A peer failure with the FIFOs fine: the check passes, the
			// worker lives on and serves.
			first.Kill()
			testutil.WaitFor(t, "the worker's check of its FIFOs after a peer failure", func() bool { return tg.worker.Stats().ShmChecks == 1 })
			qs2 := other.fencedQueue(16<<20, 8)
			bg = startAppender(survivor, qs2, 100, 1)
			if err := bg.stop(qs2); err != nil {
				t.Fatalf("after a check that passed: %v", err)
			}
			n := blockShmReceiveQueues(t, rw.W.PID)
			if n == 0 {
				t.Fatalf("found no shared-memory receive FIFO of the worker process (pid %d): UCX's layout changed?", rw.W.PID)
			}
			// The other initiator streams into the blocked FIFO: its
			// requests are in flight (some in UCX's queue for a full
			// FIFO) while it is blocked. A late one connects after the
			// block: its wire-up waits behind the claimed slot too.
			qs3 := other.fencedQueue(16<<20, 8)
			bg = startAppender(survivor, qs3, 300, 3)
			ql := other.fencedQueue(1<<20, 8)
			late := other.startInitiator(tr)
			late.Send(fmt.Sprintf("records 0 10 %d %d 0 5", ql.base, ql.id))
			victim.Kill()
			killed := time.Now()
			if repair {
				if err := bg.stop(qs3); err != nil {
					t.Fatalf("the other initiator: %v\nworker stats: %+v", err, tg.worker.Stats())
				}
				if _, err := late.Await("DONE", 2*time.Minute); err != nil {
					t.Fatalf("the late initiator: %v", err)
				}
				if err := ql.guardsOK(); err != nil {
					t.Error(err)
				}
				if rw.ended() {
					t.Fatalf("the worker process ended: %s", rw.W.Reason())
				}
				st := tg.worker.Stats()
				// Every claimed slot is filled: the FIFOs mapped twice
				// (two claims) are the worker's own, which the probes
				// go through, so the check passes only after both.
				if st.ShmSlotsFilled != uint64(n) || st.ShmChecks < 2 {
					t.Errorf("worker stats: %d slots filled, %d checks passed; want the %d blocked, at least 2", st.ShmSlotsFilled, st.ShmChecks, n)
				}
				t.Logf("the worker filled %d slots; the other initiators done %v after the kill (%d records)",
					st.ShmSlotsFilled, time.Since(killed).Round(time.Millisecond), bg.records())
				survivor.Send("quit")
				late.Send("quit")
				return
			}
			select {
			case <-rw.W.Gone():
			case <-time.After(time.Until(testutil.Deadline(t))):
				t.Fatalf("the worker did not end its process; stats %+v", tg.worker.Stats())
			}
			t.Logf("worker process ended %v after the kill: %s", time.Since(killed).Round(time.Millisecond), rw.W.Reason())
			if !strings.Contains(rw.W.Reason(), dpu.ErrReceiveQueueBlocked.Error()) {
				t.Errorf("worker's reason %q, want it to name the blocked receive queue", rw.W.Reason())
			}
			// The other initiator: its sends went into the blocked FIFO;
			// once the worker's process is gone UCX fails them
			// (keepalive), and it says so.
			if err := bg.stop(qs3); err == nil || !strings.Contains(err.Error(), "peer failed") {
				t.Fatalf("the other initiator after the worker's end: %v, want a peer failure", err)
			}
			// The late one's wire-up never reached the worker, so UCX
			// cannot tell it that the worker died; its target does (here:
			// the test, through SIGUSR1).
			late.Signal(syscall.SIGUSR1)
			if _, err := late.Await("DONE", 2*time.Minute); err == nil || !strings.Contains(err.Error(), "told out of band") {
				t.Fatalf("the late initiator after its target told it: %v, want that peer failure", err)
			}
			survivor.Kill()
			late.Kill()
		})
	}
}

// twoClientsOfUROMWorker starts a UROM worker process (append, flush,
// scatter) and two targets of it, clients 1 and 2.
func twoClientsOfUROMWorker(t *testing.T, tr ucptest.Transport) (rw remote, tg, other *target) {
	tgs := newTargets(t, tr, func() rdmoWorker {
		rw = startUROMWorker(t, tr, []string{"append", "flush", "scatter"}, nil)
		return rw
	}, 1, 2)
	return rw, tgs[0], tgs[1]
}

// ended reports whether the worker process has ended.
func (r remote) ended() bool {
	select {
	case <-r.W.Gone():
		return true
	default:
		return false
	}
}

// blockShmReceiveQueues claims one slot in every mapping of a shared-memory
// receive FIFO that process pid owns and never fills it: what a peer killed
// in the middle of a send leaves behind. A process maps some of its FIFOs
// twice (UCX attaches its own FIFO again for an endpoint to itself): those
// get two claimed slots, as two dead peers would leave. It knows UCX 1.13's FIFO control block
// (uct_mm_fifo_ctl_t: the head, the count of claimed slots, at offset 0;
// the owner's pid at 136) and finds the FIFOs by that pid; it maps them
// through /proc/PID/map_files (root). It returns how many it blocked.
func blockShmReceiveQueues(t *testing.T, pid int) int {
	t.Helper()
	maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(maps), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || !strings.Contains(f[1], "s") ||
			!(strings.HasPrefix(f[5], "/SYSV") || strings.HasPrefix(f[5], "/dev/shm/ucx_shm_posix")) {
			continue
		}
		r := strings.Split(f[0], "-")
		lo, err1 := strconv.ParseUint(r[0], 16, 64)
		hi, err2 := strconv.ParseUint(r[1], 16, 64)
		if err1 != nil || err2 != nil || hi-lo < 4096 {
			continue
		}
		fd, err := syscall.Open(fmt.Sprintf("/proc/%d/map_files/%s", pid, f[0]), syscall.O_RDWR, 0)
		if err != nil {
			t.Fatalf("open the worker's mapping %s: %v", f[0], err)
		}
		mem, err := syscall.Mmap(fd, 0, 4096, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
		syscall.Close(fd)
		if err != nil {
			t.Fatalf("map the worker's mapping %s: %v", f[0], err)
		}
		if int(int32(binary.LittleEndian.Uint32(mem[136:]))) == pid {
			// Claim the slot as a sender does: an atomic increment.
			head := atomic.AddUint64((*uint64)(unsafe.Pointer(&mem[0])), 1)
			t.Logf("blocked the worker's FIFO %s at slot %d", f[5], head&^(1<<63)-1)
			n++
		}
		syscall.Munmap(mem)
	}
	return n
}
