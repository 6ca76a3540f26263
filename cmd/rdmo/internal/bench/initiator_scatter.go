package bench

import (
	"time"

	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/wire"
)

// The scatter rows: SCATTER streams through the RDMO worker.

// scatter sends SCATTERs of Layout.IOVs chunks of Size bytes, each chunk
// to its own lane, then flushes.
func (p *initProc) scatter(s roundSpec) (roundResult, error) {
	p.acks.reset()
	l := s.Layout
	iovs := make([]wire.IOV, l.IOVs)
	chunks := make([][]byte, l.IOVs)
	for i := range chunks {
		chunks[i] = make([]byte, s.Size)
	}
	b := newBudget(s, 64)
	acked := p.in.With(nil, rdmo.FlagAck)
	cr := newCreditor(p.in, s.Credit)
	start := time.Now()
	n := 0
	for ; !b.done(n); n++ {
		if err := cr.before(); err != nil {
			return roundResult{}, err
		}
		for i := range iovs {
			iovs[i] = wire.IOV{Addr: l.Base + l.offset(p.id, n, i), Rkey: rdmo.RegionID(s.Scatter.Region), Len: uint16(s.Size)}
			fillRecord(chunks[i], p.id, s.Round, l.chunkSeq(n, i))
		}
		if n%s.Sample == 0 {
			t0 := time.Now()
			seq, err := acked.Scatter(iovs, chunks)
			if err != nil {
				return roundResult{}, err
			}
			p.acks.sent(seq, t0)
		} else if err := p.in.Scatter(iovs, chunks); err != nil {
			return roundResult{}, err
		}
		if err := cr.after(); err != nil {
			return roundResult{}, err
		}
	}
	return p.endStream(cr, start, n, l.IOVs*s.Size)
}
