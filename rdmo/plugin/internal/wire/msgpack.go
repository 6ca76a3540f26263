package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// The subset of MessagePack (https://github.com/msgpack/msgpack/blob/master/spec.md)
// this protocol writes: nil, bool, integers, str, bin and array. The
// decoder also skips any other value (float, map, ext), so a newer peer
// may append fields of any type.

var be = binary.BigEndian

func appendArr(b []byte, n int) []byte {
	switch {
	case n < 16:
		return append(b, 0x90|byte(n))
	case n <= math.MaxUint16:
		return be.AppendUint16(append(b, 0xdc), uint16(n))
	}
	return be.AppendUint32(append(b, 0xdd), uint32(n))
}

func appendUint(b []byte, v uint64) []byte {
	switch {
	case v < 128:
		return append(b, byte(v))
	case v <= math.MaxUint8:
		return append(b, 0xcc, byte(v))
	case v <= math.MaxUint16:
		return be.AppendUint16(append(b, 0xcd), uint16(v))
	case v <= math.MaxUint32:
		return be.AppendUint32(append(b, 0xce), uint32(v))
	}
	return be.AppendUint64(append(b, 0xcf), v)
}

func appendInt(b []byte, v int64) []byte {
	switch {
	case v >= 0:
		return appendUint(b, uint64(v))
	case v >= -32:
		return append(b, byte(v)) // negative fixint
	case v >= math.MinInt8:
		return append(b, 0xd0, byte(v))
	case v >= math.MinInt16:
		return be.AppendUint16(append(b, 0xd1), uint16(v))
	case v >= math.MinInt32:
		return be.AppendUint32(append(b, 0xd2), uint32(v))
	}
	return be.AppendUint64(append(b, 0xd3), uint64(v))
}

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 0xc3)
	}
	return append(b, 0xc2)
}

func appendStr(b []byte, s string) []byte {
	n := len(s)
	switch {
	case n < 32:
		b = append(b, 0xa0|byte(n))
	case n <= math.MaxUint8:
		b = append(b, 0xd9, byte(n))
	case n <= math.MaxUint16:
		b = be.AppendUint16(append(b, 0xda), uint16(n))
	default:
		b = be.AppendUint32(append(b, 0xdb), uint32(n))
	}
	return append(b, s...)
}

// appendBin writes nil for a nil slice, so nil and empty stay apart.
func appendBin(b []byte, v []byte) []byte {
	if v == nil {
		return append(b, 0xc0)
	}
	n := len(v)
	switch {
	case n <= math.MaxUint8:
		b = append(b, 0xc4, byte(n))
	case n <= math.MaxUint16:
		b = be.AppendUint16(append(b, 0xc5), uint16(n))
	default:
		b = be.AppendUint32(append(b, 0xc6), uint32(n))
	}
	return append(b, v...)
}

// dec reads a message from b. The first error sticks (later reads return
// zero values), so a decoder checks r.err once at the end.
type dec struct {
	b   []byte
	off int
	err error
}

var errShort = errors.New("rdmo plugin wire: message ends early")

func (r *dec) fail(err error) {
	if r.err == nil {
		r.err = err
	}
}

// take returns the next n bytes.
func (r *dec) take(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > len(r.b)-r.off {
		r.err = errShort
		return nil
	}
	p := r.b[r.off : r.off+n : r.off+n]
	r.off += n
	return p
}

func (r *dec) code() byte {
	if p := r.take(1); p != nil {
		return p[0]
	}
	return 0
}

// length reads a big-endian length of n bytes.
func (r *dec) length(n int) int {
	p := r.take(n)
	switch {
	case p == nil:
		return 0
	case n == 1:
		return int(p[0])
	case n == 2:
		return int(be.Uint16(p))
	}
	return int(be.Uint32(p))
}

func (r *dec) typeErr(c byte, want string) {
	r.fail(fmt.Errorf("rdmo plugin wire: byte %#02x at offset %d is not %s", c, r.off-1, want))
}

