package pluginhost_test

import (
	"testing"
	"time"

	"github.com/openrdmo/rdmo/rdmo"
	tp "github.com/openrdmo/rdmo/rdmo/plugin/internal/testplugin"
	"github.com/openrdmo/rdmo/rdmo/plugin/pluginhost"
)

// TestMessageLimit: messages between the worker and a plugin are at most
// pluginhost.MaxMsgSize either way, and nothing a handler does within its
// contract breaks that or the plugin: a batch larger than a message reaches
// the plugin in several calls, a request that cannot fit a message, a Put
// or a Fetch too large for one fail with LengthOverflow, and the plugin is
// never restarted for any of it.
func TestMessageLimit(t *testing.T) {
	// Each call here moves tens of MiB between two race-instrumented
	// processes: on a loaded machine one took over the default 10 s
	// CallTimeout, and the plugin was killed as hung. This test is about
	// sizes, not time, so the bound is only a hang guard.
	h := load(t, pluginhost.LoadOptions{CallTimeout: 3 * time.Minute})
	tg, _ := newTarget(t)
	pid := h.Pid()

	// A batch of more than a message: every request reaches the plugin,
	// which fails each on its own (an unknown put mode).
	mib := make([]byte, 1<<20)
	var reqs []rdmo.Request
	for range pluginhost.MaxMsgSize>>20 + 8 {
		reqs = append(reqs, putReq(tg, region, base, 99, mib))
	}
	res := run(h, tg, reqs...)
	for i := range res {
		if res[i].Status != rdmo.StatusUnknownFlags {
			t.Fatalf("request %d of a %d MiB batch: %v (%s), want the plugin's UnknownFlags", i, len(reqs), res[i].Status.Name(), res[i].Detail)
		}
	}

	// A request larger than a message, between two that fit.
	huge := make([]byte, pluginhost.MaxMsgSize)
	res = run(h, tg, putReq(tg, region, base, 99, nil), putReq(tg, region, base, 99, huge), putReq(tg, region, base, 99, nil))
	wantStatus(t, res, rdmo.StatusUnknownFlags, rdmo.StatusLengthOverflow, rdmo.StatusUnknownFlags)

	// A Put of more than half a message fails in the plugin, nothing sent.
	res = run(h, tg, putReq(tg, region, base, tp.PutDirect, huge[:pluginhost.MaxMsgSize/2+1]), putReq(tg, region, base, tp.PutDirect, []byte("small")))
	wantStatus(t, res, rdmo.StatusLengthOverflow, rdmo.StatusOK)

	// A Fetch whose payload (allowed by the worker's fetch limit) cannot
	// travel in one answer.
	big := putReq(tg, region, base, tp.PutFetch, nil)
	big.Rendezvous, big.Length = true, uint64(len(huge))
	tg.FetchLimit = uint64(len(huge))
	tg.SetRendezvousPayload(big.Seq, huge)
	res = run(h, tg, big, putReq(tg, region, base+8, tp.PutDirect, []byte("after")))
	wantStatus(t, res, rdmo.StatusLengthOverflow, rdmo.StatusOK)

	if h.Restarts() != 0 || h.Pid() != pid {
		t.Errorf("the plugin was restarted (%d restarts, pid %d, was %d)", h.Restarts(), h.Pid(), pid)
	}
}
