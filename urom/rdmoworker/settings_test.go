package rdmoworker_test

import (
	"bytes"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/openrdmo/rdmo/dpu"
)

// The in-flight limit in the CLIENT_INIT answer is additive on the wire:
// an answer without it (an older worker) decodes as 0, which hosts take
// for the default, a 0 is not sent at all, and an older host that does
// not know the key ignores it.
func TestNotificationInFlightLimitCompatible(t *testing.T) {
	type oldNotification struct {
		Type   dpu.CommandType `msgpack:"type"`
		Status uint16          `msgpack:"status"`
		Client uint64          `msgpack:"client"`
		Addr   []byte          `msgpack:"addr,omitempty"`
	}
	old, err := msgpack.Marshal(oldNotification{Client: 7, Addr: []byte{1, 2}})
	if err != nil {
		t.Fatal(err)
	}
	var n dpu.Notification
	if err := msgpack.Unmarshal(old, &n); err != nil || n.MaxInFlightPerRQ != 0 || n.Client != 7 {
		t.Errorf("an older worker's answer: %+v, %v", n, err)
	}
	b, err := msgpack.Marshal(dpu.Notification{Client: 7})
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(b, []byte("max_in_flight_per_rq")) {
		t.Errorf("a zero limit is on the wire: %q", b)
	}
	b, err = msgpack.Marshal(dpu.Notification{Client: 7, Addr: []byte{1}, MaxInFlightPerRQ: 64})
	if err != nil {
		t.Fatal(err)
	}
	var o oldNotification
	if err := msgpack.Unmarshal(b, &o); err != nil || o.Client != 7 {
		t.Errorf("an older host reading a new answer: %+v, %v", o, err)
	}
	if err := msgpack.Unmarshal(b, &n); err != nil || n.MaxInFlightPerRQ != 64 {
		t.Errorf("round trip: %+v, %v", n, err)
	}
}
