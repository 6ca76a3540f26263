package dpu

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"unsafe"
)

// mappingCovers reports whether m lies inside one shared, writable mapping
// of this process (/proc/self/maps). ucp_rkey_ptr only offsets the address
// by the segment's base without checking the length, so a region that
// claims more than the target mapped would let a memcpy write outside the
// segment; such a region is served through UCX instead. Where the maps file
// cannot be read (not Linux), the mapping is not used.
func mappingCovers(m []byte) bool {
	if len(m) == 0 {
		return false
	}
	lo := uint64(uintptr(unsafe.Pointer(unsafe.SliceData(m))))
	hi := lo + uint64(len(m))
	if hi < lo {
		return false
	}
	data, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return false
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		// start-end perms offset dev inode path
		line := sc.Bytes()
		dash := bytes.IndexByte(line, '-')
		sp := bytes.IndexByte(line, ' ')
		if dash < 0 || sp < dash || len(line) < sp+5 {
			continue
		}
		start, err1 := strconv.ParseUint(string(line[:dash]), 16, 64)
		end, err2 := strconv.ParseUint(string(line[dash+1:sp]), 16, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		if lo >= start && lo < end {
			perms := line[sp+1 : sp+5]
			return hi <= end && perms[0] == 'r' && perms[1] == 'w' && perms[3] == 's'
		}
	}
	return false
}
