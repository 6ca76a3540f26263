// Package wasmabi is the contract between a WebAssembly handler module
// (rdmo/plugin/wasm) and the worker that runs it (rdmo/plugin/wasmhost):
// export and import names, the layout of batches, results and remote ops in
// the module's linear memory, and the handshake's encoding.
package wasmabi

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Version is the ABI version. A module exports it (ExportABIVersion); the
// worker refuses a module whose version differs.
const Version = 1

// Exports of a handler module (besides WASI's _initialize, which the worker
// calls once per instance).
const (
	// ExportABIVersion: () -> i32, Version.
	ExportABIVersion = "rdmo_abi_version"
	// ExportInfo: () -> i64, the handshake (EncodeInfo) as ptr<<32 | len.
	ExportInfo = "rdmo_info"
	// ExportBatchBuf: (size i32) -> i32, a pointer to at least size bytes
	// the worker writes a batch into (0: the module cannot have them).
	ExportBatchBuf = "rdmo_batch_buf"
	// ExportHandleBatch: (n i32, client i64) -> i32. Runs the n requests in
	// the batch buffer (n request records, then n result records, then the
	// bytes the records point at) and fills the result records. Returns
	// 0, or CodePanicked after a recovered panic (every result then says
	// so).
	ExportHandleBatch = "rdmo_handle_batch"
	// ExportWriteBack: (client i64) -> i32 status (detail: ExportError).
	ExportWriteBack = "rdmo_write_back"
	// ExportRegionRemoved: (client i64, region i64) -> i32 status.
	ExportRegionRemoved = "rdmo_region_removed"
	// ExportClientRemoved: (client i64) -> ().
	ExportClientRemoved = "rdmo_client_removed"
	// ExportError: () -> i64, the detail of the last hook's error as
	// ptr<<32 | len.
	ExportError = "rdmo_error"
)

// CodePanicked is ExportHandleBatch's (and a hook's) answer after the
// handler panicked: the worker replaces the instance.
const CodePanicked = -1

// ImportModule is the module name of the host functions.
const ImportModule = "rdmo"

// Host functions (module ImportModule). Every one that returns i32 returns
// a status: 0 for success, else an rdmo.Status whose detail ImportLastError
// copies out. Pointers are offsets in the module's linear memory; a range
// outside it fails with StatusOutOfBounds.
const (
	// ImportRegion: (id i64, out i32) -> i32; writes base u64, len u64 at out.
	ImportRegion = "region"
	// ImportPut: (region i64, addr i64, ptr i32, len i32) -> i32. The worker
	// copies the bytes before it returns.
	ImportPut = "put"
	// ImportSync: (ops i32, n i32) -> i32; n OpSize-byte remote op records.
	ImportSync = "sync"
	// ImportPlace: (req i32, region i64, addr i64) -> i32; req indexes the batch.
	ImportPlace = "place"
	// ImportFetch: (req i32, dst i32, n i32) -> i32; copies the rendezvous
	// payload of request req (n bytes, its Length) to dst.
	ImportFetch = "fetch"
	// ImportFlush: () -> i32.
	ImportFlush = "flush"
	// ImportWriteBackAll: () -> i32.
	ImportWriteBackAll = "write_back_all"
	// ImportLastError: (dst i32, cap i32) -> i32; copies up to cap bytes of
	// the last failed call's detail to dst and returns its full length.
	ImportLastError = "last_error"
)

// Request record, ReqSize bytes, little-endian. Offsets are from the start
// of the batch buffer.
const (
	ReqSeq     = 0  // u64
	ReqClient  = 8  // u64
	ReqOp      = 16 // u32
	ReqFlags   = 20 // u32
	ReqLength  = 24 // u64 payload length (also for rendezvous)
	ReqH0      = 32 // u64 Flush.FlushID, Append.PtrAddr or Scatter.Count
	ReqH1      = 40 // u64 Append.PtrRkey
	ReqH2      = 48 // u64 Append.DataRkey
	ReqSubOff  = 56 // u32
	ReqSubLen  = 60 // u32
	ReqPayOff  = 64 // u32
	ReqPayLen  = 68 // u32
	ReqRndv    = 72 // u32: 1 rendezvous payload (still at the initiator)
	ReqHasPay  = 76 // u32: 1 eager payload present (Payload non-nil)
	ReqSize    = 80
	ResStatus  = 0  // u32
	ResDataLen = 4  // u32, at most rdmo.MaxResultData
	ResValue   = 8  // u64
	ResDataPtr = 16 // u32, pointer into linear memory
	ResDetPtr  = 20 // u32
	ResDetLen  = 24 // u32
	ResSize    = 32
)

// Remote op record (ImportSync), OpSize bytes.
const (
	OpKind    = 0  // u32 rdmo.RemoteOpKind
	OpStatus  = 4  // u32 out
	OpRegion  = 8  // u64
	OpAddr    = 16 // u64
	OpOperand = 24 // u64
	OpCompare = 32 // u64
	OpResult  = 40 // u64 out
	OpBufPtr  = 48 // u32 RemoteGet destination
	OpBufLen  = 52 // u32
	OpSize    = 56
)