// u reads an unsigned integer (any non-negative msgpack integer).
func (r *dec) u() uint64 {
	c := r.code()
	switch {
	case r.err != nil:
		return 0
	case c < 0x80:
		return uint64(c)
	case c == 0xcc || c == 0xd0:
		if p := r.take(1); p != nil && (c == 0xcc || int8(p[0]) >= 0) {
			return uint64(p[0])
		}
	case c == 0xcd || c == 0xd1:
		if p := r.take(2); p != nil && (c == 0xcd || int16(be.Uint16(p)) >= 0) {
			return uint64(be.Uint16(p))
		}
	case c == 0xce || c == 0xd2:
		if p := r.take(4); p != nil && (c == 0xce || int32(be.Uint32(p)) >= 0) {
			return uint64(be.Uint32(p))
		}
	case c == 0xcf || c == 0xd3:
		if p := r.take(8); p != nil && (c == 0xcf || int64(be.Uint64(p)) >= 0) {
			return be.Uint64(p)
		}
	}
	r.typeErr(c, "an unsigned integer")
	return 0
}

// i reads a signed integer (any msgpack integer that fits int64).
func (r *dec) i() int64 {
	c := r.code()
	switch {
	case r.err != nil:
		return 0
	case c < 0x80:
		return int64(c)
	case c >= 0xe0:
		return int64(int8(c))
	case c == 0xd0:
		if p := r.take(1); p != nil {
			return int64(int8(p[0]))
		}
	case c == 0xd1:
		if p := r.take(2); p != nil {
			return int64(int16(be.Uint16(p)))
		}
	case c == 0xd2:
		if p := r.take(4); p != nil {
			return int64(int32(be.Uint32(p)))
		}
	case c == 0xd3:
		if p := r.take(8); p != nil {
			return int64(be.Uint64(p))
		}
	case c == 0xcc || c == 0xcd || c == 0xce || c == 0xcf:
		r.off--
		if v := r.u(); v <= math.MaxInt64 {
			return int64(v)
		}
	}
	r.typeErr(c, "a signed integer")
	return 0
}

func (r *dec) u32() uint32 {
	v := r.u()
	if v > math.MaxUint32 {
		r.fail(fmt.Errorf("rdmo plugin wire: %d does not fit 32 bits", v))
	}
	return uint32(v)
}

func (r *dec) u8() uint8 {
	v := r.u()
	if v > math.MaxUint8 {
		r.fail(fmt.Errorf("rdmo plugin wire: %d does not fit 8 bits", v))
	}
	return uint8(v)
}

func (r *dec) t() bool {
	switch c := r.code(); {
	case r.err != nil:
	case c == 0xc3:
		return true
	case c == 0xc2:
	default:
		r.typeErr(c, "a bool")
	}
	return false
}

func (r *dec) s() string {
	c := r.code()
	n := 0
	switch {
	case r.err != nil:
		return ""
	case c&0xe0 == 0xa0:
		n = int(c & 0x1f)
	case c == 0xd9:
		n = r.length(1)
	case c == 0xda:
		n = r.length(2)
	case c == 0xdb:
		n = r.length(4)
	case c == 0xc0:
		return ""
	default:
		r.typeErr(c, "a string")
		return ""
	}
	return string(r.take(n))
}

// bin reads a byte string: nil for msgpack nil, else a slice of the
// message (not copied; the message buffer is the decoder's own).
func (r *dec) bin() []byte {
	c := r.code()
	n := 0
	switch {
	case r.err != nil:
		return nil
	case c == 0xc0:
		return nil
	case c == 0xc4:
		n = r.length(1)
	case c == 0xc5:
		n = r.length(2)
	case c == 0xc6:
		n = r.length(4)
	default:
		r.typeErr(c, "a byte string")
		return nil
	}
	if p := r.take(n); p != nil {
		return p
	}
	if r.err == nil {
		return []byte{}
	}
	return nil
}

// arr reads an array header: its length, or -1 for nil. A length beyond
// the bytes left is an error (errCount: every element takes at least one
// byte); count checks the smallest encoding of the elements too.
func (r *dec) arr() int {
	c := r.code()
	n := 0
	switch {
	case r.err != nil:
		return 0
	case c&0xf0 == 0x90:
		n = int(c & 0x0f)
	case c == 0xdc:
		n = r.length(2)
	case c == 0xdd:
		n = r.length(4)
	case c == 0xc0:
		return -1
	default:
		r.typeErr(c, "an array")
		return 0
	}
	if left := len(r.b) - r.off; n > left {
		r.fail(fmt.Errorf("%w: %d elements, %d bytes left", errCount, n, left))
		return 0
	}
	return n
}

