package e2e_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/openrdmo/rdmo/host/initiator"
	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/wire"
	"github.com/openrdmo/rdmo/ucp"
)

// A record is self-describing so the target can check a queue without
// knowing who wrote it: u32 length (whole record), u16 initiator, u16
// reserved, u32 sequence, u32 CRC of everything after the header; then the
// body. 16 bytes at least; sizes are skewed towards small ones with some up
// to 64 KiB.
const recordHeader = 16

func recordSize(r *rand.Rand) int {
	switch x := r.IntN(1000); {
	case x < 900:
		return recordHeader + r.IntN(113) // 16..128 B
	case x < 990:
		return 129 + r.IntN(4096-128) // up to 4 KiB
	default:
		return 4097 + r.IntN(65536-4096) // up to 64 KiB
	}
}

func makeRecord(initiator, seq int, size int) []byte {
	b := make([]byte, size)
	binary.LittleEndian.PutUint32(b[0:], uint32(size))
	binary.LittleEndian.PutUint16(b[4:], uint16(initiator))
	binary.LittleEndian.PutUint32(b[8:], uint32(seq))
	x := uint32(initiator*7919 + seq*104729)
	for i := recordHeader; i < size; i++ {
		x = x*1664525 + 1013904223
		b[i] = byte(x >> 24)
	}
	binary.LittleEndian.PutUint32(b[12:], crc32.ChecksumIEEE(b[recordHeader:]))
	return b
}

// checkQueue walks the queue [start, end) and checks that it holds, for
// each initiator, records 0..want[i]-1 exactly once, intact, in order.
func checkQueue(mem []byte, want map[int]int) error {
	next, err := walkQueue(mem)
	if err != nil {
		return err
	}
	for id, n := range want {
		if next[id] != n {
			return fmt.Errorf("initiator %d: %d records in the queue, sent %d", id, next[id], n)
		}
	}
	if len(next) != len(want) {
		return fmt.Errorf("records from %d initiators, want %d", len(next), len(want))
	}
	return nil
}

// walkQueue walks the queue [start, end), checks that each initiator's
// records are intact and numbered 0, 1, 2, ... in order, and returns how
// many each has.
func walkQueue(mem []byte) (map[int]int, error) {
	next := map[int]int{}
	off := 0
	for off < len(mem) {
		if len(mem)-off < recordHeader {
			return nil, fmt.Errorf("%d stray bytes at offset %d", len(mem)-off, off)
		}
		size := int(binary.LittleEndian.Uint32(mem[off:]))
		if size < recordHeader || size > len(mem)-off {
			return nil, fmt.Errorf("bad record length %d at offset %d", size, off)
		}
		rec := mem[off : off+size]
		id := int(binary.LittleEndian.Uint16(rec[4:]))
		seq := int(binary.LittleEndian.Uint32(rec[8:]))
		if crc32.ChecksumIEEE(rec[recordHeader:]) != binary.LittleEndian.Uint32(rec[12:]) {
			return nil, fmt.Errorf("record %d/%d at offset %d is corrupted", id, seq, off)
		}
		if seq != next[id] {
			return nil, fmt.Errorf("initiator %d: record %d at offset %d, expected %d (lost, duplicated or reordered)", id, seq, off, next[id])
		}
		next[id]++
		off += size
	}
	return next, nil
}

// modelOp is one step of the model-based workload; the sequence comes from
// a seed so the initiator process and the test's model agree on it.
type modelOp struct {
	kind   byte // 'a' append, 'A' fenced append, 's' scatter, 'x' bad scatter, 'f' flush
	record []byte
	iovs   []wire.IOV // offsets relative to the initiator's scatter area
	chunks [][]byte
}

const scatterArea = 4096

