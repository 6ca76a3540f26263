package rdmo

import "errors"

//go:generate go run gen_status.go

// Status is a wire status code: the u32 a worker puts in a flush response
// (first_status) or an ack (status) to say why a request failed.
//
// Codes are stable forever. A code, once published, is never renumbered or
// reused, because initiators built against an older catalogue must keep
// reading newer workers correctly. New codes are appended to the catalogue.
type Status uint32

// The status catalogue. docs/ERRORS.md is generated from statusCatalog.
const (
	StatusOK                Status = 0
	StatusShortHeader       Status = 1
	StatusHeaderTooLong     Status = 2
	StatusUnknownOp         Status = 3
	StatusUnknownFlags      Status = 4
	StatusPayloadMismatch   Status = 5
	StatusLengthOverflow    Status = 6
	StatusClientMismatch    Status = 7
	StatusUnknownRegion     Status = 8
	StatusRegionNotOwned    Status = 9
	StatusOutOfBounds       Status = 10
	StatusQueueOverflow     Status = 11
	StatusEmptyAppend       Status = 12
	StatusRendezvousRefused Status = 13
	StatusTooManyInFlight   Status = 14
	StatusHandlerFailed     Status = 15
	StatusTargetUnreachable Status = 16
	StatusRegionGone        Status = 17
	StatusInternal          Status = 18
	StatusNoQueue           Status = 19
	StatusUnknownPool       Status = 20
	StatusPoolRefused       Status = 21
)

// Sentinel errors, one per non-OK status. Every error this package returns
// is a *WireError that matches exactly one of these with errors.Is, so a
// caller can branch on the kind and still print the detail.
var (
	ErrShortHeader       = &WireError{Status: StatusShortHeader}
	ErrHeaderTooLong     = &WireError{Status: StatusHeaderTooLong}
	ErrUnknownOp         = &WireError{Status: StatusUnknownOp}
	ErrUnknownFlags      = &WireError{Status: StatusUnknownFlags}
	ErrPayloadMismatch   = &WireError{Status: StatusPayloadMismatch}
	ErrLengthOverflow    = &WireError{Status: StatusLengthOverflow}
	ErrClientMismatch    = &WireError{Status: StatusClientMismatch}
	ErrUnknownRegion     = &WireError{Status: StatusUnknownRegion}
	ErrRegionNotOwned    = &WireError{Status: StatusRegionNotOwned}
	ErrOutOfBounds       = &WireError{Status: StatusOutOfBounds}
	ErrQueueOverflow     = &WireError{Status: StatusQueueOverflow}
	ErrEmptyAppend       = &WireError{Status: StatusEmptyAppend}
	ErrRendezvousRefused = &WireError{Status: StatusRendezvousRefused}
	ErrTooManyInFlight   = &WireError{Status: StatusTooManyInFlight}
	ErrHandlerFailed     = &WireError{Status: StatusHandlerFailed}
	ErrTargetUnreachable = &WireError{Status: StatusTargetUnreachable}
	ErrRegionGone        = &WireError{Status: StatusRegionGone}
	ErrInternal          = &WireError{Status: StatusInternal}
	ErrNoQueue           = &WireError{Status: StatusNoQueue}
	ErrUnknownPool       = &WireError{Status: StatusUnknownPool}
	ErrPoolRefused       = &WireError{Status: StatusPoolRefused}
)

// StatusInfo is one row of the status catalogue.
type StatusInfo struct {
	Code    Status
	Name    string // Go identifier without the Status/Err prefix, e.g. "ShortHeader"
	Text    string // short lower-case text used in error messages
	Meaning string // when a worker or decoder reports it; rendered in docs/ERRORS.md
	Err     *WireError
}

