package wasmhost

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// stopGlobal is the export name of the global addStopCheck adds.
const stopGlobal = "rdmo_stop"

// stopEvery is how many loop heads a module passes between two looks at
// stopGlobal (each a trip out of the compiled code, some hundred
// nanoseconds): a loop head costs a few nanoseconds, so a stop and a
// garbage collection wait some tens of microseconds at most.
const stopEvery = 4096

// addStopCheck returns a copy of a WebAssembly binary with a check at the
// head of every loop. Only a loop runs code again, so a call that does not
// return passes loop heads over and over (or overflows its stack). The
// check counts down a new global (fuel); every stopEvery loop heads it
// runs memory.grow 0, which leaves the compiled code for Go code of the
// runtime and back (so that Go's scheduler can preempt the goroutine: a
// garbage collection waits for every goroutine, and compiled code is
// never preempted), and then reads another new global, exported as
// stopGlobal: nonzero traps (unreachable). Setting it from another
// goroutine stops the call within stopEvery loop heads.
//
// wazero's own way (RuntimeConfig.WithCloseOnContextDone) leaves the
// compiled code at every loop head, and starts a goroutine and makes a
// channel on every call into the module, whose wake-ups cost more than a
// small batch itself; this check is a decrement and a branch per loop head
// and nothing per call.
//
// It decodes every instruction of every function body (the immediates are
// what it must skip) and refuses a binary it cannot read; the caller then
// falls back to wazero's way.
func addStopCheck(bin []byte) ([]byte, error) {
	if len(bin) < 8 || string(bin[:4]) != "\x00asm" || binary.LittleEndian.Uint32(bin[4:]) != 1 {
		return nil, errors.New("not a WebAssembly 1 binary")
	}
	type section struct {
		id   byte
		body []byte
	}
	var secs []section
	r := &reader{b: bin, off: 8}
	for !r.done() {
		id := r.byte1()
		n := r.u32()
		body := r.bytes(int(n))
		if r.err != nil {
			return nil, r.err
		}
		secs = append(secs, section{id, body})
	}
	const (
		secImport = 2
		secMemory = 5
		secGlobal = 6
		secExport = 7
		secCode   = 10
	)
	// The new globals' indexes: after the imported and the defined ones.
	var globals uint32
	hasCode, hasMemory := false, false
	for _, s := range secs {
		switch s.id {
		case secImport:
			n, mem, err := importedGlobals(s.body)
			if err != nil {
				return nil, fmt.Errorf("import section: %w", err)
			}
			globals += n
			hasMemory = hasMemory || mem
		case secMemory:
			hasMemory = true
		case secGlobal:
			gr := &reader{b: s.body}
			globals += gr.u32()
			if gr.err != nil {
				return nil, gr.err
			}
		case secCode:
			hasCode = true
		}
	}
	if !hasCode || !hasMemory {
		return nil, errors.New("no code or no memory")
	}
	stop, fuel := globals, globals+1
	gget := func(b []byte, i uint32) []byte { return binary.AppendUvarint(append(b, 0x23), uint64(i)) }
	gset := func(b []byte, i uint32) []byte { return binary.AppendUvarint(append(b, 0x24), uint64(i)) }
	every := appendSLEB(nil, stopEvery) // an i32.const's immediate
	// fuel -= 1; if fuel == 0 { fuel = stopEvery; memory.grow 0; if stop { unreachable } }
	check := gget(nil, fuel)
	check = append(check, 0x41, 0x01, 0x6b) // i32.const 1; i32.sub
	check = gset(check, fuel)
	check = gget(check, fuel)
	check = append(check, 0x45, 0x04, 0x40) // i32.eqz; if
	check = append(append(check, 0x41), every...)
	check = gset(check, fuel)
	check = append(check, 0x41, 0x00, 0x40, 0x00, 0x1a) // i32.const 0; memory.grow 0; drop
	check = gget(check, stop)
	check = append(check, 0x04, 0x40, 0x00, 0x0b, 0x0b) // if; unreachable; end; end

	out := append([]byte(nil), bin[:8]...)
	emit := func(id byte, body []byte) {
		out = append(out, id)
		out = binary.AppendUvarint(out, uint64(len(body)))
		out = append(out, body...)
	}
	// stop: (mut i32) (i32.const 0); fuel: (mut i32) (i32.const stopEvery)
	newGlobals := append([]byte{0x7f, 0x01, 0x41, 0x00, 0x0b, 0x7f, 0x01, 0x41}, every...)
	newGlobals = append(newGlobals, 0x0b)
	wroteGlobal, wroteExport := false, false
	for _, s := range secs {
		// Sections come in a fixed order (rank); a missing global or
		// export section goes before the first section after its place.
		if !wroteGlobal && s.id != 0 && rank(s.id) > rank(secGlobal) {
			emit(secGlobal, append([]byte{2}, newGlobals...))
			wroteGlobal = true
		}
		if !wroteExport && s.id != 0 && rank(s.id) > rank(secExport) {
			emit(secExport, appendExport([]byte{1}, stop))
			wroteExport = true
		}
		switch s.id {
		case secGlobal, secExport:
			sr := &reader{b: s.body}
			n := sr.u32()
			if sr.err != nil {
				return nil, sr.err
			}
			if s.id == secGlobal {
				body := append(binary.AppendUvarint(nil, uint64(n)+2), s.body[sr.off:]...)
				emit(s.id, append(body, newGlobals...))
				wroteGlobal = true
				continue
			}
			body := append(binary.AppendUvarint(nil, uint64(n)+1), s.body[sr.off:]...)
			body, wroteExport = appendExport(body, stop), true
			emit(s.id, body)
		case secCode:
			body, err := rewriteCode(s.body, check)
			if err != nil {
				return nil, fmt.Errorf("code section: %w", err)
			}
			emit(secCode, body)
		default:
			emit(s.id, s.body)
		}
	}
	return out, nil
}

