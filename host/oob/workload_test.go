package oob

import (
	"context"
	"reflect"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// WorkerInfo.Workload was added after version 1: it must round-trip, be
// absent from the wire when nil, and be ignored by a peer that predates it.
func TestWorkerInfoWorkload(t *testing.T) {
	checkLeaks(t)
	s, c := pair(t, testOptions(t), testOptions(t))
	ctx := context.Background()
	wi := WorkerInfo{
		WorkerAddress: []byte{1, 2, 3},
		ClientID:      42,
		Regions:       []RegionInfo{{ID: 9, Base: 0x1000, Len: 4096, Name: "queue"}},
		Workload:      &Workload{Kind: "mixed/1", Ops: 100000, Seed: 0xfeedface, FlushEvery: 256},
	}
	if err := s.Send(ctx, wi); err != nil {
		t.Fatal(err)
	}
	got, err := Expect[WorkerInfo](ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, wi) {
		t.Fatalf("sent %#v, got %#v", wi, got)
	}

	// nil is not on the wire at all.
	b, err := msgpack.Marshal(WorkerInfo{ClientID: 1})
	if err != nil {
		t.Fatal(err)
	}
	var keys map[string]any
	if err := msgpack.Unmarshal(b, &keys); err != nil {
		t.Fatal(err)
	}
	if _, ok := keys["workload"]; ok {
		t.Errorf("nil workload encoded: %v", keys)
	}

	// A peer from before the field decodes the new body and ignores it.
	type workerInfoV1 struct {
		WorkerAddress []byte       `msgpack:"worker_address"`
		ClientID      uint64       `msgpack:"client_id"`
		Regions       []RegionInfo `msgpack:"regions"`
		Capabilities  []string     `msgpack:"capabilities"`
	}
	nb, err := msgpack.Marshal(wi)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := decodeBody(TypeWorkerInfo, nb); err != nil {
		t.Fatalf("new body fails validation: %v", err)
	}
	var old workerInfoV1
	if err := msgpack.Unmarshal(nb, &old); err != nil || old.ClientID != 42 || len(old.Regions) != 1 {
		t.Fatalf("old peer: %+v, %v", old, err)
	}
	// And a body from an old peer decodes with a nil Workload.
	ob, _ := msgpack.Marshal(old)
	m, err := decodeBody(TypeWorkerInfo, ob)
	if err != nil {
		t.Fatal(err)
	}
	if w := m.(WorkerInfo); w.Workload != nil || w.ClientID != 42 {
		t.Fatalf("old body decoded as %+v", w)
	}
}