func modelOps(seed uint64, id, steps int) []modelOp {
	r := rand.New(rand.NewPCG(seed, uint64(id)))
	var ops []modelOp
	seq := 0
	for i := 0; i < steps; i++ {
		switch x := r.IntN(100); {
		case x < 45:
			kind := byte('a')
			if r.IntN(10) == 0 {
				kind = 'A'
			}
			ops = append(ops, modelOp{kind: kind, record: makeRecord(id, seq, recordHeader+r.IntN(200))})
			seq++
		case x < 85:
			n := 1 + r.IntN(6)
			op := modelOp{kind: 's'}
			off := r.IntN(scatterArea - 512)
			for k := 0; k < n; k++ {
				l := 1 + r.IntN(48)
				if r.IntN(3) > 0 { // adjacent to the previous chunk, sometimes
					off += r.IntN(16)
				}
				if off+l > scatterArea {
					break
				}
				chunk := make([]byte, l)
				for j := range chunk {
					chunk[j] = byte(r.Uint32())
				}
				op.iovs = append(op.iovs, wire.IOV{Addr: uint64(off), Len: uint16(l)})
				op.chunks = append(op.chunks, chunk)
				off += l
			}
			if len(op.iovs) == 0 {
				continue
			}
			ops = append(ops, op)
		case x < 88:
			// Out of bounds: one chunk past the region's end. It must
			// fail, write nothing, and be reported at the next flush.
			ops = append(ops, modelOp{kind: 'x', iovs: []wire.IOV{{Addr: 0, Len: 8}, {Addr: 1 << 40, Len: 8}}, chunks: [][]byte{make([]byte, 8), make([]byte, 8)}})
		default:
			ops = append(ops, modelOp{kind: 'f'})
		}
	}
	return append(ops, modelOp{kind: 'f'})
}

// applyModel returns the scatter area's expected contents and the number
// of records appended.
func applyModel(ops []modelOp) ([]byte, int) {
	area := make([]byte, scatterArea)
	records := 0
	for _, op := range ops {
		switch op.kind {
		case 'a', 'A':
			records++
		case 's':
			for i, v := range op.iovs {
				copy(area[v.Addr:], op.chunks[i])
			}
		}
	}
	return area, records
}

func initiatorMain() int {
	addr, _ := hex.DecodeString(os.Getenv("E2E_WORKER"))
	client, _ := strconv.ParseUint(os.Getenv("E2E_CLIENT"), 10, 64)
	// E2E_CAPABILITIES plays the worker's capabilities as the target passes
	// them out of band: the initiator aggregates when the worker can unpack
	// containers.
	caps := strings.Split(os.Getenv("E2E_CAPABILITIES"), ",")
	opts := initiator.Options{WorkerAddress: addr, ClientID: client, Aggregate: initiator.AggregateSupported(caps)}
	// A hostile initiator chooses its own UCX settings: E2E_RNDV_SCHEME
	// (e.g. get_zcopy: the worker reads its memory), E2E_ERROR_HANDLING
	// "none" (no peer-failure handling on its endpoint).
	if v := os.Getenv("E2E_RNDV_SCHEME"); v != "" {
		opts.UCX = map[string]string{"RNDV_SCHEME": v}
	}
	if os.Getenv("E2E_ERROR_HANDLING") == "none" {
		opts.ErrorHandling = ucp.ErrorHandlingNone
	}
	in, err := initiator.New(opts)
	if err != nil {
		fmt.Println("ERR", err)
		return 1
	}
	defer in.Close()
	// SIGUSR1 plays the target telling its initiator that the worker's
	// process ended (Initiator.PeerFailed), as rdmo's client does when
	// the server's out-of-band connection closes: UCX cannot tell an
	// endpoint whose wire-up never reached the worker.
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	go func() {
		for range usr1 {
			in.PeerFailed(errors.New("the worker process ended (told out of band)"))
		}
	}()
	fmt.Printf("ADDR %x\n", in.Address())
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		var n []uint64
		for _, s := range f[1:] {
			v, _ := strconv.ParseUint(s, 10, 64)
			n = append(n, v)
		}
		var err error
		var result string
		switch f[0] {
		case "append8": // ptr region
			err = in.Append(n[0], n[1], n[1], []byte{0x33, 0x33, 0x33, 0x33, 0x33, 0x33, 0x33, 0x33})
		case "scatter16": // region base stride
			var iovs []wire.IOV
			var chunks [][]byte
			for i := 0; i < 16; i++ {
				c := make([]byte, 8)
				for j := range c {
					c[j] = byte(0x40 + i)
				}
				iovs = append(iovs, wire.IOV{Addr: n[1] + uint64(i)*n[2], Rkey: rdmo.RegionID(n[0]), Len: 8})
				chunks = append(chunks, c)
			}
			err = in.Scatter(iovs, chunks)
		case "flush":
			var rsp wire.FlushResponse
			rsp, err = in.Flush(context.Background())
			result = fmt.Sprintf("%d %d %d", rsp.FlushID, rsp.Failed, rsp.FirstStatus)
		case "records": // id n ptr region flushEvery seed
			err = runRecords(in, int(n[0]), int(n[1]), n[2], n[3], int(n[4]), n[5])
		case "model": // id seed steps ptr qregion sregion sbase
			result, err = runModel(in, int(n[0]), n[1], int(n[2]), n[3], n[4], n[5], n[6])
		case "burst": // id n ptr region size: n appends of one size
			// No flushes of the workload's own until the end: the
			// initiator's flow control keeps the stream within the
			// worker's in-flight limit.
			for seq := 0; seq < int(n[1]) && err == nil; seq++ {
				err = in.Append(n[2], n[3], n[3], makeRecord(int(n[0]), seq, int(n[4])))
			}
			if err == nil {
				_, err = in.Flush(context.Background())
			}
		case "quit":
			return 0
		default:
			err = fmt.Errorf("unknown command %q", f[0])
		}
		if err != nil {
			fmt.Println("ERR", f[0], err)
			continue
		}
		fmt.Println("DONE", f[0], result)
	}
	return 0
}

