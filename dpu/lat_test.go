package dpu_test

import (
	"testing"
	"time"

	"github.com/openrdmo/rdmo/dpu"
	"github.com/openrdmo/rdmo/ucp/ucptest"
)

func TestIdleLatency(t *testing.T) {
	for _, tr := range ucptest.Transports {
		t.Run(tr.Name, func(t *testing.T) {
			e := newEnv(t, tr, dpu.Config{Handlers: allHandlers(), Logger: nopLogger(), IdleWait: 50 * time.Millisecond})
			s := e.newSetup(1, 4096, 0, 4096)
			s.in.flush(0)
			var total time.Duration
			for i := 1; i <= 50; i++ {
				time.Sleep(5 * time.Millisecond) // let the worker fall asleep
				start := time.Now()
				s.in.flush(uint64(i))
				total += time.Since(start)
			}
			t.Logf("%s: flush round trip from idle %v", tr.Name, total/50)
		})
	}
}
