package initiator

import (
	"errors"
	"fmt"
	"time"

	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/wire"
	"github.com/openrdmo/rdmo/ucp"
)

// ErrClosed is returned by every call made after Close, and by a flush or a
// window wait that Close interrupted.
var ErrClosed = errors.New("initiator: closed")

// ErrFlushTimeout matches a *FlushTimeoutError.
var ErrFlushTimeout = errors.New("initiator: flush not answered in time")

// FlushTimeoutError is the cause of the failure of an Initiator one of
// whose flushes had no answer within Options.FlushTimeout: the worker
// stopped serving its queue (a stopped or hung process, a lost peer that
// UCX does not detect).
type FlushTimeoutError struct {
	ID    uint64        // the flush's id
	Limit time.Duration // Options.FlushTimeout
}

func (e *FlushTimeoutError) Error() string {
	return fmt.Sprintf("flush %d not answered within %v (the RDMO worker stopped serving this queue)", e.ID, e.Limit)
}

// Is makes a FlushTimeoutError match ErrFlushTimeout.
func (e *FlushTimeoutError) Is(target error) bool { return target == ErrFlushTimeout }

// PeerFailedError reports that the endpoint to the RDMO worker failed. It
// matches ucp.ErrPeerFailed with errors.Is, and also its cause.
type PeerFailedError struct {
	Cause error // what UCX reported, or what was given to PeerFailed
}

func (e *PeerFailedError) Error() string {
	if e.Cause == nil {
		return "initiator: peer failed"
	}
	return "initiator: peer failed: " + e.Cause.Error()
}

// Unwrap makes errors.Is match ucp.ErrPeerFailed and the cause.
func (e *PeerFailedError) Unwrap() []error {
	if e.Cause == nil {
		return []error{ucp.ErrPeerFailed}
	}
	return []error{ucp.ErrPeerFailed, e.Cause}
}

// RequestError is a failure the worker reported in the ack of one request
// (a request sent with rdmo.FlagAck). It matches the status's sentinel
// (errors.Is(err, rdmo.ErrUnknownRegion)).
type RequestError struct {
	Op     uint32      // op id of the failed request
	Seq    uint64      // its arrival sequence number on the connection
	Status rdmo.Status // why it failed
	// Detail is the worker's explanation (its first rdmo.MaxResultDetail
	// bytes; empty from a worker without wire.CapabilityResult).
	Detail string
}

func (e *RequestError) Error() string {
	if e.Detail != "" {
		return fmt.Sprintf("initiator: %s seq %d failed: %v (%s): %s", rdmo.OpName(e.Op), e.Seq, e.Status, e.Status.Name(), e.Detail)
	}
	return fmt.Sprintf("initiator: %s seq %d failed: %v", rdmo.OpName(e.Op), e.Seq, e.Status)
}

// Unwrap returns the status as a *rdmo.WireError.
func (e *RequestError) Unwrap() error { return e.Status.Err() }

// FlushError is returned by a flush whose response reports failed requests.
// It matches the first failure's status (errors.Is(err, rdmo.ErrOutOfBounds))
// and carries the whole response.
type FlushError struct {
	Response wire.FlushResponse
}

func (e *FlushError) Error() string {
	return "initiator: flush: " + e.Response.Err().Error()
}

// Unwrap returns the response's error, a *rdmo.WireError with the first
// failure's status.
func (e *FlushError) Unwrap() error { return e.Response.Err() }
