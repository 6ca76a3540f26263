package e2e_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/openrdmo/rdmo/dpu"
	"github.com/openrdmo/rdmo/host/initiator"
	"github.com/openrdmo/rdmo/internal/testproc"
	"github.com/openrdmo/rdmo/internal/testutil"
	appendop "github.com/openrdmo/rdmo/plugins/append"
	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/wire"
	"github.com/openrdmo/rdmo/ucp"
	"github.com/openrdmo/rdmo/ucp/ucptest"
	"github.com/openrdmo/rdmo/urom"
)

// The fault tests need processes the harness's TestMain does not know:
// their roles take over before TestMain.
func init() {
	switch testproc.Role() {
	case "target":
		os.Exit(faultTargetMain())
	case "targetworker":
		os.Exit(faultTargetWorkerMain())
	case "loader":
		os.Exit(faultLoaderMain())
	}
}

// ---- child roles ----

// faultTargetMain is a target process: it allocates a queue (tail set),
// prints "TARGET addr va len rkey" and progresses its worker until stdin
// closes (or it is killed).
func faultTargetMain() int {
	ctx, w, err := ucptest.NewChildWorker()
	if err != nil {
		fmt.Println("ERR", err)
		return 1
	}
	const size = 64 << 20
	mem, err := ctx.Allocate(size)
	if err != nil {
		fmt.Println("ERR", err)
		return 1
	}
	binary.LittleEndian.PutUint64(mem.Bytes(), mem.Address()+8)
	addr, _ := w.Address()
	rk, _ := mem.PackRkey()
	fmt.Printf("TARGET %x %d %d %x\n", addr, mem.Address(), size, rk)
	stdin := make(chan struct{})
	go func() { io.Copy(io.Discard, os.Stdin); close(stdin) }()
	for {
		select {
		case <-stdin:
			mem.Close()
			w.Close()
			ctx.Close()
			return 0
		default:
		}
		if n, _ := w.Progress(); n == 0 {
			w.Wait(time.Millisecond)
		}
	}
}

// faultTargetWorkerMain is a target with an in-process RDMO worker (client
// 1, one queue region): "READY waddr client qbase qid", then commands on
// stdin: "rq <hex addr>" (RQ_CREATE), "rqs", "tail", "destroy <rq>",
// "quit".
func faultTargetWorkerMain() int {
	w, err := dpu.New(dpu.Config{Handlers: handlers(appendop.Owned), DrainTimeout: 2 * time.Second})
	if err != nil {
		fmt.Println("ERR", err)
		return 1
	}
	// The target's worker is made, progressed and closed on one goroutine
	// (UCX binds a worker to the thread that made it).
	type made struct {
		ctx  *ucp.Context
		addr []byte
		err  error
	}
	ready := make(chan made, 1)
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		ctx, uw, err := ucptest.NewChildWorker()
		if err != nil {
			ready <- made{err: err}
			return
		}
		defer uw.Close()
		addr, err := uw.Address()
		ready <- made{ctx, addr, err}
		if err != nil {
			return
		}
		for {
			select {
			case <-stop:
				return
			default:
			}
			if n, _ := uw.Progress(); n == 0 {
				uw.Wait(time.Millisecond)
			}
		}
	}()
	m := <-ready
	if m.err != nil {
		fmt.Println("ERR", m.err)
		return 1
	}
	ctx, addr := m.ctx, m.addr
	const size = 256 << 20
	mem, err := ctx.Allocate(size)
	if err != nil {
		fmt.Println("ERR", err)
		return 1
	}
	binary.LittleEndian.PutUint64(mem.Bytes(), mem.Address()+8)
	rk, _ := mem.PackRkey()
	bg := context.Background()
	n, err := w.Do(bg, dpu.ClientInit{ID: 1, Addr: addr})
	if err != nil {
		fmt.Println("ERR", err)
		return 1
	}
	reg, err := w.Do(bg, dpu.MRReg{Client: 1, VA: mem.Address(), Len: size, PackedRkey: rk})
	if err != nil {
		fmt.Println("ERR", err)
		return 1
	}
	fmt.Printf("READY %x 1 %d %d\n", n.Addr, mem.Address(), reg.Region)
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "rq":
			a, _ := hex.DecodeString(f[1])
			n, err := w.Do(bg, dpu.RQCreate{Client: 1, Addr: a})
			if err != nil {
				fmt.Println("ERR", err)
				continue
			}
			fmt.Println("RQ", n.RQ)
		case "rqs":
			fmt.Println("RQS", w.Stats().RQs)
		case "tail":
			fmt.Println("TAIL", binary.LittleEndian.Uint64(mem.Bytes())-mem.Address())
		case "destroy":
			rq, _ := strconv.ParseUint(f[1], 10, 64)
			start := time.Now()
			_, err := w.Do(bg, dpu.RQDestroy{Client: 1, RQ: rq})
			fmt.Println("DESTROYED", time.Since(start).Milliseconds(), err)
		case "quit":
			start := time.Now()
			err := closeWithin(w, time.Minute)
			fmt.Println("CLOSED", time.Since(start).Milliseconds(), err)
			close(stop)
			<-stopped
			mem.Close()
			ctx.Close()
			return 0
		}
	}
	return 0
}

