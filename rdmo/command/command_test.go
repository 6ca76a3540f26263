package command

import (
	"errors"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/openrdmo/rdmo/rdmo"
)

// The command channel carries these structs as they are: their msgpack
// keys are the wire format and never change.
func TestWireKeys(t *testing.T) {
	for _, tc := range []struct {
		v    any
		keys []string
	}{
		{ClientInit{ID: 1, Addr: []byte{1}}, []string{"id", "addr"}},
		{RQCreate{Client: 1, Addr: []byte{1}, ErrorHandling: RQErrorsNone, ZeroClientID: true}, []string{"client", "addr", "err_mode", "zero_client_id"}},
		{RQDestroy{Client: 1, RQ: 2}, []string{"client", "rq"}},
		{MRReg{Client: 1, VA: 2, Len: 3, PackedRkey: []byte{1}, PackedMemh: []byte{2}}, []string{"client", "va", "len", "packed_rkey", "packed_memh"}},
		{MRDereg{Client: 1, Region: 2}, []string{"client", "region"}},
		{FlushWait{Client: 1, RQ: 2, After: 3, Wait: 4}, []string{"client", "rq", "after", "wait"}},
		{Notification{Type: CmdRQCreate, Status: rdmo.StatusOK, Client: 1, RQ: 2}, []string{"type", "status", "client", "rq"}},
	} {
		b, err := msgpack.Marshal(tc.v)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := msgpack.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		if len(m) != len(tc.keys) {
			t.Errorf("%T: keys %v, want %v", tc.v, m, tc.keys)
		}
		for _, k := range tc.keys {
			if _, ok := m[k]; !ok {
				t.Errorf("%T: no key %q in %v", tc.v, k, m)
			}
		}
	}
}

// A refused command matches its kind and its status's sentinel, and its
// notification carries both.
func TestCommandError(t *testing.T) {
	e := NewError(CmdMRDereg, ErrRegionNotOwned, "region 7")
	if !errors.Is(e, ErrRegionNotOwned) || !errors.Is(e, rdmo.ErrRegionNotOwned) || errors.Is(e, ErrUnknownRegion) {
		t.Errorf("%v does not match its kind and status only", e)
	}
	n := e.Notification(3)
	if n.Type != CmdMRDereg || n.Status != rdmo.StatusRegionNotOwned || n.Client != 3 || n.Detail != "dpu: region belongs to another client: region 7" {
		t.Errorf("notification %+v", n)
	}
	if err := n.Err(); !errors.Is(err, rdmo.ErrRegionNotOwned) {
		t.Errorf("Err() = %v", err)
	}
	if Kind(CmdRQFlushWait) != "" || Kind(CmdClientInit) != KindClientInit {
		t.Error("kinds of command types")
	}
}