// appendSLEB appends v as a signed LEB128.
func appendSLEB(b []byte, v int64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v == 0 && c&0x40 == 0 || v == -1 && c&0x40 != 0 {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

// rank is the place of a (non-custom) section in a binary's order.
func rank(id byte) int {
	switch {
	case id == 13: // tag: between memory and global
		return 55
	case id == 12: // data count: between element and code
		return 95
	}
	return int(id) * 10
}

// appendExport appends the export of global idx as stopGlobal (after the
// count, which the caller wrote).
func appendExport(dst []byte, idx uint32) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(stopGlobal)))
	dst = append(dst, stopGlobal...)
	dst = append(dst, 0x03) // global
	return binary.AppendUvarint(dst, uint64(idx))
}

// importedGlobals counts the globals an import section imports, and
// reports whether it imports a memory.
func importedGlobals(b []byte) (globals uint32, memory bool, err error) {
	r := &reader{b: b}
	for n := r.u32(); n > 0 && r.err == nil; n-- {
		r.bytes(int(r.u32())) // module
		r.bytes(int(r.u32())) // name
		switch kind := r.byte1(); kind {
		case 0: // func
			r.u32()
		case 1: // table
			r.valtype()
			r.limits()
		case 2: // memory
			r.limits()
			memory = true
		case 3: // global
			r.valtype()
			r.byte1()
			globals++
		case 4: // tag
			r.byte1()
			r.u32()
		default:
			return 0, false, fmt.Errorf("import kind %#x", kind)
		}
	}
	return globals, memory, r.err
}

// rewriteCode inserts check after the block type of every loop of every
// function body.
func rewriteCode(b []byte, check []byte) ([]byte, error) {
	r := &reader{b: b}
	n := r.u32()
	out := binary.AppendUvarint(make([]byte, 0, len(b)+len(b)/8), uint64(n))
	var fn []byte
	for i := uint32(0); i < n && r.err == nil; i++ {
		size := r.u32()
		body := r.bytes(int(size))
		if r.err != nil {
			break
		}
		var err error
		if fn, err = rewriteBody(fn[:0], body, check); err != nil {
			return nil, fmt.Errorf("function %d: %w", i, err)
		}
		out = binary.AppendUvarint(out, uint64(len(fn)))
		out = append(out, fn...)
	}
	if r.err == nil && !r.done() {
		return nil, errors.New("bytes after the last function")
	}
	return out, r.err
}

