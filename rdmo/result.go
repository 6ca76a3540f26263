package rdmo

import (
	"fmt"
	"sort"
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
// package calls DefineStatus from a package-level var or init. A worker
// that runs the handler as a plugin process learns the names from the
// plugin's handshake (RegisterStatuses). Codes below StatusUserBase stay
// the catalogue's.
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
	if err := RegisterStatus(code, name, text); err != nil {
		panic(err.Error())
	}
	return code
}

// MaxStatusName and MaxStatusText bound the name and text of a
// plugin-defined status that RegisterStatus accepts: they end up in log
// lines, metric labels and errors.
const (
	MaxStatusName = 64
	MaxStatusText = 256
)

// RegisterStatus is DefineStatus for names learned at run time, such as
// the statuses a plugin process declares when a worker loads it: it
// returns an error instead of panicking for a code outside the user range,
// an empty or over-long name or text, or a code this process already knows
// under another name. Registering a code again with the same name is a
// no-op (the first text stays).
func RegisterStatus(code Status, name, text string) error {
	return RegisterStatuses([]StatusInfo{{Code: code, Name: name, Text: text}})
}

// RegisterStatuses registers several statuses (Code, Name and Text of
// each) as RegisterStatus does: all of them, or, when one is refused,
// none.
func RegisterStatuses(list []StatusInfo) error {
	registerMu.Lock()
	defer registerMu.Unlock()
	for i, s := range list {
		if err := checkUserStatus(s.Code, s.Name, s.Text); err != nil {
			return err
		}
		if old, ok := lookupUser(s.Code); ok && old.name != s.Name {
			return fmt.Errorf("rdmo: status %d defined twice: %q and %q", s.Code, old.name, s.Name)
		}
		for _, o := range list[:i] {
			if o.Code == s.Code && o.Name != s.Name {
				return fmt.Errorf("rdmo: status %d defined twice: %q and %q", s.Code, o.Name, s.Name)
			}
		}
	}
	for _, s := range list {
		userStatuses.LoadOrStore(s.Code, userStatus{name: s.Name, text: s.Text, err: &WireError{Status: s.Code}})
	}
	return nil
}

// registerMu makes a RegisterStatuses all or nothing.
var registerMu sync.Mutex

func checkUserStatus(code Status, name, text string) error {
	switch {
	case !IsUserStatus(code):
		return fmt.Errorf("rdmo: status %d (%q): not in the user range [%d, %d]", code, name, StatusUserBase, StatusUserLast)
	case name == "" || len(name) > MaxStatusName || !utf8.ValidString(name):
		return fmt.Errorf("rdmo: status %d: name %.80q: want 1 to %d bytes of UTF-8", code, name, MaxStatusName)
	case len(text) > MaxStatusText || !utf8.ValidString(text):
		return fmt.Errorf("rdmo: status %d (%s): text of %d bytes: want at most %d bytes of UTF-8", code, name, len(text), MaxStatusText)
	}
	return nil
}

// UserStatuses returns the plugin-defined statuses this process knows
// (DefineStatus, RegisterStatus), in code order, with Code, Name, Text and
// Err set. A plugin process declares them to the worker that loads it, so
// the worker's logs, metrics and errors name them too.
func UserStatuses() []StatusInfo {
	var out []StatusInfo
	userStatuses.Range(func(k, v any) bool {
		us := v.(userStatus)
		out = append(out, StatusInfo{Code: k.(Status), Name: us.name, Text: us.text, Err: us.err})
		return true
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Code < out[j].Code })
	return out
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
