package e2e_test

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/openrdmo/rdmo/internal/testproc"
	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/wire"
	"github.com/openrdmo/rdmo/ucp/ucptest"
)

// A plugin killed mid-stream: the worker stays up, only that op's requests
// fail (as HandlerFailed), the plugin comes back, and later requests
// succeed. Here scatter is the plugin; append and flush are built in.
func TestPluginKilledMidStream(t *testing.T) {
	tr := ucptest.Transports[0]
	ucptest.CheckLeaks(t)
	var rw remote
	tg := newTargetWith(t, tr, func() rdmoWorker {
		rw = startUROMWorker(t, tr, []string{"append", "flush", "plugin:scatter"}, nil)
		return rw
	})
	q := tg.queue(1 << 20)
	sr := tg.register(1 << 16)
	raw := tg.raw(t, tr)
	workerPID := rw.W.PID
	plugin := testproc.ChildOf(workerPID, "rdmo-plugin-scatter")
	if plugin == 0 {
		t.Fatal("scatter plugin process not found")
	}
	scatter := func(i int) {
		var p []byte
		p, _ = wire.AppendIOV(p, wire.IOV{Addr: sr.base() + uint64(i%1000)*8, Rkey: rdmo.RegionID(sr.id), Len: 8}, []byte("scattred"))
		raw.send(wire.AppendScatterRequest(nil, wire.Header{ClientID: 1, Flags: rdmo.FlagAck}, rdmo.ScatterHeader{Count: 1}), p)
	}
	appendOne := func() {
		raw.send(appendReq(1, q.base(), q.id, q.id, rdmo.FlagAck), []byte("appended"))
	}
	acks := map[uint32]map[rdmo.Status]int{rdmo.OpAppend: {}, rdmo.OpScatter: {}}
	collect := func(n int) {
		for i := 0; i < n; i++ {
			a, err := wire.ParseAck(raw.next())
			if err != nil {
				t.Fatal(err)
			}
			acks[a.Op][a.Status]++
		}
	}
	for i := 0; i < 200; i++ {
		scatter(i)
		appendOne()
	}
	syscall.Kill(plugin, syscall.SIGKILL)
	for i := 200; i < 400; i++ {
		scatter(i)
		appendOne()
	}
	collect(800)
	if acks[rdmo.OpAppend][rdmo.StatusOK] != 400 {
		t.Fatalf("appends: %v; the built-in op must not suffer from the plugin's crash", acks[rdmo.OpAppend])
	}
	for s := range acks[rdmo.OpScatter] {
		if s != rdmo.StatusOK && s != rdmo.StatusHandlerFailed {
			t.Fatalf("scatter failed with %v, want HandlerFailed", s)
		}
	}
	// The plugin comes back and later scatters succeed.
	deadline := time.Now().Add(20 * time.Second)
	for {
		if p := testproc.ChildOf(workerPID, "rdmo-plugin-scatter"); p != 0 && p != plugin {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("scatter plugin was not restarted")
		}
		time.Sleep(20 * time.Millisecond)
	}
	okBefore := acks[rdmo.OpScatter][rdmo.StatusOK]
	for ok := false; !ok; {
		scatter(0)
		collect(1)
		ok = acks[rdmo.OpScatter][rdmo.StatusOK] > okBefore
		if time.Now().After(deadline) {
			t.Fatalf("scatters still fail after the restart: %v", acks[rdmo.OpScatter])
		}
	}
	if !alive(workerPID) {
		t.Fatal("the worker process died with its plugin")
	}
	rsp := raw.flush(77)
	t.Logf("scatter acks %v; append acks %v; flush after restart: %+v", acks[rdmo.OpScatter], acks[rdmo.OpAppend], rsp)
	if got := string(sr.bytes()[:8]); got != "scattred" {
		t.Fatalf("scatter after restart did not land: %q", got)
	}
}

func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return len(f) > 0 && f[0] != "Z"
}