// rewriteBody copies a function body with check after every loop's block
// type, and with a dispatch loop's entry and forward jumps made direct.
//
// A dispatch loop is how Go compiles a function to WebAssembly: the body
// is one loop whose head is a block per resume point and a br_table on a
// local (the next "PC"), and a jump between two of Go's basic blocks is
// `i32.const K; local.set pc; br loop`, through the loop head (its check
// included) and the br_table, forward jumps too. A forward one is
// rewritten to branch straight to the end of the block the br_table would
// pick for K: the same place, without the indirect jump and without the
// check, which only a backward jump needs (code with no backward jump
// ends). Backward jumps and every other loop keep theirs. And a call,
// which enters with pc 0, branches to its block before the br_table.
func rewriteBody(dst, body, check []byte) ([]byte, error) {
	r := &reader{b: body}
	for n := r.u32(); n > 0 && r.err == nil; n-- { // local declarations
		r.u32()
		r.valtype()
	}
	if r.err != nil {
		return nil, r.err
	}
	dst = append(dst, body[:r.off]...)
	last := r.off
	var (
		depth  int         // labels open
		d      *dispatch   // the body's dispatch loop, once found
		tried  bool        // whether the first loop was looked at
		region = -1        // the resume point whose code runs here
		k      = int64(-1) // an i32.const just before, or -1
		kSet   bool        // and then a local.set of d.pc
		entry  = -1        // where the dispatch's local.get pc is
	)
	for !r.done() && r.err == nil {
		start := r.off
		if start == entry {
			// A call enters with pc 0: a compare and a direct branch to
			// its block (local.get pc; i32.eqz; br_if) leave the
			// br_table's indirect jump to backward jumps and
			// resumptions, whose targets vary.
			dst = append(dst, body[last:start]...)
			dst = append(dst, 0x20)
			dst = binary.AppendUvarint(dst, uint64(d.pc))
			dst = append(dst, 0x45, 0x0d)
			dst = binary.AppendUvarint(dst, uint64(d.table[0]))
			last = start
		}
		op := r.byte1()
		prevK, prevSet := k, kSet
		k, kSet = -1, false
		switch {
		case op == 0x03: // loop
			r.blocktype()
			dst = append(dst, body[last:r.off]...)
			dst = append(dst, check...)
			last = r.off
			// Only a loop without parameters or results (block type
			// 0x40) dispatches: a branch to it and one to a block then
			// carry the same (no) values.
			if !tried && r.err == nil && r.off == start+2 && body[start+1] == 0x40 {
				if d = readDispatch(body[r.off:], depth); d != nil && d.table[0] >= 0 {
					entry = r.off + 2*d.blocks
				}
			}
			tried = true
			depth++
		case op == 0x02 || op == 0x04: // block, if
			r.blocktype()
			depth++
		case op == 0x0b: // end
			depth--
			switch {
			case d == nil:
			case depth == d.loop: // the loop's own end: its label is gone
				d = nil
			case depth > d.loop && depth <= d.loop+d.blocks:
				region = d.loop + d.blocks - depth
			}
		case op <= 0x01, op == 0x05, op == 0x0f, op == 0x1a, op == 0x1b, op == 0xd1,
			op >= 0x45 && op <= 0xc4:
			// no immediate
		case op == 0x0c || op == 0x0d: // br, br_if
			label := int(r.u32())
			if d == nil || !prevSet || depth-1-label != d.loop {
				break
			}
			if t := d.target(prevK); t > region && region >= 0 {
				dst = append(dst, body[last:start+1]...)
				dst = binary.AppendUvarint(dst, uint64(depth-1-(d.loop+d.blocks-t)))
				last = r.off
			}
		case op == 0x21: // local.set
			x := r.u32()
			kSet = d != nil && prevK >= 0 && x == d.pc
			k = prevK
		case op == 0x10 || op == 0x12 || op == 0x20 || op >= 0x22 && op <= 0x26 || op == 0xd2:
			r.u32()
		case op == 0x0e: // br_table
			for n := r.u32(); n > 0 && r.err == nil; n-- {
				r.u32()
			}
			r.u32()
		case op == 0x11 || op == 0x13: // call_indirect, return_call_indirect
			r.u32()
			r.u32()
		case op == 0x1c: // select t*
			for n := r.u32(); n > 0 && r.err == nil; n-- {
				r.valtype()
			}
		case op >= 0x28 && op <= 0x3e:
			r.memarg()
		case op == 0x3f || op == 0x40: // memory.size, memory.grow
			r.u32()
		case op == 0x41: // i32.const
			k = r.s32()
		case op == 0x42:
			r.s64()
		case op == 0x43:
			r.bytes(4)
		case op == 0x44:
			r.bytes(8)
		case op == 0xd0: // ref.null t
			r.valtype()
		case op == 0xfc:
			r.miscOp()
		case op == 0xfd:
			r.simdOp()
		default:
			return nil, fmt.Errorf("opcode %#x at %d", op, r.off-1)
		}
	}
	if r.err != nil {
		return nil, r.err
	}
	return append(dst, body[last:]...), nil
}

// dispatch is a dispatch loop: the loop label's index among the open
// labels, the blocks of its head, the local the br_table reads and the
// table (resume point by value of pc; the default last).
type dispatch struct {
	loop, blocks int
	pc           uint32
	table        []int
}

// readDispatch reads what follows a loop's block type at b: blocks
// without results, local.get pc, a br_table to those blocks, end (of the
// innermost block). loop is the loop label's index. Anything else is no
// dispatch loop (nil).
func readDispatch(b []byte, loop int) *dispatch {
	r := &reader{b: b}
	n := 0
	for r.off+1 < len(b) && b[r.off] == 0x02 && b[r.off+1] == 0x40 {
		r.off += 2
		n++
	}
	if n == 0 || r.byte1() != 0x20 {
		return nil
	}
	d := &dispatch{loop: loop, blocks: n, pc: r.u32()}
	if r.byte1() != 0x0e {
		return nil
	}
	cnt := r.u32()
	if r.err != nil || int(cnt) > len(b) {
		return nil
	}
	for i := uint32(0); i <= cnt && r.err == nil; i++ { // the entries and the default
		t := r.u32()
		if t >= uint32(n) { // the loop or beyond: not a resume point
			d.table = append(d.table, -1)
			continue
		}
		d.table = append(d.table, int(t))
	}
	if r.err != nil || r.byte1() != 0x0b {
		return nil
	}
	return d
}

