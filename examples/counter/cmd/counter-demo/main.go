// Command counter-demo is a target and an initiator in one program calling
// the counter plugin (op 16): it starts an embedded UROM service (rdmo dpu)
// with rdmo-plugin-counter on its plugin path, registers memory, takes N
// tickets (pipelined calls), and prints the counter and the call rate.
//
//	counter-demo RDMO-BINARY PLUGIN-DIR N [FORM]
//
// FORM is plugin (default: the rdmo-plugin-counter process) or wasm (the
// rdmo-plugin-counter.wasm module, run inside the worker).
//
// docs/PLUGINS.md walks through it; examples/counter's TestWalkthrough
// runs that walkthrough.
package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"log"
	"os"
	"strconv"
	"time"

	"github.com/openrdmo/rdmo/examples/counter"
	"github.com/openrdmo/rdmo/host/initiator"
	"github.com/openrdmo/rdmo/host/target"
	"github.com/openrdmo/rdmo/rdmo"
)

func main() {
	rdmoBin, plugins, n := os.Args[1], os.Args[2], must(strconv.Atoi(os.Args[3]))
	form := "plugin"
	if len(os.Args) > 4 {
		form = os.Args[4]
	}
	// The target: memory, a worker that loads the plugin, a registered region.
	local := must(target.NewLocal(target.LocalOptions{}))
	mem := must(local.Allocate(4096))
	local.Start()
	defer local.Close()
	tg := must(target.New(context.Background(), target.Options{Address: local.Address(), Plugins: []string{form + ":counter"},
		Embedded: target.EmbeddedOptions{Command: []string{rdmoBin, "dpu", "--plugin-path", plugins}}}))
	defer tg.Close()
	reg := must(tg.Register(context.Background(), mem))
	// The initiator: connect (RQ_CREATE), then call the plugin's op.
	// The worker's extensions it says it has: calls packed into one
	// message (large ones where it takes them), and their answers taken
	// in groups.
	caps := tg.WorkerCapabilities()
	in := must(initiator.New(initiator.Options{WorkerAddress: tg.WorkerAddress(), ClientID: tg.ClientID(),
		Aggregate: initiator.AggregateSupported(caps), GroupAcks: initiator.AckGroupSupported(caps),
		LargeBatches: initiator.LargeBatchSupported(caps), LargeEager: initiator.LargeEagerSupported(caps)}))
	defer in.Close()
	must(tg.CreateRQ(context.Background(), in.Address()))
	start, calls := time.Now(), make([]*initiator.CallWait, n)
	for i := range calls {
		calls[i] = must(in.CallAsync(context.Background(), counter.Op, counter.Sub(rdmo.RegionID(reg.ID), reg.Base, 1), nil))
	}
	for _, c := range calls {
		must(c.Wait(context.Background())) // its Value is the ticket: the counter's old value
	}
	rate := float64(n) / time.Since(start).Seconds()
	fmt.Printf("counter (%s): %d after %d calls, %.0f calls/s\n", form, binary.LittleEndian.Uint64(mem.Bytes()), n, rate)
}

func must[T any](v T, err error) T {
	if err != nil {
		log.Fatal(err)
	}
	return v
}
