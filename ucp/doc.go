// Package ucp is the project's only binding to the UCX communication library
// (libucp): contexts, workers, endpoints, memory, active messages, RMA and
// atomics, shaped for batches so the data path crosses cgo once per batch.
//
// # Threading rule
//
// A Worker and everything made from it (Endpoints, Listeners, RemoteKeys,
// received Messages) belong to one goroutine: the one that created
// the worker, which NewWorker locks to its OS thread until Close. UCX runs the
// worker in single-thread mode, so there are no locks on the data path, and
// UCX requires that one OS thread use the worker (UCX 1.18 aborts otherwise).
// The only Worker method that may be called from any goroutine is Wake, which
// interrupts a Wait in progress. Use Worker.Wake together with a queue of your
// own to hand work to the owning goroutine. CheckThreads (or the environment
// variable RDMO_UCP_CHECK_THREADS=1) makes every call check its thread and
// fail with ErrWrongThread; tests turn it on. A Context is safe for concurrent
// use: several workers, each on its own goroutine, may share one Context and
// its Memory, which any goroutine may map, pack and close.
//
// # Completions
//
// Non-blocking operations take a Completer and a tag. The Completer is called
// on the owning goroutine, from inside Progress, never from the call that
// issued the operation, so a Completer may issue more operations. Blocking
// helpers (the *Sync methods) drive Progress themselves and must not be called
// from inside a Completer or a message handler (they return ErrReentrant).
//
// # Cost model
//
// UCX callbacks never call into Go. They record events in C memory; Progress
// makes one cgo call that releases the previous round's message buffers,
// progresses UCX, and returns the number of new events, which Go then reads
// directly. A batch, in this package, is the operations queued since the
// last Progress (at most WorkerOptions.MaxBatch): one cgo call issues them.
package ucp