// ReqRecord, ResRecord and OpRecord are the three records as Go structs
// with the offsets above (TestRecordLayout), for a little-endian reader in
// place, as a module is.
type ReqRecord struct {
	Seq, Client            uint64
	Op, Flags              uint32
	Length, H0, H1, H2     uint64
	SubOff, SubLen         uint32
	PayOff, PayLen         uint32
	Rendezvous, HasPayload uint32
}

// ResRecord is a result record (Res*).
type ResRecord struct {
	Status, DataLen         uint32
	Value                   uint64
	DataPtr, DetPtr, DetLen uint32
	_                       uint32
}

// OpRecord is a remote op record (Op*).
type OpRecord struct {
	Kind, Status                           uint32
	Region, Addr, Operand, Compare, Result uint64
	BufPtr, BufLen                         uint32
}

// BatchLayout returns the offsets of the result records and of the byte
// area of a batch of n requests.
func BatchLayout(n int) (results, bytes int) {
	return n * ReqSize, n * (ReqSize + ResSize)
}

// Info is a module's handshake: the same fields as a go-plugin process's
// Info answer.
type Info struct {
	Name          string
	Version       string
	Ops           []uint32
	NoCachedState bool
	OpNames       []OpName
	Statuses      []Status
	// Inline is rdmo.HandlerInfo.Inline. It travels in a trailing flags
	// word (InfoInline) that a handshake without it lacks, so a module
	// built before it is read as not Inline and the ABI version stays.
	Inline bool
	// InlineRendezvous is rdmo.HandlerInfo.InlineRendezvous, in the same
	// word (InfoInlineRendezvous).
	InlineRendezvous bool
}

// Bits of the handshake's trailing flags word.
const (
	InfoInline           = 1
	InfoInlineRendezvous = 2
)

// OpName names a user op.
type OpName struct {
	Op   uint32
	Name string
}

// Status is a handler-defined status.
type Status struct {
	Code       uint32
	Name, Text string
}

// MaxInfo bounds an encoded handshake.
const MaxInfo = 1 << 20

// EncodeInfo appends the handshake's encoding: strings as u32 length and
// bytes, lists as u32 count and items, then a u32 of flags (InfoInline).
func EncodeInfo(dst []byte, in Info) []byte {
	str := func(s string) {
		dst = binary.LittleEndian.AppendUint32(dst, uint32(len(s)))
		dst = append(dst, s...)
	}
	u32 := func(v uint32) { dst = binary.LittleEndian.AppendUint32(dst, v) }
	dst = binary.LittleEndian.AppendUint32(dst, Version)
	str(in.Name)
	str(in.Version)
	u32(uint32(len(in.Ops)))
	for _, op := range in.Ops {
		u32(op)
	}
	if in.NoCachedState {
		u32(1)
	} else {
		u32(0)
	}
	u32(uint32(len(in.OpNames)))
	for _, o := range in.OpNames {
		u32(o.Op)
		str(o.Name)
	}
	u32(uint32(len(in.Statuses)))
	for _, s := range in.Statuses {
		u32(s.Code)
		str(s.Name)
		str(s.Text)
	}
	var flags uint32
	if in.Inline {
		flags |= InfoInline
	}
	if in.InlineRendezvous {
		flags |= InfoInlineRendezvous
	}
	u32(flags)
	return dst
}

var errShort = errors.New("handshake truncated")

// DecodeInfo reads EncodeInfo's encoding, refusing another ABI version.
func DecodeInfo(b []byte) (Info, error) {
	var in Info
	var err error
	u32 := func() uint32 {
		if err != nil || len(b) < 4 {
			err = errShort
			return 0
		}
		v := binary.LittleEndian.Uint32(b)
		b = b[4:]
		return v
	}
	str := func() string {
		n := u32()
		if err != nil || uint64(n) > uint64(len(b)) {
			err = errShort
			return ""
		}
		s := string(b[:n])
		b = b[n:]
		return s
	}
	// count bounds a list by what is left, so a forged count cannot make
	// the worker allocate more than the handshake's size.
	count := func() int {
		n := u32()
		if err == nil && uint64(n) > uint64(len(b)/4) {
			err = errShort
			return 0
		}
		return int(n)
	}
	if v := u32(); err == nil && v != Version {
		return in, fmt.Errorf("module speaks ABI version %d, this worker %d: rebuild it against this rdmo release", v, Version)
	}
	in.Name, in.Version = str(), str()
	for n := count(); n > 0 && err == nil; n-- {
		in.Ops = append(in.Ops, u32())
	}
	in.NoCachedState = u32() == 1
	for n := count(); n > 0 && err == nil; n-- {
		in.OpNames = append(in.OpNames, OpName{Op: u32(), Name: str()})
	}
	for n := count(); n > 0 && err == nil; n-- {
		in.Statuses = append(in.Statuses, Status{Code: u32(), Name: str(), Text: str()})
	}
	if err == nil && len(b) >= 4 {
		flags := u32()
		in.Inline, in.InlineRendezvous = flags&InfoInline != 0, flags&InfoInlineRendezvous != 0
	}
	if err != nil {
		return Info{}, err
	}
	return in, nil
}
