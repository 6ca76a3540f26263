package ucp

/*
#cgo pkg-config: ucx
#cgo CFLAGS: -O2 -Wall
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import "unsafe"

// cString copies a Go string into C memory; the caller frees it.
func cString(s string) *C.char { return C.CString(s) }

func cFree(p unsafe.Pointer) { C.free(p) }

// goStringAndFree returns a C string as a Go string and frees the C copy.
func goStringAndFree(p *C.char) string {
	if p == nil {
		return ""
	}
	defer C.free(unsafe.Pointer(p))
	return C.GoString(p)
}

// Version reports the version of the libucp the program is running against.
func Version() (major, minor, release uint) {
	var a, b, c C.uint
	C.ucp_get_version(&a, &b, &c)
	return uint(a), uint(b), uint(c)
}

// HaveExportedMemoryHandles reports whether the UCX headers this package was
// built with support exporting memory handles (UCX 1.14 and later).
func HaveExportedMemoryHandles() bool { return C.shim_have_exported_memh() != 0 }

// LogLevel is a UCX log level.
type LogLevel int

// UCX log levels (ucs_log_level_t).
const (
	LogFatal LogLevel = C.UCS_LOG_LEVEL_FATAL
	LogError LogLevel = C.UCS_LOG_LEVEL_ERROR
	LogWarn  LogLevel = C.UCS_LOG_LEVEL_WARN
	LogDiag  LogLevel = C.UCS_LOG_LEVEL_DIAG
	LogInfo  LogLevel = C.UCS_LOG_LEVEL_INFO
	LogDebug LogLevel = C.UCS_LOG_LEVEL_DEBUG
	LogTrace LogLevel = C.UCS_LOG_LEVEL_TRACE
)

// SetLogLevel sets UCX's own log level for the process (as UCX_LOG_LEVEL
// would). The Debian build of UCX compiles out messages above WARN.
func SetLogLevel(l LogLevel) { C.shim_set_log_level(C.int(l)) }

// CurrentLogLevel is UCX's log level.
func CurrentLogLevel() LogLevel { return LogLevel(C.shim_log_level()) }
