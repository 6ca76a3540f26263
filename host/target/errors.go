package target

import (
	"errors"
	"fmt"

	"github.com/openrdmo/rdmo/rdmo/command"
	"github.com/openrdmo/rdmo/urom"
)

// ErrClosed is returned by a Target's methods after Close.
var ErrClosed = errors.New("target: closed")

// ErrServiceExited is a Target's Err when the embedded UROM service it
// started exited under it.
var ErrServiceExited = errors.New("the embedded UROM service exited")

// ErrServiceShuttingDown is a Target's Err when the UROM service stopped
// its RDMO worker on its way down (SIGTERM to rdmo dpu, after its drain
// timeout): errors.Is(err, urom.ErrShuttingDown) holds.
var ErrServiceShuttingDown error = serviceShuttingDown{}

type serviceShuttingDown struct{}

func (serviceShuttingDown) Error() string        { return urom.ReasonShuttingDown }
func (serviceShuttingDown) Is(target error) bool { return target == urom.ErrShuttingDown }

// WorkerDiedError is a Target's Err when its RDMO worker process died;
// errors.Is(err, urom.ErrWorkerDied) holds.
type WorkerDiedError struct {
	Reason string // as the UROM service reported it
}

func (e *WorkerDiedError) Error() string { return "the RDMO worker died: " + e.Reason }

// Is makes a WorkerDiedError match urom.ErrWorkerDied.
func (e *WorkerDiedError) Is(target error) bool { return target == urom.ErrWorkerDied }

// ServiceError is a failure to start, reach or use a UROM service. Err
// wraps the cause (urom.ErrAuth, urom.ErrVersion, a context error, ...).
type ServiceError struct {
	Addr     string // the service's address ("" if an embedded one did not start)
	Embedded bool   // the service is (or was to be) this process's child
	Op       string // what failed ("" for reaching the service)
	Err      error
}

func (e *ServiceError) Error() string {
	switch {
	case e.Embedded && e.Addr == "":
		return fmt.Sprintf("embedded UROM service: %v", e.Err)
	case e.Op != "":
		return fmt.Sprintf("%s on the UROM service at %s: %v", e.Op, e.Addr, e.Err)
	}
	return fmt.Sprintf("UROM service at %s: %v", e.Addr, e.Err)
}

func (e *ServiceError) Unwrap() error { return e.Err }

// CommandError is a command the RDMO worker refused or could not answer.
// Err wraps the cause: the worker's status (command.ErrUnknownClient, ...,
// see package dpu), a *WorkerDiedError, ErrServiceExited or a context
// error.
type CommandError struct {
	Command command.CommandType
	Err     error
}

func (e *CommandError) Error() string { return fmt.Sprintf("%v: %v", e.Command, e.Err) }

func (e *CommandError) Unwrap() error { return e.Err }
