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

// Every field of the record structs sits at its offset constant, and each
// struct is as long as its record.
func TestRecordLayout(t *testing.T) {
	for _, c := range []struct {
		v       any
		size    uintptr
		offsets map[string]uintptr
	}{
		{ReqRecord{}, ReqSize, map[string]uintptr{"Seq": ReqSeq, "Client": ReqClient, "Op": ReqOp, "Flags": ReqFlags,
			"Length": ReqLength, "H0": ReqH0, "H1": ReqH1, "H2": ReqH2, "SubOff": ReqSubOff, "SubLen": ReqSubLen,
			"PayOff": ReqPayOff, "PayLen": ReqPayLen, "Rendezvous": ReqRndv, "HasPayload": ReqHasPay}},
		{ResRecord{}, ResSize, map[string]uintptr{"Status": ResStatus, "DataLen": ResDataLen, "Value": ResValue,
			"DataPtr": ResDataPtr, "DetPtr": ResDetPtr, "DetLen": ResDetLen}},
		{OpRecord{}, OpSize, map[string]uintptr{"Kind": OpKind, "Status": OpStatus, "Region": OpRegion, "Addr": OpAddr,
			"Operand": OpOperand, "Compare": OpCompare, "Result": OpResult, "BufPtr": OpBufPtr, "BufLen": OpBufLen}},
	} {
		typ := reflect.TypeOf(c.v)
		if typ.Size() != c.size {
			t.Errorf("%s is %d bytes, the record %d", typ.Name(), typ.Size(), c.size)
		}
		named := 0
		for i := range typ.NumField() {
			f := typ.Field(i)
			if f.Name == "_" {
				continue
			}
			named++
			off, ok := c.offsets[f.Name]
			switch {
			case !ok:
				t.Errorf("%s.%s is not in the record", typ.Name(), f.Name)
			case f.Offset != off:
				t.Errorf("%s.%s at %d, the record has it at %d", typ.Name(), f.Name, f.Offset, off)
			}
		}
		if named != len(c.offsets) {
			t.Errorf("%s has %d fields, the record %d", typ.Name(), named, len(c.offsets))
		}
	}
}