// faultLoaderMain is an initiator that appends records as fast as it can,
// flushing every 64 with a deadline of E2E_FLUSH_TIMEOUT ms, once "go"
// arrived on stdin. It prints "FLUSHED n" now and then, and "FAIL ms err"
// when a call fails (ms: since the call started); then it waits for
// "quit".
func faultLoaderMain() int {
	addr, _ := hex.DecodeString(os.Getenv("E2E_WORKER"))
	client, _ := strconv.ParseUint(os.Getenv("E2E_CLIENT"), 10, 64)
	ptr, _ := strconv.ParseUint(os.Getenv("E2E_PTR"), 10, 64)
	region, _ := strconv.ParseUint(os.Getenv("E2E_REGION"), 10, 64)
	ms, _ := strconv.Atoi(os.Getenv("E2E_FLUSH_TIMEOUT"))
	timeout := time.Duration(ms) * time.Millisecond
	in, err := initiator.New(initiator.Options{WorkerAddress: addr, ClientID: client})
	if err != nil {
		fmt.Println("ERR", err)
		return 1
	}
	fmt.Printf("ADDR %x\n", in.Address())
	sc := bufio.NewScanner(os.Stdin)
	if !sc.Scan() || sc.Text() != "go" {
		in.Close()
		return 0
	}
	flushes := 0
	for seq := 0; ; seq++ {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		start := time.Now()
		_, err := in.With(ctx, 0).Append(ptr, region, region, makeRecord(0, seq, 16+seq%112))
		if err == nil && seq%64 == 63 {
			start = time.Now()
			_, err = in.Flush(ctx)
			if flushes++; err == nil && flushes%16 == 1 {
				fmt.Println("FLUSHED", seq+1)
			}
		}
		cancel()
		if err != nil {
			fmt.Println("FAIL", time.Since(start).Milliseconds(), err)
			break
		}
	}
	for sc.Scan() {
		if sc.Text() == "quit" {
			break
		}
	}
	start := time.Now()
	in.Close()
	fmt.Println("CLOSED", time.Since(start).Milliseconds())
	return 0
}

// ---- the faults ----

