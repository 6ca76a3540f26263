package dpu_test

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/openrdmo/rdmo/dpu"
	hostinit "github.com/openrdmo/rdmo/host/initiator"
	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/ucp/ucptest"
)

const opResult = rdmo.OpUserBase + 40 // sub-header: mode u64; payload: input

var statusTestFull = rdmo.DefineStatus(rdmo.StatusUserBase+7, "TestFull", "test table full")

// resultHandler answers with data, a plugin status or too much data, by
// the sub-header's mode.
type resultHandler struct{ rdmo.BaseHandler }

func (resultHandler) Info() rdmo.HandlerInfo {
	return rdmo.HandlerInfo{Name: "test-result", Version: "1", Ops: []uint32{opResult}, NoCachedState: true}
}

func (resultHandler) HandleBatch(t rdmo.Target, reqs []rdmo.Request, results []rdmo.Result) {
	for i := range reqs {
		r := &reqs[i]
		switch sub(r, 0) {
		case 0: // data: the payload reversed, staged in worker memory
			out := t.Buffer(len(r.Payload))
			for j, c := range r.Payload {
				out[len(out)-1-j] = c
			}
			results[i] = rdmo.Result{Value: uint64(len(out)), Data: out}
		case 1: // data straight from the payload
			results[i] = rdmo.Result{Value: 1, Data: r.Payload}
		case 2:
			results[i] = rdmo.Fail(statusTestFull, "no room for %q; %s", r.Payload, strings.Repeat("é", 100))
		case 3:
			results[i] = rdmo.Result{Data: make([]byte, rdmo.MaxResultData+1)}
		}
	}
}

// Results with data and failures with details reach the initiator's Call,
// pipelined (CallAsync) and one at a time, with each ack in its own message
// and in ACK groups.
func TestCallResults(t *testing.T) {
	for _, groups := range []bool{false, true} {
		name := "ack-each"
		if groups {
			name = "ack-groups"
		}
		t.Run(name, func(t *testing.T) { testCallResults(t, groups) })
	}
}

func testCallResults(t *testing.T, groups bool) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		e := newEnv(t, tr, dpu.Config{Handlers: []rdmo.Handler{resultHandler{}}})
		s := e.newSetup(5, 4096, 0, 4096)
		in, err := hostinit.New(hostinit.Options{WorkerAddress: s.waddr, ClientID: 5, Context: e.ctx,
			GroupAcks: groups && hostinit.AckGroupSupported(dpu.Capabilities())})
		if err != nil {
			t.Fatal(err)
		}
		defer in.Close()
		rq := e.do(dpu.RQCreate{Client: 5, Addr: in.Address()}).RQ
		defer e.do(dpu.RQDestroy{Client: 5, RQ: rq})
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		mode := func(m uint64) []byte { return le.AppendUint64(nil, m) }

		// Pipelined: many calls in flight, each with its own answer.
		var waits []*hostinit.CallWait
		for i := 0; i < 200; i++ {
			c, err := in.CallAsync(ctx, opResult, mode(uint64(i%2)), pattern(1+i%rdmo.MaxResultData, byte(i)))
			if err != nil {
				t.Fatal(err)
			}
			waits = append(waits, c)
		}
		for i, c := range waits {
			res, err := c.Wait(ctx)
			p := pattern(1+i%rdmo.MaxResultData, byte(i))
			want := p
			if i%2 == 0 {
				want = slices.Clone(p)
				slices.Reverse(want)
			}
			if err != nil || res.Status != rdmo.StatusOK || !bytes.Equal(res.Data, want) || res.Op != opResult {
				t.Fatalf("call %d: %+v, %v; want data %x", i, res, err, want)
			}
		}

		// A plugin status: number and name, with the detail cut to the bound.
		res, err := in.Call(ctx, opResult, mode(2), []byte("k1"))
		var re *hostinit.RequestError
		if !errors.As(err, &re) || re.Status != statusTestFull || !errors.Is(err, statusTestFull) {
			t.Fatalf("plugin status: %+v, %v", res, err)
		}
		if res.Status.Name() != "TestFull" || !strings.HasPrefix(res.Detail, `no room for "k1"`) ||
			len(res.Detail) > rdmo.MaxResultDetail || res.Data != nil || res.Value != 0 {
			t.Fatalf("plugin status result %+v (name %s)", res, res.Status.Name())
		}
		if !strings.Contains(err.Error(), "TestFull") {
			t.Errorf("error %q does not name the status", err)
		}

		// Too much data fails the request, and says why.
		res, err = in.Call(ctx, opResult, mode(3), nil)
		if !errors.Is(err, rdmo.ErrHandlerFailed) || !strings.Contains(res.Detail, "at most 128") {
			t.Fatalf("oversized result: %+v, %v", res, err)
		}
		// The connection keeps working, and flush reports both failures.
		if _, err := in.Call(ctx, opResult, mode(1), []byte("x")); err != nil {
			t.Fatal(err)
		}
		if rsp, err := in.Flush(ctx); rsp.Failed != 2 || rsp.FirstStatus != statusTestFull || err == nil {
			t.Fatalf("flush %+v, %v", rsp, err)
		}
		if st := in.Stats(); st.ErrorsDropped != 0 || len(in.Errors()) != 0 {
			t.Errorf("failed calls went to Errors too: %+v, %d queued", st, len(in.Errors()))
		}

		// Answers leave in the order the worker made them: the acks of
		// calls before a FLUSH are in before its response.
		waits = waits[:0]
		for i := 0; i < 50; i++ {
			c, err := in.CallAsync(ctx, opResult, mode(uint64(2*(i%2))), []byte{byte(i)})
			if err != nil {
				t.Fatal(err)
			}
			waits = append(waits, c)
		}
		if rsp, _ := in.Flush(ctx); rsp.Failed != 25 {
			t.Fatalf("flush after 25 failing calls reports %d", rsp.Failed)
		}
		for i, c := range waits {
			select {
			case <-c.Done():
			default:
				t.Fatalf("call %d not answered when the FLUSH after it was", i)
			}
			res, err := c.Wait(ctx)
			if i%2 == 0 && (err != nil || res.Value != 1 || !bytes.Equal(res.Data, []byte{byte(i)})) ||
				i%2 == 1 && (!errors.Is(err, statusTestFull) || !strings.HasPrefix(res.Detail, "no room for")) {
				t.Fatalf("call %d: %+v, %v", i, res, err)
			}
		}

		// With groups, acks shared messages; without, none came grouped.
		ist, wst := in.Stats(), e.w.Stats()
		if ist.Acks != 253 || wst.Acks != 253 {
			t.Errorf("acks: initiator %d, worker %d; want 253", ist.Acks, wst.Acks)
		}
		if ist.AckGroups != wst.AckGroups || ist.MalformedResponses != 0 {
			t.Errorf("ack groups: initiator received %d (%d malformed), worker sent %d", ist.AckGroups, ist.MalformedResponses, wst.AckGroups)
		}
		if groups && (ist.AckGroups == 0 || ist.AckGroups >= ist.Acks) || !groups && ist.AckGroups != 0 {
			t.Errorf("GroupAcks %v: %d acks in %d groups", groups, ist.Acks, ist.AckGroups)
		}
	})
}

