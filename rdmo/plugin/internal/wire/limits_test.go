package wire

import (
	"testing"

	"github.com/openrdmo/rdmo/rdmo"
)

// TestFitBatchBoundsTheMessage: the runs FitBatch cuts a batch into encode
// to at most the limit, and each is as long as the limit allows.
func TestFitBatchBoundsTheMessage(t *testing.T) {
	hdr := make([]byte, 40)
	for _, sizes := range [][]int{
		{0, 0, 0},
		{1000, 2000, 3000, 4000, 5000},
		{9000, 1, 9000, 1, 9000},
		{20000},
	} {
		reqs := make([]rdmo.Request, len(sizes))
		for i, n := range sizes {
			reqs[i] = rdmo.Request{Seq: 1 << 60, Client: 1 << 60, Op: 1 << 31, Flags: 1 << 31, Sub: hdr,
				Payload: make([]byte, n), Length: 1 << 60, Rendezvous: true}
		}
		const limit = 10000
		for rest := reqs; len(rest) > 0; {
			n := FitBatch(rest, limit)
			if n == 0 {
				if got := len((&CallReq{Inv: 1 << 60, Reqs: rest[:1]}).appendTo(nil)); got <= limit {
					t.Errorf("sizes %v: a request encoding to %d bytes does not fit %d", sizes, got, limit)
				}
				rest = rest[1:]
				continue
			}
			m := &CallReq{Inv: 1 << 60, Client: 1 << 60, Region: 1 << 60, Reqs: rest[:n]}
			if got := len(m.appendTo(nil)); got > limit {
				t.Errorf("sizes %v: %d requests encode to %d bytes, over %d", sizes, n, got, limit)
			}
			if n < len(rest) {
				m.Reqs = rest[:n+1]
				if got := len(m.appendTo(nil)); got <= limit-MaxCallReqOverhead {
					t.Errorf("sizes %v: cut after %d requests, but %d encode to %d bytes", sizes, n, n+1, got)
				}
			}
			rest = rest[n:]
		}
	}
}
