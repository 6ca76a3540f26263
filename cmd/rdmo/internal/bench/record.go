package bench

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// MinSize is the smallest message size the benchmark sends: every payload
// names its initiator, round and sequence number in its first 8 bytes, so
// the target can tell a lost, duplicated or stale one from a good one.
const MinSize = 8

// A record is one payload: an append's data, a scatter chunk, a raw AM's
// body. Layout (little-endian):
//
//	[0:2] initiator id   [2:4] round (low 16 bits)   [4:8] sequence number
//	[8:]  pattern: 8-byte words derived from (id, round, seq) and the offset
//	      within the record, repeating every patternPeriod bytes
//
// so every byte depends on who wrote it, in which round, as which operation.
// The pattern repeats so that a large record costs one memmove to write and
// one compare to check, not a computed word per 8 bytes: at 1 MiB that loop
// ran at 0.5–2 GB/s, below what the transport carries, and capped every
// large-payload row of the bench. The period, 4088 bytes (511 words), is no
// power of two, so a payload whose fragments (powers of two, or 8 KiB
// segments) landed out of order or at a shifted offset still fails the
// check.
const patternPeriod = 4088

// mix is the pattern's seed for one record.
func mix(id, round int, seq uint32) uint64 {
	x := uint64(id)<<48 ^ uint64(uint16(round))<<32 ^ uint64(seq)
	x ^= x >> 31
	x *= 0x9e3779b97f4a7c15
	x ^= x >> 29
	return x | 1
}

// fillRecord writes record (id, round, seq) into b (len(b) >= MinSize).
func fillRecord(b []byte, id, round int, seq uint32) {
	binary.LittleEndian.PutUint16(b[0:], uint16(id))
	binary.LittleEndian.PutUint16(b[2:], uint16(round))
	binary.LittleEndian.PutUint32(b[4:], seq)
	if len(b) == MinSize {
		return
	}
	body := b[8:]
	first := body[:min(len(body), patternPeriod)]
	x := mix(id, round, seq)
	off := patternWords(first, x)
	if off < len(first) {
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], x+uint64(off+8))
		copy(first[off:], w[:])
	}
	// Doubling copies keep the period: body[:k] repeats every
	// patternPeriod bytes and k is a multiple of it.
	for k := len(first); k < len(body); k *= 2 {
		copy(body[k:], body[:k])
	}
}

// patternWords writes the pattern's whole words into first (word k, at byte
// 8k, is x+8(k+1)) and returns how many bytes it wrote. Four words a turn
// on a shrinking slice: the compiler then drops the bounds checks, and the
// loop runs about three times as fast as a store per indexed word. At
// 4 KiB the first period is the whole record, and a slow fill made the
// payload's generation, not the transport, the bound of every row there
// (a native writer's most of all).
func patternWords(first []byte, x uint64) int {
	w := first[:len(first)&^7]
	v := x + 8
	for len(w) >= 32 {
		binary.LittleEndian.PutUint64(w[0:8], v)
		binary.LittleEndian.PutUint64(w[8:16], v+8)
		binary.LittleEndian.PutUint64(w[16:24], v+16)
		binary.LittleEndian.PutUint64(w[24:32], v+24)
		v += 32
		w = w[32:]
	}
	for len(w) >= 8 {
		binary.LittleEndian.PutUint64(w[0:8], v)
		v += 8
		w = w[8:]
	}
	return len(first) &^ 7
}

// recordID reads the header of a record.
func recordID(b []byte) (id, round int, seq uint32) {
	return int(binary.LittleEndian.Uint16(b[0:])), int(binary.LittleEndian.Uint16(b[2:])), binary.LittleEndian.Uint32(b[4:])
}

// recordOK reports whether b is exactly record (id, round, seq).
func recordOK(b []byte, id, round int, seq uint32) bool {
	gi, gr, gs := recordID(b)
	if gi != id || gr != int(uint16(round)) || gs != seq {
		return false
	}
	body := b[8:]
	first := body[:min(len(body), patternPeriod)]
	x := mix(id, round, seq)
	off := 0
	for ; off+8 <= len(first); off += 8 {
		if binary.LittleEndian.Uint64(first[off:]) != x+uint64(off+8) {
			return false
		}
	}
	if off < len(first) {
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], x+uint64(off+8))
		if !bytes.Equal(first[off:], w[:len(first)-off]) {
			return false
		}
	}
	for k := len(first); k < len(body); k += patternPeriod {
		n := min(patternPeriod, len(body)-k)
		if !bytes.Equal(body[k:k+n], first[:n]) {
			return false
		}
	}
	return true
}