type namedHandler struct {
	rdmo.BaseHandler
	name, version string
	op            uint32
}

func (h namedHandler) Info() rdmo.HandlerInfo {
	return rdmo.HandlerInfo{Name: h.name, Version: h.version, Ops: []uint32{h.op}}
}

func (namedHandler) HandleBatch(rdmo.Target, []rdmo.Request, []rdmo.Result) {}

// Two handlers with one name, or one op id, are refused with both named.
func TestDuplicateHandlersRefused(t *testing.T) {
	for _, c := range []struct {
		name string
		a, b namedHandler
		want []string
	}{
		{"same name", namedHandler{name: "kv", version: "1.0.0", op: 100}, namedHandler{name: "kv", version: "2.0.0", op: 101},
			[]string{`"kv"`, "1.0.0", "2.0.0"}},
		{"same op", namedHandler{name: "mine", version: "1", op: 100}, namedHandler{name: "theirs", version: "1", op: 100},
			[]string{`"mine"`, `"theirs"`, "100"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			w, err := dpu.New(dpu.Config{Handlers: []rdmo.Handler{c.a, c.b}})
			if err == nil {
				w.Close()
				t.Fatal("accepted")
			}
			for _, s := range c.want {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("%v does not name %s", err, s)
				}
			}
		})
	}
}

// Plugin ops are named by their handler in logs, metrics and stats.
func TestOpLabels(t *testing.T) {
	if got := dpu.OpLabel(38, "kv", nil); got != "kv(38)" {
		t.Errorf("OpLabel(38, kv) = %q", got)
	}
	if got := dpu.OpLabel(rdmo.OpAppend, "append", nil); got != "append" {
		t.Errorf("OpLabel(append) = %q", got)
	}
	if got := dpu.OpLabel(17, "maxer", map[uint32]string{17: "fetch-max"}); got != "fetch-max(17)" {
		t.Errorf("OpLabel(17, maxer, {17: fetch-max}) = %q", got)
	}
	if got := dpu.OpLabel(18, "maxer", map[uint32]string{17: "fetch-max"}); got != "maxer(18)" {
		t.Errorf("OpLabel(18, maxer, {17: fetch-max}) = %q", got)
	}
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		e := newEnv(t, tr, dpu.Config{Handlers: []rdmo.Handler{resultHandler{}}})
		if got := e.w.Stats().OpNames[opResult]; got != "test-result(56)" {
			t.Errorf("Stats.OpNames[%d] = %q", opResult, got)
		}
	})
}
