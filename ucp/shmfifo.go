package ucp

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"os"
	"strconv"
	"strings"
	"sync"
)

// UCX's shared-memory transports (sysv, posix) receive through one FIFO per
// interface in a shared segment that every local sender maps. A sender
// claims a slot (an atomic increment of the FIFO's head), writes its
// message into the slot, then sets the slot's owner bit to the lap the slot
// was claimed in; the receiver reads slots strictly in order and waits on
// the next one until its owner bit says it is ready. A sender killed
// between the claim and the mark leaves a slot that never becomes ready,
// and no later message of any local peer is read again: UCX has no way out
// (docs/SECURITY.md finding 9). What a receiver of this process can do is
// finish the dead sender's slot itself: mark it ready as a message of an
// active-message id that no UCP handler takes (UCX's stub handler logs it
// and drops it), and the FIFO delivers again from the next slot on.
//
// That needs UCX's FIFO layout, which UCX does not export
// (uct_mm_fifo_ctl_t and uct_mm_fifo_element_t in
// src/uct/sm/mm/base/mm_iface.h, unchanged from 1.13 to 1.20): a control
// block of two cache lines (the head at offset 0, the signaling socket's
// address length at 8 and address at 12, the tail, which the receiver
// advances in steps, at 128, the owner's pid at 136), then the elements,
// each starting with its flags (bit 0 owner, bit 1 inline), its
// active-message id and its 16-bit length. A FIFO is found by that
// signature in this process's shared mappings, its geometry (elements of
// UCX_*_FIFO_ELEM_SIZE bytes, 128 by default; a power-of-two count, 64 in
// UCX 1.13 and 256 in 1.18) from the mapping's size, and every element is
// checked before anything is written. A mapping that does not fit is left
// alone. Memory is read and written through /proc/self/mem, so a FIFO
// unmapped meanwhile (its worker closed) fails the access instead of the
// process.

const (
	fifoCtlSize     = 192 // sizeof(uct_mm_fifo_ctl_t): two cache lines, rounded to 64
	fifoHeadArmed   = 1 << 63
	fifoTailOffset  = 128
	fifoPidOffset   = 136
	fifoAddrLenOff  = 8
	fifoFamilyOff   = 12
	fifoFlagOwner   = 1
	fifoFlagInline  = 2
	fifoDefaultElem = 128
	fifoMaxSlots    = 1 << 20
	fifoAFUnix      = 1 // AF_UNIX: the family of the signaling socket's address
	fifoMaxAddrLen  = 110
	fifoAMIDs       = 32 // UCT_AM_ID_MAX
)

// fillerAMID is the active-message id a filled slot carries: UCP's own ids
// end at 26 (UCP_AM_ID_LAST, 1.13 to 1.20), so UCT's stub handler takes
// it, logs a warning and drops the empty message.
const fillerAMID = fifoAMIDs - 1

// ShmFIFOWait is one of this process's shared-memory receive FIFOs whose
// reader waits on a slot that a sender claimed and has not marked ready.
// Seen once, it may be a sender in the middle of its copy; seen again at
// the same slot after a while, the sender died.
type ShmFIFOWait struct {
	// Name is the FIFO's mapping as /proc/self/maps names it (/SYSV...,
	// /dev/shm/ucx_shm_posix_...).
	Name string
	// Slot is the waited-on slot's sequence number: how many slots were
	// claimed before it.
	Slot uint64
	// Claimed is how many slots past the tail senders have claimed.
	Claimed uint64

	fifo shmFIFO
}

// shmFIFO is a receive FIFO found in this process's mappings.
type shmFIFO struct {
	base  uint64 // the mapping's address: the control block
	path  string // as /proc/self/maps names the mapping
	id    string // its device and inode (for sysv the inode is the shmid)
	slots uint64 // a power of two
	elem  uint64 // bytes per element
}

// ErrShmFIFORepairOff is ShmFIFOWaits's answer when the environment turned
// the repair off (RDMO_SHM_FIFO_REPAIR=0).
var ErrShmFIFORepairOff = errors.New("ucp: shared-memory FIFO repair turned off (RDMO_SHM_FIFO_REPAIR=0)")

// ShmFIFORepairSupported reports whether the libucp this process runs
// against has the FIFO layout ShmFIFOWaits knows (UCX 1.13 to 1.20; read
// from each of those versions' sources).
func ShmFIFORepairSupported() bool {
	major, minor, _ := Version()
	return major == 1 && minor >= 13 && minor <= 20
}