// An initiator process killed with SIGKILL mid-stream. The worker notices
// (peer failure: over TCP the socket closes; over shared memory UCX checks
// the peer's process, since ucp.NewContext turns its shm error handling
// on) and frees the request queue by itself. Where UCX cannot notice
// (shm error handling turned off in the environment) the target's
// RQ_DESTROY frees it within the drain timeout. Another initiator
// appending all along loses nothing.
//
// Over shared memory the victim often dies in the middle of a rendezvous.
// That used to abort the worker process (UCX 1.13 treats a CMA read from a
// dead process as fatal on endpoints without peer-failure handling), and,
// once that was avoided, to stall the other initiator for good (its FLUSH
// waited for the dead one's Place): rendezvous now goes by active-message
// fragments (ucp.SafeRendezvousScheme) and the worker abandons the
// receives of a queue it closes (dpu abandonReceives).
func TestFaultInitiatorKilled(t *testing.T) {
	for _, tr := range ucptest.Transports {
		t.Run(tr.Name, func(t *testing.T) {
			testproc.CheckNoLeftovers(t)
			ucptest.CheckLeaks(t)
			const drain = 3 * time.Second
			tg := newTargets(t, tr, inProc(t, tr, dpu.Config{Handlers: handlers(appendop.Owned), DrainTimeout: drain}), 1)[0]
			qv := tg.fencedQueue(128<<20, 8)
			qs := tg.fencedQueue(16<<20, 8)
			victim := tg.startInitiator(tr)
			survivor := tg.startInitiator(tr)
			victim.Send(fmt.Sprintf("records 0 1000000 %d %d 200 11", qv.base, qv.id))
			bg := startAppender(survivor, qs, 300, 40)
			testutil.WaitFor(t, "load (5000 appends)", func() bool { return tg.worker.Stats().Requests[rdmo.OpAppend] >= 5000 })
			if st := tg.worker.Stats(); st.RQs != 2 {
				t.Fatalf("%d request queues before the kill", st.RQs)
			}
			victim.Kill()
			killed := time.Now()
			if tr.PeerFailureDetection() {
				testutil.WaitFor(t, "the worker to free the dead initiator's queue", func() bool { return tg.worker.Stats().RQs == 1 })
				t.Logf("worker freed the dead initiator's request queue %v after the kill", time.Since(killed).Round(time.Millisecond))
			} else {
				// UCX cannot tell: the target does. RQ_DESTROY must not
				// hang on the dead peer (tg.do bounds it); how long past
				// the drain timeout it takes is the machine's load, not
				// asserted.
				tg.do(dpu.RQDestroy{Client: 1, RQ: victim.rq})
				t.Logf("RQ_DESTROY freed the dead initiator's queue %v after the kill (drain timeout %v)", time.Since(killed).Round(time.Millisecond), drain)
				if st := tg.worker.Stats(); st.RQs != 1 {
					t.Fatalf("%d request queues after RQ_DESTROY", st.RQs)
				}
			}
			if _, ok := tg.worker.Stats().InFlight[victim.rq]; ok {
				t.Errorf("the dead initiator's queue still has an in-flight gauge")
			}
			if err := bg.stop(qs); err != nil {
				var dump strings.Builder
				pprof.Lookup("goroutine").WriteTo(&dump, 1)
				t.Fatalf("the other initiator: %v\nworker stats: %+v\ngoroutines of the worker's process:\n%s", err, tg.worker.Stats(), dump.String())
			}
			if err := qv.guardsOK(); err != nil {
				t.Error(err)
			}
			// The victim may have died between claiming a slot of the
			// worker's shared-memory FIFO and marking it ready (about 1 kill
			// in 10 here): the worker filled the slot after its check's
			// timeout (docs/SECURITY.md finding 9).
			t.Logf("the other initiator appended %d records, all there exactly once; FIFO slots of the dead filled: %d",
				bg.records(), tg.worker.Stats().ShmSlotsFilled)
			survivor.Send("quit")
		})
	}
}

