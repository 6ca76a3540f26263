// Package ops is an operation pack of RDMO handlers that replace dependent
// round trips: get, fetch-add, compare-swap, indirect read and write,
// alloc and a key-value table, each built into the worker and loadable as
// a plugin (cmd/rdmo-plugin-NAME).
//
// Every op is a user op with a fixed sub-header of little-endian u64
// words (docs/OPS.md has the tables); requests and their results are built
// and read with the Encode* and Decode* functions of this package, which
// the handlers use too. The handlers check every address against the
// client's regions before the Target does, so a failure names the hop or
// bucket at fault; a failed request changes nothing in target memory.
//
// Ordering: a handler runs one client's requests in arrival order, and
// every request sees the effects of the requests before it, without FENCE:
// the worker serialises a client's handlers (on the client's executor, or
// on its loop for a batch it runs inline: every handler of the pack
// declares rdmo.HandlerInfo.Inline, which only a built-in handler gets),
// the atomics complete inside Target.Sync, and a handler that Puts makes
// its writes visible with Target.Flush before it returns.
// Requests of a batch that do not depend on each other share a
// Target.Sync, so a batch of N lookups costs the rounds of one.
package ops

import "github.com/openrdmo/rdmo/rdmo"

// Operation ids (user range; 16..31 are left to examples such as
// examples/counter and to users). OpName names them ("kv-insert(39)").
var (
	OpGet           = rdmo.DefineOp(32, "get")            // sub: region, addr, len -> Data: the bytes
	OpFetchAdd      = rdmo.DefineOp(33, "fetch-add")      // sub: region, addr, delta -> Value: old value
	OpCompareSwap   = rdmo.DefineOp(34, "compare-swap")   // sub: region, addr, expected, desired -> Value: old value
	OpIndirectRead  = rdmo.DefineOp(35, "indirect-read")  // sub: region, addr, shape -> Data: the bytes, Value: their address
	OpIndirectWrite = rdmo.DefineOp(36, "indirect-write") // sub: region, addr, shape; payload: the bytes -> Value: their address
	OpAlloc         = rdmo.DefineOp(37, "alloc")          // sub: region, head -> Value: the block's address
	OpKVLookup      = rdmo.DefineOp(38, "kv-lookup")      // sub: region, table, key -> Data: the value
	OpKVInsert      = rdmo.DefineOp(39, "kv-insert")      // sub: region, table, key; payload: the value -> Value: 1 if it replaced one
)

// Handler names (HandlerInfo.Name, and the plugin names: rdmo-plugin-NAME).
const (
	NameGet         = "get"
	NameFetchAdd    = "fetch-add"
	NameCompareSwap = "compare-swap"
	NameIndirect    = "indirect"
	NameAlloc       = "alloc"
	NameKV          = "kv"

	// Version of every handler of the pack.
	Version = "1.0.0"
)

// Limits.
const (
	// MaxDepth bounds the pointers an indirect op follows: a cycle in
	// target memory costs at most MaxDepth reads, never a loop.
	MaxDepth = 16
	// MaxIndirectWrite bounds an indirect write's payload.
	MaxIndirectWrite = 4096
	// MaxProbes bounds the buckets a kv op looks at.
	MaxProbes = 32
	// MaxAllocRetries bounds the compare-and-swap attempts of one alloc
	// when something else (the target, another client) changes the list.
	MaxAllocRetries = 8
)

// Plugin-defined statuses of the pack (rdmo.StatusUserBase + 0x100...).
var (
	StatusNilPointer = rdmo.DefineStatus(rdmo.StatusUserBase+0x101, "NilPointer", "indirect op met a nil pointer")
	StatusExhausted  = rdmo.DefineStatus(rdmo.StatusUserBase+0x102, "Exhausted", "free list is empty")
	StatusNotFound   = rdmo.DefineStatus(rdmo.StatusUserBase+0x103, "NotFound", "key not in the table")
	StatusTableFull  = rdmo.DefineStatus(rdmo.StatusUserBase+0x104, "TableFull", "no free bucket within the probe limit")
	StatusBadTable   = rdmo.DefineStatus(rdmo.StatusUserBase+0x105, "BadTable", "not a valid kv table")
	StatusBadKey     = rdmo.DefineStatus(rdmo.StatusUserBase+0x106, "BadKey", "key 0 is reserved")
	StatusContended  = rdmo.DefineStatus(rdmo.StatusUserBase+0x107, "Contended", "free list changed under every attempt")
)

// Handlers returns every handler of the pack, for a worker's built-ins.
func Handlers() []rdmo.Handler {
	return []rdmo.Handler{NewGet(), NewFetchAdd(), NewCompareSwap(), NewIndirect(), NewAlloc(), NewKV()}
}

// ByName returns the handler of the pack with that name, or nil.
func ByName(name string) rdmo.Handler {
	switch name {
	case NameGet:
		return NewGet()
	case NameFetchAdd:
		return NewFetchAdd()
	case NameCompareSwap:
		return NewCompareSwap()
	case NameIndirect:
		return NewIndirect()
	case NameAlloc:
		return NewAlloc()
	case NameKV:
		return NewKV()
	}
	return nil
}
