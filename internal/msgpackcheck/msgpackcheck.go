// Package msgpackcheck validates msgpack bytes from an untrusted peer before
// a decoder sees them: the msgpack decoder trusts element counts (v5.4.1
// allocates a whole slice from the count alone, so a 14-byte message can ask
// for 160 GB), and this check bounds every count by the bytes present.
package msgpackcheck

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Value checks that b is exactly one msgpack value, that every length or
// count in it fits in the bytes that remain, that containers nest at most
// maxDepth deep, and that it uses no extension types.
func Value(b []byte, maxDepth int) error {
	rest, err := skipValue(b, 0, maxDepth)
	if err != nil {
		return err
	}
	if len(rest) != 0 {
		return fmt.Errorf("%d bytes after the value", len(rest))
	}
	return nil
}

// Map is Value for a body that must be a map.
func Map(b []byte, maxDepth int) error {
	if len(b) == 0 {
		return errors.New("empty body")
	}
	if c := b[0]; !(c&0xf0 == 0x80 || c == 0xde || c == 0xdf) {
		return fmt.Errorf("body is not a msgpack map (first byte %#02x)", c)
	}
	return Value(b, maxDepth)
}

var errShort = errors.New("value runs past the end of the body")

func skipValue(b []byte, depth, maxDepth int) ([]byte, error) {
	if len(b) == 0 {
		return nil, errShort
	}
	c := b[0]
	b = b[1:]
	switch {
	case c <= 0x7f || c >= 0xe0: // positive / negative fixint
		return b, nil
	case c&0xf0 == 0x80: // fixmap
		return skipItems(b, 2*uint64(c&0x0f), depth, maxDepth)
	case c&0xf0 == 0x90: // fixarray
		return skipItems(b, uint64(c&0x0f), depth, maxDepth)
	case c&0xe0 == 0xa0: // fixstr
		return skipBytes(b, uint64(c&0x1f))
	}
	switch c {
	case 0xc0, 0xc2, 0xc3: // nil, false, true
		return b, nil
	case 0xcc, 0xd0: // uint8, int8
		return skipBytes(b, 1)
	case 0xcd, 0xd1: // uint16, int16
		return skipBytes(b, 2)
	case 0xca, 0xce, 0xd2: // float32, uint32, int32
		return skipBytes(b, 4)
	case 0xcb, 0xcf, 0xd3: // float64, uint64, int64
		return skipBytes(b, 8)
	case 0xc4, 0xd9: // bin8, str8
		n, rest, err := readLen(b, 1)
		if err != nil {
			return nil, err
		}
		return skipBytes(rest, n)
	case 0xc5, 0xda: // bin16, str16
		n, rest, err := readLen(b, 2)
		if err != nil {
			return nil, err
		}
		return skipBytes(rest, n)
	case 0xc6, 0xdb: // bin32, str32
		n, rest, err := readLen(b, 4)
		if err != nil {
			return nil, err
		}
		return skipBytes(rest, n)
	case 0xdc: // array16
		n, rest, err := readLen(b, 2)
		if err != nil {
			return nil, err
		}
		return skipItems(rest, n, depth, maxDepth)
	case 0xdd: // array32
		n, rest, err := readLen(b, 4)
		if err != nil {
			return nil, err
		}
		return skipItems(rest, n, depth, maxDepth)
	case 0xde: // map16
		n, rest, err := readLen(b, 2)
		if err != nil {
			return nil, err
		}
		return skipItems(rest, 2*n, depth, maxDepth)
	case 0xdf: // map32
		n, rest, err := readLen(b, 4)
		if err != nil {
			return nil, err
		}
		return skipItems(rest, 2*n, depth, maxDepth)
	case 0xc1:
		return nil, errors.New("reserved msgpack code 0xc1")
	}
	// 0xc7–0xc9, 0xd4–0xd8: extension types; this protocol uses none.
	return nil, fmt.Errorf("msgpack extension type %#02x not allowed", c)
}

func readLen(b []byte, size int) (uint64, []byte, error) {
	if len(b) < size {
		return 0, nil, errShort
	}
	switch size {
	case 1:
		return uint64(b[0]), b[1:], nil
	case 2:
		return uint64(binary.BigEndian.Uint16(b)), b[2:], nil
	default:
		return uint64(binary.BigEndian.Uint32(b)), b[4:], nil
	}
}

func skipBytes(b []byte, n uint64) ([]byte, error) {
	if n > uint64(len(b)) {
		return nil, errShort
	}
	return b[n:], nil
}

// skipItems skips n values; every value takes at least one byte, so a count
// larger than the bytes left is rejected before any work.
func skipItems(b []byte, n uint64, depth, maxDepth int) ([]byte, error) {
	if n > uint64(len(b)) {
		return nil, errShort
	}
	if depth+1 > maxDepth {
		return nil, fmt.Errorf("containers nested deeper than %d", maxDepth)
	}
	var err error
	for i := uint64(0); i < n; i++ {
		if b, err = skipValue(b, depth+1, maxDepth); err != nil {
			return nil, err
		}
	}
	return b, nil
}
