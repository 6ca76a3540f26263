package dpu_test

import (
	"testing"
	"time"

	"github.com/openrdmo/rdmo/dpu"
	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/wire"
	"github.com/openrdmo/rdmo/ucp/ucptest"
)

// A FLUSH from an endpoint that is no request queue's (an initiator the
// worker did not connect to at RQ_CREATE) gets a flush response with
// StatusNoQueue instead of silence; a flood of them gets answers at the
// limiter's rate only, and a proper queue is served meanwhile.
func TestForeignFlushAnswered(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		e := newEnv(t, tr, dpu.Config{})
		s := e.newSetup(1, 4096, 0, 4096)
		stranger := e.newInitiator(1)
		stranger.connect(s.waddr)
		start := time.Now()
		f := stranger.waitFlushSent(1)
		if f.Failed != 1 || f.FirstStatus != rdmo.StatusNoQueue || f.FirstOp != rdmo.OpFlush {
			t.Errorf("foreign flush answered %+v, want one failure with NoQueue", f)
		}
		before := e.w.Stats().Dropped
		const flood = 300
		for i := uint64(0); i < flood; i++ {
			stranger.send(wire.AppendFlushRequest(nil, wire.Header{ClientID: 1, Flags: rdmo.FlagFence}, rdmo.FlushHeader{FlushID: 100 + i}), nil, 0)
		}
		stranger.progressUntil("the worker to drop the flood", func() bool { return e.w.Stats().Dropped >= before+flood })
		elapsed := time.Since(start)
		if _, f := s.in.flush(7); f.Failed != 0 {
			t.Errorf("the proper queue's flush: %+v", f)
		}
		stranger.progressFor(10 * time.Millisecond)
		// The bucket holds 16 and refills 16 a second.
		if got, most := len(stranger.flushes), 16+int(16*elapsed.Seconds())+1; got > most {
			t.Errorf("%d answers to a flood of %d in %v, want at most %d", got, flood, elapsed, most)
		}
	})
}

// waitFlushSent sends a FLUSH with id and waits for its response.
func (in *initiator) waitFlushSent(id uint64) wire.FlushResponse {
	in.t.Helper()
	in.send(wire.AppendFlushRequest(nil, wire.Header{ClientID: in.client, Flags: rdmo.FlagFence}, rdmo.FlushHeader{FlushID: id}), nil, 0)
	return in.waitFlush(id)
}
