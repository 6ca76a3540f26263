package target_test

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/openrdmo/rdmo/host/initiator"
	"github.com/openrdmo/rdmo/host/target"
	"github.com/openrdmo/rdmo/ucp/ucptest"
)

// RegisterWith(Populate) commits the pages of the worker's mapping of the
// region before the registration is answered, where the worker maps target
// memory (shared memory): all of them are resident in the worker's page
// tables, while those of a region registered without it are not until
// written. The region's bytes stay as the target wrote them, and appends
// land in it as in any other region. Over tcp the worker maps nothing and
// the option only commits the target's own pages.
func TestRegisterPopulate(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		ctx := ctxFor(t)
		addr := startService(t, tr)
		local := newLocal(t, tr)
		n := 4 << 20
		if v, err := strconv.Atoi(os.Getenv("RDMO_TEST_POPULATE_MIB")); err == nil && v > 0 {
			n = v << 20 // to time larger registrations
		}
		plain, err := local.Allocate(n)
		if err != nil {
			t.Fatal(err)
		}
		popul, err := local.Allocate(n)
		if err != nil {
			t.Fatal(err)
		}
		pb := popul.Bytes()
		for i := 4096; i < n; i += 4096 {
			pb[i+1] = byte(i >> 12) // a pattern populating must keep
		}
		binary.LittleEndian.PutUint64(pb, popul.Address()+8) // the tail
		local.Start()
		defer func() {
			if err := local.Close(); err != nil {
				t.Errorf("local close: %v", err)
			}
		}()
		tg, err := target.New(ctx, target.Options{ServiceAddress: addr, Env: tr.Env(), AppendStrategy: "owned", Address: local.Address()})
		if err != nil {
			t.Fatal(err)
		}
		defer tg.Close()
		start := time.Now()
		regPlain, err := tg.Register(ctx, plain)
		if err != nil {
			t.Fatal(err)
		}
		mid := time.Now()
		reg, err := tg.RegisterWith(ctx, popul, target.RegisterOptions{Populate: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("MR_REG of %d MiB: %v, with Populate %v", n>>20, mid.Sub(start), time.Since(mid))

		pid := tg.WorkerPID()
		shared, dev, ino := mappingOf(t, os.Getpid(), popul.Address())
		if shared {
			resident := residentOf(t, pid, dev, ino)
			if resident < n {
				t.Errorf("the worker's mapping of the populated region: %d of %d bytes resident", resident, n)
			}
			_, pdev, pino := mappingOf(t, os.Getpid(), plain.Address())
			if r := residentOf(t, pid, pdev, pino); r >= n {
				t.Errorf("the worker's mapping of a region registered without Populate: %d of %d bytes resident before any write", r, n)
			}
			t.Logf("worker %d: %d bytes of the populated region resident", pid, resident)
		}
		for i := 4096; i < n; i += 4096 {
			if pb[i+1] != byte(i>>12) || pb[i] != 0 {
				t.Fatalf("byte %d changed by populating: % x", i, pb[i:i+2])
			}
		}

		in, err := initiator.New(initiator.Options{WorkerAddress: tg.WorkerAddress(), ClientID: tg.ClientID(), UCX: tr.Config()})
		if err != nil {
			t.Fatal(err)
		}
		defer in.Close()
		rq, err := tg.CreateRQ(ctx, in.Address())
		if err != nil {
			t.Fatal(err)
		}
		data := bytes.Repeat([]byte{0xa5}, 64<<10)
		if err := in.Append(reg.Base, reg.ID, reg.ID, data); err != nil {
			t.Fatal(err)
		}
		if _, err := in.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if err := tg.DestroyRQ(ctx, rq); err != nil {
			t.Errorf("RQ_DESTROY: %v", err)
		}
		for _, id := range []uint64{regPlain.ID, reg.ID} {
			if err := tg.Deregister(ctx, id); err != nil {
				t.Fatal(err)
			}
		}
		if tail := binary.LittleEndian.Uint64(pb); tail != popul.Address()+8+uint64(len(data)) || !bytes.Equal(pb[8:8+len(data)], data) {
			t.Errorf("tail %#x (base %#x), data not as appended", tail, popul.Address())
		}
	})
}

// mappingOf finds the mapping of process pid that holds addr: whether it is
// shared (a file or shared memory segment, which other processes map too)
// and its device and inode.
func mappingOf(t *testing.T, pid int, addr uint64) (shared bool, dev, ino string) {
	t.Helper()
	found := false
	scanSmaps(t, pid, func(lo, hi uint64, f []string) bool {
		if lo <= addr && addr < hi {
			found = true
			shared = len(f) >= 5 && f[1][3] == 's' && f[4] != "0"
			dev, ino = f[3], f[4]
			return false
		}
		return true
	}, nil)
	if !found {
		t.Fatalf("process %d has no mapping of %#x", pid, addr)
	}
	return shared, dev, ino
}

// residentOf sums the resident bytes of process pid's mappings of the
// segment dev, ino.
func residentOf(t *testing.T, pid int, dev, ino string) int {
	t.Helper()
	total, in := 0, false
	scanSmaps(t, pid, func(_, _ uint64, f []string) bool {
		in = len(f) >= 5 && f[3] == dev && f[4] == ino
		return true
	}, func(key string, kb int) {
		if in && key == "Rss" {
			total += kb << 10
		}
	})
	return total
}

// scanSmaps calls vma with each mapping's range and header fields of
// /proc/pid/smaps (until it returns false) and field with the mapping's
// "Key: n kB" lines.
func scanSmaps(t *testing.T, pid int, vma func(lo, hi uint64, fields []string) bool, field func(key string, kb int)) {
	t.Helper()
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := bytes.Fields(sc.Bytes())
		if len(fields) == 0 {
			continue
		}
		if r := bytes.Split(fields[0], []byte("-")); len(r) == 2 {
			lo, err1 := strconv.ParseUint(string(r[0]), 16, 64)
			hi, err2 := strconv.ParseUint(string(r[1]), 16, 64)
			if err1 == nil && err2 == nil {
				s := make([]string, len(fields))
				for i, b := range fields {
					s[i] = string(b)
				}
				if !vma(lo, hi, s) {
					return
				}
				continue
			}
		}
		if field != nil && len(fields) == 3 && bytes.HasSuffix(fields[0], []byte(":")) {
			if kb, err := strconv.Atoi(string(fields[1])); err == nil {
				field(string(bytes.TrimSuffix(fields[0], []byte(":"))), kb)
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
}
