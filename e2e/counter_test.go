package e2e_test

import (
	"testing"

	"github.com/openrdmo/rdmo/examples/counter"
	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/wire"
	"github.com/openrdmo/rdmo/ucp/ucptest"
)

// The fourth operation, written as an outsider would (examples/counter,
// built only from the SDK), loaded as a plugin binary next to the three
// built-in handlers: every increment's ack carries a distinct old value and
// the counter ends at the total.
func TestExampleCounterPlugin(t *testing.T) {
	for _, tr := range ucptest.Transports {
		t.Run(tr.Name, func(t *testing.T) {
			ucptest.CheckLeaks(t)
			tg := newTargetWith(t, tr, func() rdmoWorker {
				return startUROMWorker(t, tr, []string{"append", "flush", "scatter", "plugin:counter"}, nil)
			})
			r := tg.register(4096)
			raw := tg.raw(t, tr)
			const n = 200
			for i := 0; i < n; i++ {
				raw.send(counter.Request(1, rdmo.RegionID(r.id), r.base()+64, 1, rdmo.FlagAck), nil)
			}
			seen := map[uint64]bool{}
			for len(seen) < n {
				a, err := wire.ParseAck(raw.next())
				if err != nil {
					t.Fatal(err)
				}
				if a.Status != rdmo.StatusOK || a.Op != counter.Op {
					t.Fatalf("ack %+v", a)
				}
				if seen[a.Value] {
					t.Fatalf("ticket %d handed out twice", a.Value)
				}
				seen[a.Value] = true
			}
			for v := uint64(0); v < n; v++ {
				if !seen[v] {
					t.Fatalf("ticket %d never handed out", v)
				}
			}
			if rsp := raw.flush(9); rsp.Failed != 0 {
				t.Fatalf("flush %+v", rsp)
			}
			if got := le64get(r.bytes()[64:]); got != n {
				t.Fatalf("counter %d, want %d", got, n)
			}
			// An unaligned counter is refused and reported; the worker goes on.
			raw.send(counter.Request(1, rdmo.RegionID(r.id), r.base()+65, 1, rdmo.FlagAck), nil)
			if a, _ := wire.ParseAck(raw.next()); a.Status != rdmo.StatusOutOfBounds {
				t.Fatalf("unaligned counter: %+v", a)
			}
		})
	}
}

func le64get(b []byte) uint64 {
	var v uint64
	for i := 7; i >= 0; i-- {
		v = v<<8 | uint64(b[i])
	}
	return v
}
