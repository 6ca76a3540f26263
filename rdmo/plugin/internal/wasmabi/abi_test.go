package wasmabi

import (
	"reflect"
	"testing"
)

// The handshake round-trips, and one without the trailing flags word (a
// module built before it) reads as not Inline.
func TestInfoRoundTrip(t *testing.T) {
	in := Info{Name: "h", Version: "1.0", Ops: []uint32{16, 17}, NoCachedState: true,
		OpNames:  []OpName{{Op: 16, Name: "h-op"}},
		Statuses: []Status{{Code: 300, Name: "H_BAD", Text: "bad"}}, Inline: true, InlineRendezvous: true}
	b := EncodeInfo(nil, in)
	got, err := DecodeInfo(b)
	if err != nil || !reflect.DeepEqual(got, in) {
		t.Fatalf("DecodeInfo = %+v, %v; want %+v", got, err, in)
	}
	got, err = DecodeInfo(b[:len(b)-4])
	in.Inline, in.InlineRendezvous = false, false
	if err != nil || !reflect.DeepEqual(got, in) {
		t.Fatalf("without flags: DecodeInfo = %+v, %v; want %+v", got, err, in)
	}
}