// A hostile initiator (SECURITY.md finding 7) configures its own UCX
// context with a zero-copy rendezvous scheme, so the worker reads the
// payloads from its memory (CMA over shared memory), and dies with many
// such reads due. UCX 1.13 treats a read from a dead process as fatal on
// an endpoint without peer-failure handling: that aborted the worker
// process, every client with it. With UCX's shared-memory error handling
// on (ucp.NewContext's default), the worker's endpoint to the initiator
// has it, and the read fails that endpoint only: the worker process lives,
// frees the queue, and another client's initiator loses nothing.
//
// The initiator may also turn error handling off on its side
// ("no-error-handling"): UCX then refuses its endpoint (asymmetric error
// handling), so nothing it sends reaches a handler and there is no read
// to fail.
//
// A kill that lands between the victim's claim of a slot of the worker's
// shared-memory FIFO and its mark (SECURITY.md finding 9) stalls the other
// initiator for the worker's check timeout, then the worker fills the slot:
// the other initiator still loses nothing.
func TestFaultHostileInitiatorKilledMidRendezvous(t *testing.T) {
	if !ucptest.Transports[0].PeerFailureDetection() {
		// This process runs with shared-memory error handling off
		// (RDMO_SHM_PEER_FAILURE=0): the case runs in a test process of
		// its own, and so in worker and initiator processes, that have
		// the default.
		ctx, cancel := context.WithTimeout(context.Background(), time.Until(testutil.Deadline(t)))
		defer cancel()
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run", "^TestFaultHostileInitiatorKilledMidRendezvous$", "-test.v")
		cmd.Env = append(os.Environ(), "RDMO_SHM_PEER_FAILURE=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: TestFaultHostileInitiatorKilledMidRendezvous") {
			t.Fatalf("with RDMO_SHM_PEER_FAILURE=1: %v\n%s", err, out)
		}
		return
	}
	tr := ucptest.Transports[0] // shared memory: where CMA reads happen
	if tr.Name != "shm" || !tr.PeerFailureDetection() {
		t.Fatalf("transport %s (peer-failure detection %v), want shm with detection", tr.Name, tr.PeerFailureDetection())
	}
	for _, hostile := range []struct {
		name    string
		env     []string
		refused bool // UCX refuses its endpoint
	}{
		{"zcopy", []string{"E2E_RNDV_SCHEME=get_zcopy"}, false},
		{"zcopy-no-error-handling", []string{"E2E_RNDV_SCHEME=get_zcopy", "E2E_ERROR_HANDLING=none",
			"UCX_POSIX_ERROR_HANDLING=n", "UCX_SYSV_ERROR_HANDLING=n"}, true},
	} {
		t.Run(hostile.name, func(t *testing.T) {
			testproc.CheckNoLeftovers(t)
			ucptest.CheckLeaks(t)
			// The victim is client 1's; the survivor another client's
			// (client 1's own other initiators may stall, finding 7).
			rw, tg, other := twoClientsOfUROMWorker(t, tr)
			qv := tg.fencedQueue(256<<20, 8)
			qs := other.fencedQueue(16<<20, 8)
			victim := tg.startInitiator(tr, hostile.env...)
			survivor := other.startInitiator(tr)
			before := tg.worker.Stats().Requests[rdmo.OpAppend]
			// 1 MiB records: every one a rendezvous, many due at once.
			victim.Send(fmt.Sprintf("burst 0 200 %d %d %d", qv.base, qv.id, 1<<20))
			if hostile.refused {
				// Another initiator's whole batch goes through the
				// worker meanwhile; nothing of the victim's arrives.
				q0 := other.fencedQueue(1<<20, 8)
				bg := startAppender(survivor, q0, 100, 1)
				if err := bg.stop(q0); err != nil {
					t.Fatalf("the other initiator: %v", err)
				}
				if n := tg.worker.Stats().Requests[rdmo.OpAppend] - before; n != 100 {
					t.Fatalf("%d appends arrived, want the other initiator's 100 only", n)
				}
			} else if !testutil.Poll(testutil.Deadline(t), func() bool { return tg.worker.Stats().Requests[rdmo.OpAppend] > before }) {
				t.Fatalf("no rendezvous arrived; the initiator said:\n%s\n%s", victim.Stdout(), victim.Stderr())
			}
			// Killed with reads of its memory due (the worker takes the
			// burst's records one by one).
			victim.Kill()
			bg := startAppender(survivor, qs, 300, 20)
			// The worker notices the dead initiator (peer-failure
			// detection on its endpoint) and frees its queue.
			if !testutil.Poll(testutil.Deadline(t), func() bool { return rw.ended() || tg.worker.Stats().RQs == 1 }) {
				t.Fatalf("the worker did not free the dead initiator's queue")
			}
			stopped := make(chan error, 1)
			go func() { stopped <- bg.stop(qs) }()
			var err error
			select {
			case err = <-stopped:
			case <-rw.W.Gone():
				// The target learns from the UROM service that its
				// worker ended and tells its initiators (rdmo's client
				// does so when the server's out-of-band connection
				// closes); UCX may not (an endpoint whose wire-up
				// never reached the worker).
				survivor.Signal(syscall.SIGUSR1)
				err = <-stopped
			}
			if err != nil {
				t.Fatalf("the other initiator: %v\nworker stats: %+v", err, tg.worker.Stats())
			}
			if rw.ended() {
				t.Fatalf("the worker process died: %s", rw.W.Reason())
			}
			if err := qv.guardsOK(); err != nil {
				t.Error(err)
			}
			st := tg.worker.Stats()
			t.Logf("worker alive; the other client's initiator appended %d records, all there exactly once; victim's queue tail at base+%d; failures %v; FIFO slots of the dead filled: %d",
				bg.records(), qv.tail()-qv.base, st.Failures, st.ShmSlotsFilled)
			survivor.Send("quit")
		})
	}
}

