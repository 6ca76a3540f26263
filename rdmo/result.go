package rdmo

import (
	"fmt"
	"strconv"
	"sync"
	"unicode/utf8"
)

// Bounds of what a result carries back to the initiator (docs/PROTOCOL.md
// section 6.4). The worker answers a request with one active message whose
// 40-byte ack header, result data and detail fit together in the 256 bytes
// that libucp's binding copies into C memory at once (ucp's inline send
// slot): an answer then costs no completion tracking, no pinning and no
// allocation in the worker, like every other answer. 40 + 128 + 88 = 256.
// Larger results belong in target memory, where the initiator reads them
// one-sidedly or with a get operation.
const (
	// MaxResultData bounds Result.Data. A handler that returns more fails
	// its request with StatusHandlerFailed.
	MaxResultData = 128
	// MaxResultDetail bounds the part of Result.Detail that reaches the
	// initiator; the worker's log line has all of it.
	MaxResultDetail = 88
)

// Plugin-defined status codes. A handler may fail a request with a code of
// its own in [StatusUserBase, StatusUserLast]; the worker passes it through
// unchanged (counting it as a failure like any other), and the initiator
// sees the number. The name is known wherever the package defining the code
// is linked in (the plugin, the initiator that uses its ops): such a
// package calls DefineStatus from a package-level var or init. Codes below
// StatusUserBase stay the catalogue's.
const (
	StatusUserBase Status = 1 << 16
	StatusUserLast Status = 1<<17 - 1
)

// IsUserStatus reports whether s is in the plugin-defined range.
func IsUserStatus(s Status) bool { return s >= StatusUserBase && s <= StatusUserLast }

var userStatuses sync.Map // Status -> userStatus

type userStatus struct {
	name, text string
	err        *WireError
}

// DefineStatus names a plugin-defined status code and returns it, e.g.
//
//	var StatusKeyExists = rdmo.DefineStatus(rdmo.StatusUserBase+1, "KeyExists", "key already present")
//
// It panics for a code outside the user range, and for a code already
// defined with another name (two packages claiming one code is a bug that
// must not show up as a misnamed failure).
func DefineStatus(code Status, name, text string) Status {
	if !IsUserStatus(code) {
		panic(fmt.Sprintf("rdmo: DefineStatus(%d, %q): not in the user range [%d, %d]", code, name, StatusUserBase, StatusUserLast))
	}
	us := userStatus{name: name, text: text, err: &WireError{Status: code}}
	if old, loaded := userStatuses.LoadOrStore(code, us); loaded && old.(userStatus).name != name {
		panic(fmt.Sprintf("rdmo: status %d defined twice: %q and %q", code, old.(userStatus).name, name))
	}
	return code
}

func lookupUser(s Status) (userStatus, bool) {
	if !IsUserStatus(s) {
		return userStatus{}, false
	}
	v, ok := userStatuses.Load(s)
	if !ok {
		return userStatus{}, false
	}
	return v.(userStatus), true
}

func userName(s Status) string {
	if us, ok := lookupUser(s); ok {
		return us.name
	}
	if IsUserStatus(s) {
		return "User(" + strconv.FormatUint(uint64(s), 10) + ")"
	}
	return "Status(" + strconv.FormatUint(uint64(s), 10) + ")"
}

func userText(s Status) string {
	if us, ok := lookupUser(s); ok {
		return us.text
	}
	if IsUserStatus(s) {
		return "plugin status " + strconv.FormatUint(uint64(s), 10)
	}
	return "unknown status " + strconv.FormatUint(uint64(s), 10)
}

// TruncateDetail cuts d to at most n bytes without splitting a UTF-8
// sequence.
func TruncateDetail(d string, n int) string {
	if len(d) <= n {
		return d
	}
	d = d[:n]
	for len(d) > 0 && !utf8.ValidString(d) {
		d = d[:len(d)-1]
	}
	return d
}
