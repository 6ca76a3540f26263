// Package bench is `rdmo bench`: one command that runs a target, an RDMO
// worker and N initiators as separate processes of this host and measures,
// in the same run and at the same message size, RDMO operations against the
// ways to do the same work without RDMO, so every figure is read as a ratio
// to a baseline measured side by side (the machines are shared and noisy;
// see docs/BENCHMARKS.md).
//
// # Processes
//
// The driver (the process running Run) runs a UROM service (or uses the one
// given with --urom) and re-executes its own program in hidden roles chosen
// by the environment (RoleMain): the target, which owns the memory, starts
// the RDMO worker through the service (CLIENT_INIT, MR_REG, RQ_CREATE),
// counts the baselines' active messages and checks its memory after every
// round; the initiators, which issue the operations; and the worker itself,
// a UROM worker process with the RDMO component. The driver and its
// children speak one JSON line per command on standard input and output.
//
// # Rows
//
//   - perftest-am and perftest-put: UCX's own ucx_perftest (-t ucp_am_bw,
//     -t ucp_put_bw) between two processes at the row's size and the
//     initiators' UCX_TLS, started by the driver (perftest.go): what libucp
//     moves here and now. Every row's rate is read against perftest-am.
//   - native-owned: one writer that owns the queue's tail packs its records
//     into large puts and publishes the tail once per round (one initiator).
//   - raw-am: Size-byte UCX active messages to a counting sink in the
//     target, through package ucp: the limit for one message per operation.
//   - am-pingpong: one such message and its echo at a time.
//   - native-append/blocking and /pipelined: append without RDMO: the
//     initiator fetch-adds the queue's tail in target memory and puts the
//     record at the fetched address, with one or Window fetch-adds
//     outstanding.
//   - rdmo-append/owned and /shared: RDMO APPEND through the worker, with
//     either append strategy, in the steady state: the queue stays
//     registered and each round takes a fresh tail word, so a round writes
//     memory earlier rounds wrote (queue.go). Records of 4 KiB and more are
//     lent (initiator.AppendLent, no copy) from a ring of buffers inside
//     initiator.Drive (initiator_append.go); the ring lies in a
//     initiator.LendPool where the worker maps one (shared memory, and
//     --lend-pool, on by default), so the worker reads each record in
//     place and the initiator sends only a reference.
//   - rdmo-append/owned/cold: the same with a fresh registration before
//     every round: each append writes pages freshly mapped into the worker
//     and pays their first touch.
//   - rdmo-append/owned/drive: rdmo-append/owned's stream made inside
//     initiator.Drive (Driver.Append): the producer is the initiator's loop
//     thread, with no hand-off to it and no other thread polling.
//   - scatter/N: RDMO SCATTER of N Size-byte chunks to N separate lanes.
//   - flush/idle and flush/load: RDMO FLUSH round trips, alone and while the
//     same connection streams appends; flush/idle/drive: the idle ones made
//     inside initiator.Drive, on the Initiator's own loop thread.
//   - workload: the demo's mix (`rdmo -m client`, cmd/rdmo/internal/demo's
//     generator): records of 8 B to 64 KiB, scatters of 1 to 8 chunks, a
//     pipelined flush every 128 operations, each initiator from its own
//     seed (--seed); the target checks every byte with the demo server's
//     verifier. Records above the rendezvous threshold are lent from a
//     ring in a lend pool the worker reads in place, as the demo client
//     does (demo.RecordRing; with --lend-pool, where the worker maps it).
//     It reports size "mix"; its latency is its flushes'.
//   - Only when asked for (--modes ops): chase/D, kv-lookup and fetch-add,
//     one call of the operation pack at a time inside initiator.Drive (and
//     their /call twins, with Initiator.Call), against native-chase/D,
//     native-kv-lookup and native-fetch-add, the one-sided accesses that
//     give the same answer (initiator_ops.go); and chase/4/pipelined against
//     native-chase/4/pipelined, many chases in flight: the rate at
//     saturation (initiator_ops_pipe.go).
//   - Only when asked for (--modes forms, with fetch-add): the op pack's
//     fetch-add in each form of handler, from the same source
//     (plugins/ops): fetch-add (built in), fetch-add/wasm (a WebAssembly
//     module run inside the worker, rdmo-plugin-fetch-add.wasm) and
//     fetch-add/plugin (a go-plugin process, rdmo-plugin-fetch-add), one
//     call at a time inside initiator.Drive (p50); and
//     fetch-add/pipelined, fetch-add/wasm/pipelined and
//     fetch-add/plugin/pipelined with --window calls in flight (at most
//     256; the rate at saturation). Every answer is checked: one at a
//     time, call n returns the counter's start plus n; pipelined, answers
//     may come in another order, so each must be the start plus a number
//     below the calls issued, none twice; the target checks the counter
//     moved by exactly the calls made. Each form has a worker of its own
//     (rowDef.Plugins: the worker is spawned with "wasm:fetch-add" or
//     "plugin:fetch-add"), found by the embedded UROM service on
//     --plugin-path (default: the directory plugins beside the
//     executable, where `make bench-plugins` builds both).
//
// Each row is a rowDef in the registry (rows.go): its name, the row it is
// compared with, the target memory it sets up before a round, the
// initiators' round and the target's check after it. row.go says how to add
// one; row_test.go holds each row's test of what it checks.
//
// A row runs in rounds (about --interval each): a round ends when its time
// is up or its queue is full; the initiators flush (or send a fin through
// the sink), and the target checks that exactly the records sent are in
// memory, intact, once each (in order for RDMO rows). A row whose data
// check fails is a failure, not a number. The first round of a row warms up
// and is not counted. The worker's counters (dpu.Stats) before and after
// the measured rounds give target puts per request.
//
// # CPU time and stability
//
// Every row reports the CPU time (user + system) per operation of its
// processes, read from their own accounting around each measured round
// (cpu.go); it moves far less than a rate on a shared machine. A row is
// stable when its rounds' rates span at most StableSpread of their median
// over at least StableRounds rounds; a goal line judges stable rows only
// and says "unstable: re-run" otherwise. Rounds that a full queue ends
// before the interval (tens of milliseconds for large appends on shared
// memory) count together up to an interval, as the progress lines do: a
// scheduler tick in one such round is not the row's instability.
//
// # Flow control
//
// The RDMO worker fails requests past its limit of requests in flight per
// request queue (TooManyInFlight); the initiator's own flow control
// (initiator.Options.Credits) keeps its unconfirmed requests below that
// limit with flushes of its own, which the RDMO rows pay for like any
// application. --credit N adds the older application-level pacing on top
// (a FlushAsync every N/4 requests, never more than N past the last
// answered flush), to compare the two. --aggregate lets
// the initiator pack queued requests into BATCH messages; --lend-pool=false
// lends the large records from Go buffers, which then travel through the
// transport (one more copy over shared memory), to compare.
// --ack-groups=false takes every ack (the calls' answers, the lent
// records' returns) in its own message instead of in ACK groups.
// --no-peer-detection makes the RDMO endpoints without peer-failure
// detection, which UCX 1.13 pays for with its zero-copy rendezvous lanes
// (docs/SECURITY.md); the report says so, and which pages backed the
// queue (host/target.PagesOf). --populate registers the append rows'
// queues with host/target.RegisterOptions.Populate, so the cold row's
// page faults are paid at MR_REG, before its rounds.
//
// # Results
//
// The table (rows that fit), --results as JSON (the report, for tools) or,
// with --results-format gobench, as Go benchmark lines for benchstat
// (report_gobench.go; `make bench-compare`, docs/benchmarks/compare.md);
// --results-from converts a JSON results file; --plot draws rate against
// size as SVG.
//
// # Topologies
//
// --topology dpu: the worker sits next to the target (UCX_TLS=shm,tcp,self
// for both, so the worker writes target memory through shared memory), the
// initiators reach worker and target over TCP only (UCX_TLS=tcp,self, on
// loopback unless UCX_NET_DEVICES says otherwise), as across a DPU's
// network. --topology shm: everything on shared memory.
package bench