// SameSlot reports whether w and o are the same FIFO waiting on the same
// slot (every sysv segment of a process may have one Name).
func (w ShmFIFOWait) SameSlot(o ShmFIFOWait) bool {
	return w.fifo.id == o.fifo.id && w.fifo.base == o.fifo.base && w.Slot == o.Slot
}

// ShmFIFOWaits returns the shared-memory receive FIFOs of this process
// whose reader waits on a claimed slot that is not ready. A FIFO whose
// reader is idle or busy reading ready slots is not in it. It fails with
// ErrNotSupported on a UCX whose FIFO layout it does not know, and with
// ErrShmFIFORepairOff when RDMO_SHM_FIFO_REPAIR=0.
func ShmFIFOWaits() ([]ShmFIFOWait, error) {
	if !ShmFIFORepairSupported() {
		return nil, ErrNotSupported
	}
	if os.Getenv("RDMO_SHM_FIFO_REPAIR") == "0" {
		return nil, ErrShmFIFORepairOff
	}
	fifos, err := shmFIFOs()
	if err != nil {
		return nil, err
	}
	var out []ShmFIFOWait
	for _, f := range fifos {
		if slot, claimed, ok := f.waitedSlot(); ok {
			out = append(out, ShmFIFOWait{Name: f.path, Slot: slot, Claimed: claimed, fifo: f})
		}
	}
	return out, nil
}

// ErrShmFIFOMoved means the FIFO's reader no longer waits on the slot
// UnblockShmFIFO was given (the sender finished it, or the FIFO is gone).
var ErrShmFIFOMoved = errors.New("ucp: the shared-memory FIFO no longer waits on that slot")

// UnblockShmFIFO marks the slot w names ready, as an empty message no
// handler takes, so that its reader reads on; the sender that claimed it
// must be dead (a live one would lose its message and write into a slot
// that is no longer its). It returns ErrShmFIFOMoved when the reader no
// longer waits on that slot.
func UnblockShmFIFO(w ShmFIFOWait) error {
	f := w.fifo
	if f.slots == 0 {
		return errors.New("ucp: UnblockShmFIFO of a ShmFIFOWait that ShmFIFOWaits did not return")
	}
	if !f.valid() {
		return ErrShmFIFOMoved
	}
	slot, _, ok := f.waitedSlot()
	if !ok || slot != w.Slot {
		return ErrShmFIFOMoved
	}
	mem, err := procMem()
	if err != nil {
		return err
	}
	addr := f.elemAddr(slot)
	// The id and the length first, the flags after them: the reader
	// takes the slot as soon as its owner bit turns, and two writes
	// through /proc/self/mem are ordered.
	var rest [3]byte
	rest[0] = fillerAMID
	if _, err := mem.WriteAt(rest[:], int64(addr+1)); err != nil {
		return fmt.Errorf("ucp: fill FIFO slot: %w", err)
	}
	flags := [1]byte{fifoFlagInline | byte(f.owner(slot))}
	if _, err := mem.WriteAt(flags[:], int64(addr)); err != nil {
		return fmt.Errorf("ucp: fill FIFO slot: %w", err)
	}
	return nil
}

// owner is the owner bit of slot i when ready.
func (f shmFIFO) owner(i uint64) uint64 {
	return (i >> bits.TrailingZeros64(f.slots)) & 1
}

func (f shmFIFO) elemAddr(i uint64) uint64 {
	return f.base + fifoCtlSize + (i&(f.slots-1))*f.elem
}

// waitedSlot reads the head, the tail and the slots between them, and
// returns the first claimed slot that is not ready and how many slots are
// claimed past the tail.
func (f shmFIFO) waitedSlot() (slot, claimed uint64, ok bool) {
	var ctl [fifoCtlSize]byte
	if !readMem(f.base, ctl[:]) {
		return 0, 0, false
	}
	head := binary.LittleEndian.Uint64(ctl[0:]) &^ fifoHeadArmed
	tail := binary.LittleEndian.Uint64(ctl[fifoTailOffset:])
	if head < tail || head-tail > f.slots {
		return 0, 0, false
	}
	elems := make([]byte, f.slots*f.elem)
	if !readMem(f.base+fifoCtlSize, elems) {
		return 0, 0, false
	}
	for i := tail; i < head; i++ {
		if uint64(elems[(i&(f.slots-1))*f.elem]&fifoFlagOwner) != f.owner(i) {
			return i, head - tail, true
		}
	}
	return 0, 0, false
}