// statusCatalog is the single source of truth for codes, names and texts.
// Its index must equal its Code: TestStatusCatalogIsDense enforces that, so
// lookups are array indexing.
var statusCatalog = [...]StatusInfo{
	{StatusOK, "OK", "ok",
		"The request completed. Never carried as an error; `Status.Err` returns nil.", nil},
	{StatusShortHeader, "ShortHeader", "header shorter than its operation requires",
		"The AM header is shorter than 16 bytes, or shorter than the sub-header of its op; also a response shorter than its kind needs.", ErrShortHeader},
	{StatusHeaderTooLong, "HeaderTooLong", "header longer than its operation allows",
		"The AM header is longer than 64 bytes, or a reference op (FLUSH, APPEND, SCATTER) carries bytes after its sub-header.", ErrHeaderTooLong},
	{StatusUnknownOp, "UnknownOp", "unknown or reserved operation id",
		"The op id is reserved (5..15), or is a user op (>= 16) with no plugin registered for it, or is a BATCH container (3) inside a container (or sent to a worker older than batch support); also an unknown response id.", ErrUnknownOp},
	{StatusUnknownFlags, "UnknownFlags", "unknown flag bits set",
		"A flag bit other than FENCE (bit 0) and ACK (bit 1) is set; any flag set on a BATCH container itself, or in a batch entry's `flags`.", ErrUnknownFlags},
	{StatusPayloadMismatch, "PayloadMismatch", "payload does not match the header",
		"A FLUSH carries a payload; a SCATTER payload holds fewer or more bytes than its `count` iovs describe, or ends inside an iov descriptor; a BATCH container's data does not hold exactly `count` well-framed entries.", ErrPayloadMismatch},
	{StatusLengthOverflow, "LengthOverflow", "length exceeds the bytes present or the allowed maximum",
		"A scatter iov's `len`, or a batch entry's `hdr_len` + `payload_len`, runs past the end of the payload, or an encoder was given more than 65535 bytes for one iov; also an eager payload (a request's, or a BATCH container's as a whole) larger than the worker accepts (`dpu.Config.MaxEagerPayload`, 1 MiB by default).", ErrLengthOverflow},
	{StatusClientMismatch, "ClientMismatch", "client id does not match the connection",
		"The request header's client id is not the client that owns the connection (request queue) the request arrived on.", ErrClientMismatch},
	{StatusUnknownRegion, "UnknownRegion", "unknown region id",
		"A region id (`ptr_rkey`, `data_rkey`, an iov `rkey`) names no registered region.", ErrUnknownRegion},
	{StatusRegionNotOwned, "RegionNotOwned", "region belongs to another client",
		"The region id exists but was registered by a different client.", ErrRegionNotOwned},
	{StatusOutOfBounds, "OutOfBounds", "address range outside the region",
		"`[addr, addr+len)` is not inside the region, including when `addr+len` wraps around 2^64.", ErrOutOfBounds},
	{StatusQueueOverflow, "QueueOverflow", "append would pass the end of the queue's region",
		"An APPEND would write past the end of its data region; nothing is written and the tail does not move.", ErrQueueOverflow},
	{StatusEmptyAppend, "EmptyAppend", "zero-length append",
		"An APPEND has no payload.", ErrEmptyAppend},
	{StatusRendezvousRefused, "RendezvousRefused", "rendezvous transfer refused",
		"The payload arrived by rendezvous and the op or worker cannot take it that way (the reference refuses rendezvous SCATTER).", ErrRendezvousRefused},
	{StatusTooManyInFlight, "TooManyInFlight", "too many requests in flight",
		"The worker's limit of outstanding requests for this connection was reached; the request was not run.", ErrTooManyInFlight},
	{StatusHandlerFailed, "HandlerFailed", "operation handler failed",
		"A plugin handler returned an error or crashed while running the request.", ErrHandlerFailed},
	{StatusTargetUnreachable, "TargetUnreachable", "target endpoint failed",
		"The worker's endpoint to the target process failed, so the RMA into target memory did not complete.", ErrTargetUnreachable},
	{StatusRegionGone, "RegionGone", "region deregistered while in use",
		"The region was deregistered (MR_DEREG) while the request was using it.", ErrRegionGone},
	{StatusInternal, "Internal", "internal worker error",
		"A worker bug or resource failure not covered by another code.", ErrInternal},
	{StatusNoQueue, "NoQueue", "the worker serves no request queue on this endpoint",
		"The request arrived on an endpoint that is not the one the worker connected for a request queue (RQ_CREATE): typically an initiator whose endpoint asked for another error-handling mode than the worker's (over shared memory, docs/SECURITY.md), or a sender with no queue. Nothing was run; the worker answers a FLUSH with it (rate-limited).", ErrNoQueue},
	{StatusUnknownPool, "UnknownPool", "unknown lend pool, or a reference outside it",
		"A request with FlagByRef names a lend pool not registered on its connection (or being released), or bytes outside the pool; or a LEND_POOL release names an unknown pool. Nothing was read.", ErrUnknownPool},
	{StatusPoolRefused, "PoolRefused", "lend pool registration refused",
		"A LEND_POOL registration the worker refuses: the pool id is registered already on the connection, the connection has as many pools as it may, the key cannot be unpacked, or the pool claims more bytes than the initiator's memory holds. (A pool the worker merely cannot map, as over TCP, is no failure: its ack says so with value 0.)", ErrPoolRefused},
}