// checkQueue checks a queue that initiators appended fixed-size records
// to in one round: mem is the queue's bytes after the tail word, used is
// how far the tail moved. Initiator i must have exactly counts[i] records,
// seq 0..counts[i]-1, each once and intact; with ordered, in increasing
// seq order too (RDMO requests of one connection run in order).
func checkQueue(mem []byte, used uint64, size, round int, counts []uint64, ordered bool) error {
	var want uint64
	for _, n := range counts {
		want += n
	}
	if used != want*uint64(size) {
		return fmt.Errorf("the tail moved %d bytes; %d records of %d bytes were sent (%d bytes): %s",
			used, want, size, want*uint64(size), lossWord(used, want*uint64(size)))
	}
	if used > uint64(len(mem)) {
		return fmt.Errorf("the tail moved %d bytes, past the queue's end (%d bytes)", used, len(mem))
	}
	seen := make([][]uint64, len(counts))
	next := make([]uint32, len(counts))
	for i, n := range counts {
		seen[i] = make([]uint64, (n+63)/64)
	}
	for off := 0; off < int(used); off += size {
		rec := mem[off : off+size]
		id, _, seq := recordID(rec)
		if id >= len(counts) || uint64(seq) >= counts[id] || !recordOK(rec, id, round, seq) {
			gi, gr, gs := recordID(rec)
			return fmt.Errorf("record %d (offset %d) is not a record of this round: it says initiator %d round %d seq %d (lost, stale or corrupted data)",
				off/size, off, gi, gr, gs)
		}
		w, bit := seq/64, uint64(1)<<(seq%64)
		if seen[id][w]&bit != 0 {
			return fmt.Errorf("initiator %d: record %d appears twice (offset %d)", id, seq, off)
		}
		seen[id][w] |= bit
		if ordered {
			if seq != next[id] {
				return fmt.Errorf("initiator %d: record %d at offset %d, expected %d (reordered)", id, seq, off, next[id])
			}
			next[id]++
		}
	}
	// Every slot held a distinct valid record and the totals match, so
	// every record is there exactly once.
	return nil
}

func lossWord(got, want uint64) string {
	if got < want {
		return "data was lost"
	}
	return "more than was sent"
}

// scatterLayout places the chunks of a scatter round: initiator id's
// chunk i of operation j goes to base + id*area + i*lane + j*size, so the
// chunks of one request land in different lanes (they are not adjacent:
// the worker cannot merge them into one put) and no address is written
// twice in a round.
type scatterLayout struct {
	Base uint64 `json:"base"`
	IOVs int    `json:"iovs"`
	Size int    `json:"size"`
	Lane uint64 `json:"lane"` // bytes per lane: ops per initiator per round × size
}

func (l scatterLayout) area() uint64 { return uint64(l.IOVs) * l.Lane }

func (l scatterLayout) offset(id, op, iov int) uint64 {
	return uint64(id)*l.area() + uint64(iov)*l.Lane + uint64(op)*uint64(l.Size)
}

// chunkSeq is the record sequence number of chunk iov of operation op.
func (l scatterLayout) chunkSeq(op, iov int) uint32 { return uint32(op*l.IOVs + iov) }

// checkScatter checks that every chunk the initiators scattered in one
// round (counts[i] operations of initiator i) landed intact. mem is the
// scatter region from its base.
func checkScatter(mem []byte, l scatterLayout, round int, counts []uint64) error {
	for id, n := range counts {
		if uint64(id+1)*l.area() > uint64(len(mem)) {
			return fmt.Errorf("scatter area of initiator %d ends past the region (%d bytes)", id, len(mem))
		}
		if n*uint64(l.Size) > l.Lane {
			return fmt.Errorf("initiator %d reports %d operations; its lanes hold %d", id, n, l.Lane/uint64(l.Size))
		}
		for op := 0; op < int(n); op++ {
			for iov := 0; iov < l.IOVs; iov++ {
				off := l.offset(id, op, iov)
				if !recordOK(mem[off:off+uint64(l.Size)], id, round, l.chunkSeq(op, iov)) {
					gi, gr, gs := recordID(mem[off:])
					return fmt.Errorf("initiator %d scatter %d chunk %d (offset %d) did not land: found initiator %d round %d seq %d",
						id, op, iov, off, gi, gr, gs)
				}
			}
		}
	}
	return nil
}