// target is the resume point a jump with pc = k lands on, -1 if none.
func (d *dispatch) target(k int64) int {
	if k < 0 || k >= int64(len(d.table)-1) {
		return d.table[len(d.table)-1]
	}
	return d.table[k]
}

// reader reads a WebAssembly binary; the first error sticks.
type reader struct {
	b   []byte
	off int
	err error
}

var errShort = errors.New("truncated")

func (r *reader) done() bool { return r.off >= len(r.b) }

func (r *reader) byte1() byte {
	if r.err != nil || r.off >= len(r.b) {
		r.err = errShort
		return 0
	}
	c := r.b[r.off]
	r.off++
	return c
}

func (r *reader) bytes(n int) []byte {
	if r.err != nil || n < 0 || n > len(r.b)-r.off {
		r.err = errShort
		return nil
	}
	s := r.b[r.off : r.off+n]
	r.off += n
	return s
}

func (r *reader) u64() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b[r.off:])
	if n <= 0 {
		r.err = errShort
		return 0
	}
	r.off += n
	return v
}

func (r *reader) u32() uint32 {
	v := r.u64()
	if v > 1<<32-1 {
		r.err = errors.New("u32 out of range")
	}
	return uint32(v)
}

// s32 reads a signed LEB128 of an i32.const (up to 5 bytes).
func (r *reader) s32() int64 {
	var v int64
	var shift uint
	for i := 0; i < 5; i++ {
		c := r.byte1()
		v |= int64(c&0x7f) << shift
		shift += 7
		if c&0x80 == 0 {
			if shift < 64 && c&0x40 != 0 {
				v |= -1 << shift
			}
			return int64(int32(v))
		}
	}
	r.err = errors.New("LEB128 too long")
	return 0
}

// s64 skips a signed LEB128 (up to 10 bytes).
func (r *reader) s64() {
	for i := 0; i < 10; i++ {
		if r.byte1()&0x80 == 0 {
			return
		}
	}
	r.err = errors.New("LEB128 too long")
}

// valtype reads a value type: one byte, or a typed reference (0x63, 0x64)
// with its heap type.
func (r *reader) valtype() {
	if c := r.byte1(); c == 0x63 || c == 0x64 {
		r.s64()
	}
}

func (r *reader) limits() {
	flags := r.byte1()
	r.u64()
	if flags&1 != 0 {
		r.u64()
	}
}

// blocktype reads a block type: empty (0x40), a value type or a type
// index (a non-negative s33).
func (r *reader) blocktype() {
	if r.err != nil || r.off >= len(r.b) {
		r.err = errShort
		return
	}
	c := r.b[r.off]
	if c == 0x40 || c >= 0x6f && c <= 0x7f && c != 0x63 && c != 0x64 {
		r.off++
		return
	}
	if c == 0x63 || c == 0x64 {
		r.valtype()
		return
	}
	r.s64()
}

func (r *reader) memarg() {
	align := r.u32()
	if align&0x40 != 0 { // multi-memory: a memory index follows
		r.u32()
	}
	r.u64()
}

// miscOp reads the 0xfc-prefixed instructions (saturating truncation,
// bulk memory, tables).
func (r *reader) miscOp() {
	switch op := r.u32(); {
	case op <= 7:
	case op == 8 || op == 10 || op == 12 || op == 14: // memory.init, memory.copy, table.init, table.copy
		r.u32()
		r.u32()
	case op == 9 || op == 11 || op == 13 || op >= 15 && op <= 17:
		r.u32()
	default:
		r.err = fmt.Errorf("opcode 0xfc %d", op)
	}
}

// simdOp reads the 0xfd-prefixed (vector) instructions.
func (r *reader) simdOp() {
	switch op := r.u32(); {
	case op <= 11 || op == 92 || op == 93: // loads and stores
		r.memarg()
	case op == 12 || op == 13: // v128.const, i8x16.shuffle
		r.bytes(16)
	case op >= 21 && op <= 34: // extract and replace lane
		r.byte1()
	case op >= 84 && op <= 91: // load and store lane
		r.memarg()
		r.byte1()
	case op <= 0x113:
	default:
		r.err = fmt.Errorf("opcode 0xfd %d", op)
	}
}
