package dpu_test

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"strconv"
	"testing"

	"github.com/openrdmo/rdmo/dpu"
	"github.com/openrdmo/rdmo/internal/testutil"
	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/ucp/ucptest"
)

// MR_REG with Populate answers once the worker's mapping of the region is
// populated (over shared memory; over tcp the worker maps nothing and
// answers at once). A region being populated holds its place under
// MaxRegionsPerClient, and a client removed while its region is populated
// ends with a typed answer to the MR_REG, after which the worker serves a
// new client of the same id.
func TestMRRegPopulate(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		e := newEnv(t, tr, dpu.Config{Handlers: allHandlers(), MaxRegionsPerClient: 1})
		const size = 32 << 20
		tgt := e.newTarget(size)
		e.do(dpu.ClientInit{ID: 1, Addr: tgt.addr})
		reg := dpu.MRReg{Client: 1, VA: tgt.mem.Address(), Len: size, PackedRkey: tgt.packedRkey(t), Populate: true}

		// Two at once: whichever comes first takes the client's one
		// place, populated or not yet; the other is refused.
		type answer struct {
			n   dpu.Notification
			err error
		}
		do := func(cmd dpu.Command) <-chan answer {
			ch := make(chan answer, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
				defer cancel()
				n, err := e.w.Do(ctx, cmd)
				ch <- answer{n, err}
			}()
			return ch
		}
		a, b := do(reg), do(reg)
		ra, rb := <-a, <-b
		if ra.err != nil {
			ra, rb = rb, ra
		}
		if ra.err != nil || ra.n.Region == 0 {
			t.Fatalf("neither MR_REG registered: %v; %v", ra.err, rb.err)
		}
		wantCmdErr(t, rb.n, rb.err, dpu.ErrTooManyRegions, rdmo.StatusTooManyInFlight)
		if st := e.w.Stats(); st.Regions != 1 {
			t.Errorf("%d regions registered, want 1", st.Regions)
		}
		e.do(dpu.MRDereg{Client: 1, Region: ra.n.Region})

		// Removal while populating: the MR_REG either registered before
		// the removal or fails as the client's; the removal completes.
		tgt2 := e.newTarget(size)
		e.do(dpu.ClientInit{ID: 2, Addr: tgt2.addr})
		c := do(dpu.MRReg{Client: 2, VA: tgt2.mem.Address(), Len: size, PackedRkey: tgt2.packedRkey(t), Populate: true})
		if shared(t, tgt2.mem.Address()) {
			// The worker mapped the region (its second mapping in this
			// process): the MR_REG is being handled, most likely still
			// populating.
			testutil.WaitFor(t, "the worker's mapping", func() bool { return mappings(t, tgt2.mem.Address()) >= 2 })
		}
		if err := e.w.RemoveClient(2); err != nil {
			t.Fatal(err)
		}
		if r := <-c; r.err != nil {
			wantCmdErr(t, r.n, r.err, dpu.ErrUnknownClient, rdmo.StatusClientMismatch)
			t.Logf("MR_REG during the removal: %v", r.err)
		} else if r.n.Region == 0 {
			t.Errorf("MR_REG answered %+v", r.n)
		}
		e.do(dpu.ClientInit{ID: 2, Addr: tgt2.addr})
		if st := e.w.Stats(); st.Regions != 0 || st.Clients != 2 {
			t.Errorf("%d regions, %d clients; want 0, 2", st.Regions, st.Clients)
		}
	})
}

// shared reports whether the mapping holding addr in this process is a
// shared segment (as UCX's shared-memory allocations are).
func shared(t *testing.T, addr uint64) bool {
	_, ino := segmentOf(t, addr)
	return ino != "0"
}

// mappings counts this process's mappings of the segment that holds addr.
func mappings(t *testing.T, addr uint64) int {
	dev, ino := segmentOf(t, addr)
	n := 0
	eachMapping(t, func(_, _ uint64, f [][]byte) {
		if string(f[3]) == dev && string(f[4]) == ino {
			n++
		}
	})
	return n
}

func segmentOf(t *testing.T, addr uint64) (dev, ino string) {
	eachMapping(t, func(lo, hi uint64, f [][]byte) {
		if lo <= addr && addr < hi {
			dev, ino = string(f[3]), string(f[4])
		}
	})
	if ino == "" {
		t.Fatalf("no mapping holds %#x", addr)
	}
	return dev, ino
}

// eachMapping calls fn with each line of /proc/self/maps: its range and
// fields (range, perms, offset, dev, inode, path).
func eachMapping(t *testing.T, fn func(lo, hi uint64, fields [][]byte)) {
	data, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := bytes.Fields(sc.Bytes())
		if len(f) < 5 {
			continue
		}
		r := bytes.Split(f[0], []byte("-"))
		if len(r) != 2 {
			continue
		}
		lo, err1 := strconv.ParseUint(string(r[0]), 16, 64)
		hi, err2 := strconv.ParseUint(string(r[1]), 16, 64)
		if err1 == nil && err2 == nil {
			fn(lo, hi, f)
		}
	}
}
