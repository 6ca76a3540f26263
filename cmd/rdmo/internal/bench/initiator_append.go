package bench

import (
	"time"

	"github.com/openrdmo/rdmo/rdmo"
)

// The rdmo-append rows: APPEND streams through the RDMO worker.

// rdmoAppend streams APPENDs of records to the queue, then flushes: when
// the flush answers, every record is in target memory.
func (p *initProc) rdmoAppend(s roundSpec) (roundResult, error) {
	p.acks.reset()
	rec := make([]byte, s.Size)
	q := s.Queue
	b := newBudget(s, 64)
	acked := p.in.With(nil, rdmo.FlagAck)
	cr := newCreditor(p.in, s.Credit)
	start := time.Now()
	n := 0
	for ; !b.done(n); n++ {
		if err := cr.before(); err != nil {
			return roundResult{}, err
		}
		fillRecord(rec, p.id, s.Round, uint32(n))
		if n%s.Sample == 0 {
			t0 := time.Now()
			seq, err := acked.Append(q.Base, q.Region, q.Region, rec)
			if err != nil {
				return roundResult{}, err
			}
			p.acks.sent(seq, t0)
		} else if err := p.in.Append(q.Base, q.Region, q.Region, rec); err != nil {
			return roundResult{}, err
		}
		if err := cr.after(); err != nil {
			return roundResult{}, err
		}
	}
	return p.endStream(cr, start, n, s.Size)
}