// valid reads the control block and every element header again and checks
// them against the FIFO's signature.
func (f shmFIFO) valid() bool {
	buf := make([]byte, fifoCtlSize+f.slots*f.elem)
	if !readMem(f.base, buf) {
		return false
	}
	if int(int32(binary.LittleEndian.Uint32(buf[fifoPidOffset:]))) != os.Getpid() {
		return false
	}
	if n := binary.LittleEndian.Uint32(buf[fifoAddrLenOff:]); n <= 2 || n > fifoMaxAddrLen {
		return false
	}
	if binary.LittleEndian.Uint16(buf[fifoFamilyOff:]) != fifoAFUnix {
		return false
	}
	head := binary.LittleEndian.Uint64(buf[0:]) &^ fifoHeadArmed
	tail := binary.LittleEndian.Uint64(buf[fifoTailOffset:])
	if head < tail || head-tail > f.slots {
		return false
	}
	for i := uint64(0); i < f.slots; i++ {
		e := buf[fifoCtlSize+i*f.elem:]
		if e[0]&^(fifoFlagOwner|fifoFlagInline) != 0 || e[1] >= fifoAMIDs {
			return false
		}
	}
	return true
}

// shmFIFOs finds this process's shared-memory receive FIFOs.
func shmFIFOs() ([]shmFIFO, error) {
	maps, err := os.Open("/proc/self/maps")
	if err != nil {
		return nil, err
	}
	defer maps.Close()
	page := uint64(os.Getpagesize())
	seen := map[string]bool{}
	var out []shmFIFO
	sc := bufio.NewScanner(maps)
	for sc.Scan() {
		// address perms offset dev inode path
		fl := strings.Fields(sc.Text())
		if len(fl) < 6 || len(fl[1]) < 4 || fl[1][0] != 'r' || fl[1][1] != 'w' || fl[1][3] != 's' {
			continue
		}
		path := fl[5]
		var elem uint64
		switch {
		case strings.HasPrefix(path, "/SYSV"):
			elem = fifoElemSize("SYSV")
		case strings.HasPrefix(path, "/dev/shm/ucx_shm_posix_"):
			elem = fifoElemSize("POSIX")
		default:
			continue
		}
		if fl[2] != "00000000" || elem == 0 || elem%8 != 0 {
			continue
		}
		lo, hi, ok := strings.Cut(fl[0], "-")
		if !ok {
			continue
		}
		base, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil || end <= base {
			continue
		}
		key := fl[3] + ":" + fl[4] // device and inode: a segment mapped twice is one FIFO
		if seen[key] {
			continue
		}
		// The FIFO's segment is its control block, the elements and a
		// cache line of slack (UCT_MM_GET_FIFO_SIZE), in whole pages:
		// find the one power-of-two count that fits.
		size := end - base
		slots := uint64(0)
		for n := uint64(2); n <= fifoMaxSlots; n <<= 1 {
			if (fifoCtlSize+n*elem+63+page-1)/page*page == size {
				if slots != 0 {
					slots = 0 // two counts fit: cannot tell
					break
				}
				slots = n
			}
		}
		if slots == 0 {
			continue
		}
		f := shmFIFO{base: base, path: path, id: key, slots: slots, elem: elem}
		if f.valid() {
			seen[key] = true
			out = append(out, f)
		}
	}
	return out, sc.Err()
}

// fifoElemSize is the FIFO element size of transport tl (SYSV, POSIX) as
// this process's environment sets it; 0 when it cannot be read.
func fifoElemSize(tl string) uint64 {
	for _, k := range []string{"UCX_" + tl + "_FIFO_ELEM_SIZE", "UCX_MM_FIFO_ELEM_SIZE"} {
		if v, ok := os.LookupEnv(k); ok {
			n, ok := parseMemUnits(v)
			if !ok || n <= 0 {
				return 0
			}
			return uint64(n)
		}
	}
	return fifoDefaultElem
}

var (
	procMemOnce sync.Once
	procMemFile *os.File
	procMemErr  error
)

// procMem is /proc/self/mem, open for reading and writing.
func procMem() (*os.File, error) {
	procMemOnce.Do(func() {
		procMemFile, procMemErr = os.OpenFile("/proc/self/mem", os.O_RDWR, 0)
	})
	return procMemFile, procMemErr
}

// readMem reads len(buf) bytes of this process's memory at addr; false if
// any of it is not mapped.
func readMem(addr uint64, buf []byte) bool {
	mem, err := procMem()
	if err != nil {
		return false
	}
	n, err := mem.ReadAt(buf, int64(addr))
	return err == nil && n == len(buf)
}