func runRecords(in *initiator.Initiator, id, n int, ptr, region uint64, flushEvery int, seed uint64) error {
	r := rand.New(rand.NewPCG(seed, uint64(id)))
	for seq := 0; seq < n; seq++ {
		if err := in.Append(ptr, region, region, makeRecord(id, seq, recordSize(r))); err != nil {
			return err
		}
		if flushEvery > 0 && seq%flushEvery == flushEvery-1 {
			if _, err := in.Flush(context.Background()); err != nil {
				return fmt.Errorf("flush after %d records: %w", seq+1, err)
			}
		}
	}
	_, err := in.Flush(context.Background())
	return err
}

func runModel(in *initiator.Initiator, id int, seed uint64, steps int, ptr, qregion, sregion, sbase uint64) (string, error) {
	ctx := context.Background()
	expectFailed := 0
	flushes := 0
	for _, op := range modelOps(seed, id, steps) {
		var err error
		switch op.kind {
		case 'a':
			err = in.Append(ptr, qregion, qregion, op.record)
		case 'A':
			_, err = in.With(ctx, rdmo.FlagFence).Append(ptr, qregion, qregion, op.record)
		case 's', 'x':
			iovs := make([]wire.IOV, len(op.iovs))
			for i, v := range op.iovs {
				iovs[i] = wire.IOV{Addr: sbase + v.Addr, Rkey: rdmo.RegionID(sregion), Len: v.Len}
			}
			err = in.Scatter(iovs, op.chunks)
			if op.kind == 'x' {
				expectFailed++
			}
		case 'f':
			rsp, ferr := in.Flush(ctx)
			flushes++
			if expectFailed == 0 && ferr != nil {
				return "", fmt.Errorf("flush %d: %w", flushes, ferr)
			}
			if int(rsp.Failed) != expectFailed {
				return "", fmt.Errorf("flush %d reports %d failures, expected %d", flushes, rsp.Failed, expectFailed)
			}
			if expectFailed > 0 && !errors.Is(ferr, rdmo.ErrOutOfBounds) {
				return "", fmt.Errorf("flush %d: %v, want out of bounds", flushes, ferr)
			}
			expectFailed = 0
		}
		if err != nil {
			return "", err
		}
	}
	return fmt.Sprint(flushes), nil
}

var _ = time.Second