// errCount: an array claims more elements than the rest of the message can
// hold. Every count of a message is checked against it before the decoder
// allocates for the elements.
var errCount = errors.New("rdmo plugin wire: array count exceeds what the message can hold")

// count reads the header of an array whose elements take at least min
// bytes each when encoded: its length, or -1 for nil. A length the bytes
// left cannot hold is an error (errCount), so what the decoder allocates
// for the elements is bounded by the message's size times the ratio of an
// element's memory to its smallest encoding (at most about 11, see
// TestPluginWireAllocationBound), whatever the counts claim.
func (r *dec) count(min int) int {
	n := r.arr()
	if r.err == nil && n > 0 {
		if left := len(r.b) - r.off; n > left/min {
			r.fail(fmt.Errorf("%w: %d elements of at least %d bytes, %d bytes left", errCount, n, min, left))
			return 0
		}
	}
	return n
}

// The smallest encodings of the elements of the wire's arrays (wire.go): a
// struct is an array header and one byte per field at least (a fixint, nil,
// a bool or an empty string).
const (
	minOpLen      = 1     // an op id (u32) of InfoResp.Ops
	minStatusLen  = 1 + 3 // StatusName: 3 fields
	minOpNameLen  = 1 + 2 // OpName: 2 fields
	minRequestLen = 1 + 8 // rdmo.Request: 8 fields
	minResultLen  = 1 + 3 // rdmo.Result: 3 fields
	minTargetOp   = 1 + 7 // op: 7 fields
	minSyncOpLen  = 1 + 6 // SyncOp: 6 fields
	minSyncResLen = 1 + 3 // SyncRes: 3 fields
)

// fields opens a struct (an array) of at least want fields and returns how
// many more there are, for skipN after the known ones.
func (r *dec) fields(want int) int {
	n := r.arr()
	if r.err == nil && n < want {
		r.fail(fmt.Errorf("rdmo plugin wire: a struct of %d fields, want %d", n, want))
	}
	return n - want
}

func (r *dec) skipN(n int) {
	for ; n > 0 && r.err == nil; n-- {
		r.skip(0)
	}
}

// skip skips one value of any type.
func (r *dec) skip(depth int) {
	if depth > 64 {
		r.fail(errors.New("rdmo plugin wire: values nested too deep"))
		return
	}
	c := r.code()
	switch {
	case r.err != nil:
	case c < 0x80 || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3:
	case c&0xe0 == 0xa0:
		r.take(int(c & 0x1f))
	case c&0xf0 == 0x90:
		r.skipN2(int(c&0x0f), depth)
	case c&0xf0 == 0x80:
		r.skipN2(2*int(c&0x0f), depth)
	default:
		switch c {
		case 0xcc, 0xd0:
			r.take(1)
		case 0xcd, 0xd1:
			r.take(2)
		case 0xce, 0xd2, 0xca:
			r.take(4)
		case 0xcf, 0xd3, 0xcb:
			r.take(8)
		case 0xc4, 0xd9:
			r.take(r.length(1))
		case 0xc5, 0xda:
			r.take(r.length(2))
		case 0xc6, 0xdb:
			r.take(r.length(4))
		case 0xdc:
			r.skipN2(r.length(2), depth)
		case 0xdd:
			r.skipN2(r.length(4), depth)
		case 0xde:
			r.skipN2(2*r.length(2), depth)
		case 0xdf:
			r.skipN2(2*r.length(4), depth)
		case 0xd4:
			r.take(2)
		case 0xd5:
			r.take(3)
		case 0xd6:
			r.take(5)
		case 0xd7:
			r.take(9)
		case 0xd8:
			r.take(17)
		case 0xc7:
			r.take(r.length(1) + 1)
		case 0xc8:
			r.take(r.length(2) + 1)
		case 0xc9:
			r.take(r.length(4) + 1)
		default:
			r.typeErr(c, "a MessagePack value")
		}
	}
}

func (r *dec) skipN2(n, depth int) {
	if n > len(r.b)-r.off {
		r.fail(errShort)
		return
	}
	for ; n > 0 && r.err == nil; n-- {
		r.skip(depth + 1)
	}
}