// The target process killed with SIGKILL while an initiator streams into
// its memory. The worker notices by itself (over TCP; over shared memory
// too, see ucp.NewContext) and the initiator's flush fails with
// TargetUnreachable. Either way, when told (RemoveClient,
// as the target's host or the UROM service would), the worker drops the
// client, its queues and regions within a bounded time, without hanging on
// the dead endpoint, and another client loses nothing.
func TestFaultTargetKilled(t *testing.T) {
	for _, tr := range ucptest.Transports {
		t.Run(tr.Name, func(t *testing.T) {
			testproc.CheckNoLeftovers(t)
			ucptest.CheckLeaks(t)
			var w *dpu.Worker
			tgB := newTargets(t, tr, func() rdmoWorker {
				rw := inProc(t, tr, dpu.Config{Handlers: handlers(appendop.Owned), DrainTimeout: 2 * time.Second})()
				w = rw.(inProcess).Worker
				return rw
			}, clientB)[0]
			qB := tgB.fencedQueue(16<<20, 8)
			pB := tgB.startInitiator(tr)
			bg := startAppender(pB, qB, 300, 40)

			vt := testproc.Start(t, "target", testproc.Options{Env: tr.Env()})
			f := vt.Must(t, "TARGET", 30*time.Second)
			taddr, _ := hex.DecodeString(f[0])
			va, _ := strconv.ParseUint(f[1], 10, 64)
			size, _ := strconv.ParseUint(f[2], 10, 64)
			rk, _ := hex.DecodeString(f[3])
			const victimID = 7
			wAddr := tgB.do(dpu.ClientInit{ID: victimID, Addr: taddr}).Addr
			reg := tgB.do(dpu.MRReg{Client: victimID, VA: va, Len: size, PackedRkey: rk}).Region
			vtg := &target{t: t, worker: tgB.worker, client: victimID, wAddr: wAddr}
			pv := vtg.startInitiator(tr)
			pv.Send(fmt.Sprintf("records 0 1000000 %d %d 100 13", va, reg))
			testutil.WaitFor(t, "load (10000 appends)", func() bool { return w.Stats().Requests[rdmo.OpAppend] >= 10000 })
			before := w.Stats()
			vt.Kill()
			killed := time.Now()
			if tr.PeerFailureDetection() {
				_, err := pv.Await("DONE", 30*time.Second)
				if err == nil || !strings.Contains(err.Error(), rdmo.StatusTargetUnreachable.Err().Error()) {
					t.Fatalf("the initiator of the dead target: %v, want a TargetUnreachable report", err)
				}
				t.Logf("the initiator's flush reported the dead target %v after the kill", time.Since(killed).Round(time.Millisecond))
			}
			start := time.Now()
			errc := make(chan error, 1)
			go func() { errc <- w.RemoveClient(victimID) }()
			select {
			case err := <-errc:
				if err != nil {
					t.Fatalf("RemoveClient: %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("RemoveClient of a dead target did not return within 30 s")
			}
			t.Logf("RemoveClient took %v", time.Since(start).Round(time.Millisecond))
			after := w.Stats()
			if after.Clients != before.Clients-1 || after.Regions != before.Regions-1 || after.RQs != before.RQs-1 {
				t.Errorf("clients %d->%d, regions %d->%d, RQs %d->%d; want each one fewer",
					before.Clients, after.Clients, before.Regions, after.Regions, before.RQs, after.RQs)
			}
			if _, err := w.Do(context.Background(), dpu.MRReg{Client: victimID, VA: va, Len: 8, PackedRkey: rk}); !errors.Is(err, dpu.ErrUnknownClient) {
				t.Errorf("MR_REG for the removed client: %v, want ErrUnknownClient", err)
			}
			pv.Kill() // without detection its last flush may wait forever: nobody told it
			if err := bg.stop(qB); err != nil {
				t.Fatalf("the other client: %v", err)
			}
			t.Logf("the other client appended %d records, all there exactly once", bg.records())
			pB.Send("quit")
		})
	}
}

// The UROM worker process killed with SIGKILL under load: the host is told
// (Worker.Gone, with a reason), commands in flight and later ones fail with
// ErrWorkerDied, and the initiator's Flush returns an error within a
// bounded time: UCX notices the dead peer (over TCP; over shared memory
// too, see ucp.NewContext), and where it cannot the host's PeerFailed does
// it.
func TestFaultWorkerProcessKilled(t *testing.T) {
	for _, tr := range ucptest.Transports {
		t.Run(tr.Name, func(t *testing.T) {
			testproc.CheckNoLeftovers(t)
			ucptest.CheckLeaks(t)
			var rw remote
			tg := newTargets(t, tr, func() rdmoWorker {
				rw = startUROMWorker(t, tr, []string{"append", "flush", "scatter"}, nil)
				return rw
			}, 1)[0]
			q := tg.fencedQueue(128<<20, 8)
			in, err := initiator.New(initiator.Options{WorkerAddress: tg.wAddr, ClientID: 1, UCX: tr.Config()})
			if err != nil {
				t.Fatal(err)
			}
			tg.do(dpu.RQCreate{Client: 1, Addr: in.Address()})

			loadErr := make(chan error, 1)
			go func() {
				for seq := 0; ; seq++ {
					err := in.Append(q.base, q.id, q.id, makeRecord(0, seq, 16+seq%200))
					if err == nil && seq%100 == 99 {
						ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
						_, err = in.Flush(ctx)
						cancel()
					}
					if err != nil {
						loadErr <- err
						return
					}
				}
			}()
			cmdErr := make(chan error, 1)
			go func() {
				for {
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					_, err := rw.Remote.Stats(ctx)
					cancel()
					if err != nil {
						cmdErr <- err
						return
					}
				}
			}()
			testutil.WaitFor(t, "load (1 MiB appended)", func() bool { return q.tail() > q.base+1<<20 })
			syscall.Kill(rw.W.PID, syscall.SIGKILL)
			killed := time.Now()
			select {
			case <-rw.W.Gone():
				t.Logf("host told %v after the kill: %s", time.Since(killed).Round(time.Millisecond), rw.W.Reason())
			case <-time.After(10 * time.Second):
				t.Fatal("the host was not told that its worker died")
			}
			if !strings.Contains(rw.W.Reason(), "killed") {
				t.Errorf("reason %q does not say the worker was killed", rw.W.Reason())
			}
			select {
			case err := <-cmdErr:
				if !errors.Is(err, urom.ErrWorkerDied) {
					t.Errorf("command in flight: %v, want ErrWorkerDied", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("a command to the dead worker did not fail")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := tg.worker.Do(ctx, dpu.MRReg{Client: 1, VA: q.base, Len: 8, PackedRkey: []byte{1}}); !errors.Is(err, urom.ErrWorkerDied) {
				t.Errorf("command after the death: %v, want ErrWorkerDied", err)
			}
			if !in.PeerFailureDetection() {
				in.PeerFailed(fmt.Errorf("UROM: the worker died: %s", rw.W.Reason()))
			}
			select {
			case err := <-loadErr:
				var pf *initiator.PeerFailedError
				if !in.PeerFailureDetection() && !errors.As(err, &pf) {
					t.Errorf("initiator on shm: %v, want a PeerFailedError", err)
				}
				t.Logf("initiator (peer failure detection %v) failed %v after the kill: %v",
					in.PeerFailureDetection(), time.Since(killed).Round(time.Millisecond), err)
			case <-time.After(30 * time.Second):
				t.Fatal("the initiator did not notice the dead worker within 30 s of the kill")
			}
			// Close must not hang on the dead worker: a minute is a hang,
			// anything shorter is the machine's load.
			start := time.Now()
			closed := make(chan struct{})
			go func() { in.Close(); close(closed) }()
			select {
			case <-closed:
				t.Logf("initiator Close took %v", time.Since(start).Round(time.Millisecond))
			case <-time.After(time.Minute):
				t.Fatal("initiator Close did not return within a minute of a dead worker")
			}
		})
	}
}

// What a worker crash leaves in the target's memory (docs/SECURITY.md,
// "A worker crash"): the RDMO worker process is SIGKILLed while an
// initiator appends (Owned append: the worker caches the queue's tail and
// writes it back at each FLUSH). The tail word in target memory is the one
// the last completed write-back left; the queue up to it holds whole
// records, in order, exactly once, and at least every record a successful
// FLUSH confirmed. Bytes past it are not claimed (records placed after the
// last write-back). The host is told (Worker.Gone, ErrWorkerDied) and the
// initiator's calls fail with a PeerFailedError.
func TestFaultWorkerCrashKeepsWhatFlushConfirmed(t *testing.T) {
	for _, tr := range ucptest.Transports {
		t.Run(tr.Name, func(t *testing.T) {
			testproc.CheckNoLeftovers(t)
			ucptest.CheckLeaks(t)
			var rw remote
			tg := newTargets(t, tr, func() rdmoWorker {
				rw = startUROMWorker(t, tr, []string{"append", "flush"}, nil)
				return rw
			}, 1)[0]
			q := tg.fencedQueue(128<<20, 8)
			in, err := initiator.New(initiator.Options{WorkerAddress: tg.wAddr, ClientID: 1, UCX: tr.Config()})
			if err != nil {
				t.Fatal(err)
			}
			defer in.Close()
			tg.do(dpu.RQCreate{Client: 1, Addr: in.Address()})

			var confirmed atomic.Int64 // records a successful FLUSH confirmed
			loadErr := make(chan error, 1)
			go func() {
				for seq := 0; ; seq++ {
					err := in.Append(q.base, q.id, q.id, makeRecord(0, seq, 16+seq%200))
					if err == nil && seq%100 == 99 {
						ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
						_, err = in.Flush(ctx)
						cancel()
						if err == nil {
							confirmed.Store(int64(seq + 1))
						}
					}
					if err != nil {
						loadErr <- err
						return
					}
				}
			}()
			if !testutil.Poll(testutil.Deadline(t), func() bool { return confirmed.Load() >= 2000 }) {
				t.Fatal("no load")
			}
			syscall.Kill(rw.W.PID, syscall.SIGKILL)
			select {
			case <-rw.W.Gone():
			case <-time.After(30 * time.Second): // a hang guard
				t.Fatal("the host was not told that its worker died")
			}
			// The target is told clearly: the reason, and a typed error
			// for anything it asks the dead worker.
			if !strings.Contains(rw.W.Reason(), "killed") {
				t.Errorf("reason %q does not say the worker was killed", rw.W.Reason())
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if _, err := tg.worker.Do(ctx, dpu.MRReg{Client: 1, VA: q.base, Len: 8, PackedRkey: []byte{1}}); !errors.Is(err, urom.ErrWorkerDied) {
				t.Errorf("command after the crash: %v, want ErrWorkerDied", err)
			}
			if !in.PeerFailureDetection() {
				in.PeerFailed(fmt.Errorf("UROM: the worker died: %s", rw.W.Reason()))
			}
			select {
			case err := <-loadErr:
				var pf *initiator.PeerFailedError
				if !errors.As(err, &pf) {
					t.Errorf("initiator after the crash: %v, want a PeerFailedError", err)
				}
			case <-time.After(60 * time.Second): // a hang guard
				t.Fatal("the initiator did not notice the dead worker")
			}
			// The initiator has stopped: nothing moves the memory now.
			if err := q.guardsOK(); err != nil {
				t.Fatal(err)
			}
			tail := q.tail()
			if tail < q.base+8 || tail > q.base+uint64(q.size) {
				t.Fatalf("tail %#x outside the queue [%#x, +%d)", tail, q.base, q.size)
			}
			got, err := walkQueue(q.data()[8 : tail-q.base])
			if err != nil {
				t.Fatalf("the queue up to the written-back tail: %v", err)
			}
			if len(got) != 1 {
				t.Fatalf("records of initiators %v, want initiator 0's only", got)
			}
			if c := int(confirmed.Load()); got[0] < c {
				t.Errorf("%d records up to the tail, but a FLUSH confirmed %d", got[0], c)
			}
			t.Logf("%s: a FLUSH confirmed %d records; the written-back tail covers %d, intact and in order", tr.Name, confirmed.Load(), got[0])
		})
	}
}

// A plugin killed while another op's initiator runs at full load: the
// built-in append keeps working and its flushes keep succeeding (the dead
// plugin keeps no state for anyone), scatters fail only with HandlerFailed
// while it is down, and it comes back.
func TestFaultPluginKilledUnderLoad(t *testing.T) {
	tr := ucptest.Transports[0]
	testproc.CheckNoLeftovers(t)
	ucptest.CheckLeaks(t)
	var rw remote
	tg := newTargets(t, tr, func() rdmoWorker {
		rw = startUROMWorker(t, tr, []string{"append", "flush", "plugin:scatter"}, nil)
		return rw
	}, 1)[0]
	q := tg.fencedQueue(32<<20, 8)
	sr := tg.fenced(1<<16, 0)
	p := tg.startInitiator(tr)
	bg := startAppender(p, q, 300, 60)
	raw := tg.raw(t, tr)
	plugin := testproc.ChildOf(rw.W.PID, "rdmo-plugin-scatter")
	if plugin == 0 {
		t.Fatal("scatter plugin process not found")
	}
	acks := map[rdmo.Status]int{}
	scatterSome := func(n int) {
		for i := 0; i < n; i++ {
			mustSend(t, raw, scatterReq(1, ack, 1), iovs(t, sr.base+uint64(i%1000)*8, sr.id, []byte("scattred")))
		}
		for i := 0; i < n; i++ {
			b, err := recvRaw(raw, 20*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			a, err := wire.ParseAck(b)
			if err != nil {
				t.Fatal(err)
			}
			acks[a.Status]++
		}
	}
	scatterSome(200)
	syscall.Kill(plugin, syscall.SIGKILL)
	scatterSome(200)
	testutil.WaitFor(t, "the scatter plugin's restart", func() bool { p := testproc.ChildOf(rw.W.PID, "rdmo-plugin-scatter"); return p != 0 && p != plugin })
	okBefore := acks[rdmo.StatusOK]
	if !testutil.Poll(testutil.Deadline(t), func() bool { scatterSome(1); return acks[rdmo.StatusOK] > okBefore }) {
		t.Fatalf("scatters still fail after the restart: %v", acks)
	}
	for s := range acks {
		if s != rdmo.StatusOK && s != rdmo.StatusHandlerFailed {
			t.Errorf("scatter failed with %v, want HandlerFailed", s)
		}
	}
	if err := bg.stop(q); err != nil {
		t.Fatalf("appends and flushes of the built-in ops while the scatter plugin was down: %v", err)
	}
	t.Logf("scatter acks %v; %d records appended meanwhile", acks, bg.records())
	p.Send("quit")
}
