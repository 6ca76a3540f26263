package ops_test

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/openrdmo/rdmo/host/initiator"
	"github.com/openrdmo/rdmo/internal/testproc"
	"github.com/openrdmo/rdmo/plugins/ops"
	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/ucp/ucptest"
)

// The kv plugin killed while its calls are in flight: only kv calls fail
// (HandlerFailed, with the detail), fetch-add calls to another plugin of
// the same worker and client all succeed, and kv works again once the
// worker has restarted its plugin.
func TestPluginKilledMidStream(t *testing.T) {
	tr := ucptest.Transports[0]
	ucptest.CheckLeaks(t)
	// The plugins are built before the test's clock starts: this is the
	// first test of the package that needs them, and on a loaded machine
	// the build alone took longer than the whole budget (a call then
	// timed out waiting for an answer that was never late).
	pluginDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	fx := newFixture(t, ctx, tr, true)
	in := fx.connect(t, ctx)
	base, region := fx.mem.Address(), rdmo.RegionID(fx.reg.ID)
	hdr, _ := ops.KVLayout(512, 8)
	copy(fx.mem.Bytes()[0x100:], hdr)
	table := base + 0x100
	counter := base
	pid := testproc.ChildOf(fx.tg.WorkerPID(), "rdmo-plugin-kv")
	if pid == 0 {
		t.Fatal("no rdmo-plugin-kv process under the worker")
	}
	const n = 400
	var kvs, adds []*initiator.CallWait
	for i := 0; i < n; i++ {
		if i == n/4 {
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
		}
		c, err := in.CallAsync(ctx, ops.OpKVInsert, ops.KVReq{Region: region, Table: table, Key: uint64(1 + i%500)}.Sub(), make([]byte, 8))
		if err != nil {
			t.Fatal(err)
		}
		kvs = append(kvs, c)
		if c, err = in.CallAsync(ctx, ops.OpFetchAdd, ops.AtomicReq{Region: region, Addr: counter, Operand: 1}.FetchAddSub(), nil); err != nil {
			t.Fatal(err)
		}
		adds = append(adds, c)
	}
	failed := 0
	for _, c := range kvs {
		res, err := c.Wait(ctx)
		switch {
		case err == nil:
		case errors.Is(err, rdmo.ErrHandlerFailed) && res.Detail != "":
			failed++
		default:
			t.Fatalf("kv call: %+v, %v\n%s", res, err, fx.state(in))
		}
	}
	seen := map[uint64]bool{}
	for _, c := range adds {
		res, err := c.Wait(ctx)
		if err != nil || seen[res.Value] {
			t.Fatalf("fetch-add during the kill: %+v, %v (value seen before: %v)\n%s", res, err, seen[res.Value], fx.state(in))
		}
		seen[res.Value] = true
	}
	t.Logf("%d of %d kv calls failed with the plugin", failed, n)
	// The worker restarts the plugin: kv answers again (each try is a
	// real call; the ctx bounds the wait).
	for {
		_, err := in.Call(ctx, ops.OpKVInsert, ops.KVReq{Region: region, Table: table, Key: 999}.Sub(), make([]byte, 8))
		if err == nil {
			break
		}
		if !errors.Is(err, rdmo.ErrHandlerFailed) || ctx.Err() != nil {
			t.Fatalf("kv after the restart: %v\n%s", err, fx.state(in))
		}
	}
	if testproc.ChildOf(fx.tg.WorkerPID(), "rdmo-plugin-kv") == pid {
		t.Fatal("the killed plugin process is still the one serving")
	}
}

// state describes the initiator's and the worker's counters, for a failure
// message: an unanswered call shows as acks outstanding on one side or the
// other, and a plugin that never came back as no kv plugin process.
func (fx *fixture) state(in *initiator.Initiator) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ws, err := fx.tg.Stats(ctx)
	return fmt.Sprintf("initiator stats: %+v\nworker stats (%v): %+v\nkv plugin process: %d",
		in.Stats(), err, ws, testproc.ChildOf(fx.tg.WorkerPID(), "rdmo-plugin-kv"))
}