// Statuses returns a copy of the status catalogue in code order.
func Statuses() []StatusInfo {
	out := make([]StatusInfo, len(statusCatalog))
	copy(out, statusCatalog[:])
	return out
}

// Known reports whether s is in this build's catalogue. A newer worker may
// send codes an older initiator does not know; those are still valid errors.
func (s Status) Known() bool { return uint64(s) < uint64(len(statusCatalog)) }

// Name returns the catalogue name ("OutOfBounds"), the name a plugin gave
// its code (DefineStatus), "User(n)" for an undefined plugin code, or
// "Status(n)" for a code this build does not know.
func (s Status) Name() string {
	if s.Known() {
		return statusCatalog[s].Name
	}
	return userName(s)
}

// String returns the short text of the code.
func (s Status) String() string {
	if s.Known() {
		return statusCatalog[s].Text
	}
	return userText(s)
}

// Error makes a Status usable directly as an error value.
func (s Status) Error() string { return "rdmo: " + s.String() }

// Err returns nil for StatusOK and otherwise the sentinel *WireError for the
// code, so a status received as a u32 becomes a Go error that errors.Is can
// match. Codes unknown to this build yield a fresh *WireError carrying them.
func (s Status) Err() error {
	if s == StatusOK {
		return nil
	}
	if s.Known() {
		return statusCatalog[s].Err
	}
	if us, ok := lookupUser(s); ok {
		return us.err
	}
	return &WireError{Status: s}
}

// WireError is the single error type of this package: a status code plus a
// human-readable detail. errors.Is matches it against the sentinel with the
// same Status (ErrShortHeader, ...) and against the Status value itself.
type WireError struct {
	Status Status
	Detail string
}

func (e *WireError) Error() string {
	if e.Detail == "" {
		return "rdmo: " + e.Status.String()
	}
	return "rdmo: " + e.Status.String() + ": " + e.Detail
}

// Is compares by Status only, so a detailed error matches its sentinel.
func (e *WireError) Is(target error) bool {
	switch t := target.(type) {
	case *WireError:
		return t != nil && t.Status == e.Status
	case Status:
		return t == e.Status
	}
	return false
}

// StatusOf returns the wire status that describes err: StatusOK for nil,
// the Status of a *WireError or Status in err's chain, and StatusInternal
// for any other error, so a worker always has a code to send. A non-nil
// error never maps to StatusOK, or a failure would be reported as success.
func StatusOf(err error) Status {
	if err == nil {
		return StatusOK
	}
	s := StatusInternal
	var we *WireError
	var st Status
	switch {
	case errors.As(err, &we):
		s = we.Status
	case errors.As(err, &st):
		s = st
	}
	if s == StatusOK {
		return StatusInternal
	}
	return s
}

func wireErr(s Status, detail string) *WireError {
	return &WireError{Status: s, Detail: detail}
}
