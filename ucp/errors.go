package ucp

/*
#include <ucs/type/status.h>
*/
import "C"

import (
	"errors"
	"fmt"
)

// Status is a UCX status code (ucs_status_t) carried as a Go error.
type Status int32

// UCX status codes that callers test for.
const (
	StatusOK               Status = C.UCS_OK
	StatusInProgress       Status = C.UCS_INPROGRESS
	StatusNoMessage        Status = C.UCS_ERR_NO_MESSAGE
	StatusIOError          Status = C.UCS_ERR_IO_ERROR
	StatusNoMemory         Status = C.UCS_ERR_NO_MEMORY
	StatusInvalidParam     Status = C.UCS_ERR_INVALID_PARAM
	StatusUnreachable      Status = C.UCS_ERR_UNREACHABLE
	StatusInvalidAddr      Status = C.UCS_ERR_INVALID_ADDR
	StatusUnsupported      Status = C.UCS_ERR_UNSUPPORTED
	StatusBusy             Status = C.UCS_ERR_BUSY
	StatusCanceled         Status = C.UCS_ERR_CANCELED
	StatusTimedOut         Status = C.UCS_ERR_TIMED_OUT
	StatusConnectionReset  Status = C.UCS_ERR_CONNECTION_RESET
	StatusEndpointTimeout  Status = C.UCS_ERR_ENDPOINT_TIMEOUT
	StatusRejected         Status = C.UCS_ERR_REJECTED
	StatusNotConnected     Status = C.UCS_ERR_NOT_CONNECTED
	StatusMessageTruncated Status = C.UCS_ERR_MESSAGE_TRUNCATED
	StatusNoResource       Status = C.UCS_ERR_NO_RESOURCE
	StatusAlreadyExists    Status = C.UCS_ERR_ALREADY_EXISTS
	StatusOutOfRange       Status = C.UCS_ERR_OUT_OF_RANGE
	StatusNoDevice         Status = C.UCS_ERR_NO_DEVICE
	StatusBufferTooSmall   Status = C.UCS_ERR_BUFFER_TOO_SMALL
	StatusExceedsLimit     Status = C.UCS_ERR_EXCEEDS_LIMIT
	StatusNoElem           Status = C.UCS_ERR_NO_ELEM
	StatusNoProgress       Status = C.UCS_ERR_NO_PROGRESS
	StatusShmemSegment     Status = C.UCS_ERR_SHMEM_SEGMENT
)

func (s Status) Error() string {
	return fmt.Sprintf("ucx: %s", C.GoString(C.ucs_status_string(C.ucs_status_t(s))))
}

// Is makes errors.Is(err, ErrPeerFailed) true for the statuses UCX reports
// when the other side of an endpoint is gone.
func (s Status) Is(target error) bool {
	if target == ErrPeerFailed {
		switch s {
		case StatusConnectionReset, StatusEndpointTimeout, StatusUnreachable,
			StatusNotConnected, StatusIOError, StatusCanceled, StatusRejected:
			return true
		}
	}
	if t, ok := target.(Status); ok {
		return s == t
	}
	return false
}

func statusErr(st C.ucs_status_t) error {
	if st == C.UCS_OK {
		return nil
	}
	return Status(st)
}

var (
	// ErrNotSupported reports a feature the UCX in use does not have (for
	// example exported memory handles before UCX 1.14) or a transport that
	// cannot do what was asked (rkey_ptr on a network transport).
	ErrNotSupported = Status(C.UCS_ERR_UNSUPPORTED)
	// ErrClosed reports use of an object after Close.
	ErrClosed = errors.New("ucp: use of closed object")
	// ErrReentrant reports a blocking call made from inside Progress.
	ErrReentrant = errors.New("ucp: blocking call from inside Progress (a completer or message handler)")
	// ErrPeerFailed matches every error that means the remote side of an
	// endpoint is gone (errors.Is).
	ErrPeerFailed = errors.New("ucp: peer failed")
	// ErrTooManyOutstanding reports that the worker's table of in-flight
	// operations is full; progress the worker and try again.
	ErrTooManyOutstanding = errors.New("ucp: too many outstanding operations")
	// ErrOutOfBounds reports an address range outside a mapped region.
	ErrOutOfBounds = errors.New("ucp: address range outside the region")
	// ErrEventsLost reports that UCX events could not be recorded (memory
	// allocation failed inside a callback); the worker is no longer reliable.
	ErrEventsLost = errors.New("ucp: events lost: out of memory in a UCX callback")
)

// EndpointError is the error an endpoint carries after UCX reported it failed.
type EndpointError struct {
	Endpoint string // the endpoint's name
	Status   Status
}

func (e *EndpointError) Error() string {
	return fmt.Sprintf("ucp: endpoint %s failed: %v", e.Endpoint, e.Status)
}

func (e *EndpointError) Unwrap() []error { return []error{e.Status, ErrPeerFailed} }
