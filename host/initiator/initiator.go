package initiator

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/openrdmo/rdmo/internal/park"
	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/wire"
	"github.com/openrdmo/rdmo/ucp"
)

// Defaults for Options.
const (
	DefaultWindow              = 1024
	DefaultWindowBytes         = 64 << 20
	DefaultRendezvousThreshold = 8 << 10
	DefaultErrorBuffer         = 256
	DefaultCloseTimeout        = 5 * time.Second
	DefaultMaxAggregate        = 8 << 10
	// DefaultCredits is the in-flight limit of a request queue of our
	// worker with its default configuration.
	DefaultCredits = wire.DefaultMaxInFlightPerRQ
)

// minCredits is the fewest credits flow control works with: one request,
// the flush that confirms it, and the credit kept back for a flush.
const minCredits = 3

// amID is the active message id of every RDMO request and response.
const amID = 0

// Options configure an Initiator. WorkerAddress is required; zero values
// of the others pick the defaults.
type Options struct {
	// WorkerAddress is the RDMO worker's UCP worker address, as the target
	// hands it to the initiator out of band.
	WorkerAddress []byte
	// Exchange, when WorkerAddress is empty, is called once by New with
	// the Initiator's own UCP worker address, before it connects, and
	// returns the RDMO worker's address: for out-of-band exchanges in
	// which the initiator speaks first (the reference's, host/oob.RefConn).
	Exchange func(own []byte) ([]byte, error)
	// ClientID goes into every request header (the id the target
	// registered with CLIENT_INIT).
	ClientID uint64

	// Window bounds the requests that are queued, in flight (not locally
	// complete) or awaiting an answer (flushes, and requests sent with
	// rdmo.FlagAck until their ack). Default DefaultWindow. It also sizes
	// the UCP worker's table of outstanding operations.
	Window int
	// WindowBytes bounds the header and payload bytes queued or in
	// flight. A single request larger than WindowBytes is sent when
	// nothing else is in flight. Default DefaultWindowBytes.
	WindowBytes int
	// Credits is end-to-end flow control: the most requests the
	// Initiator has sent that the worker may not have completed yet. It
	// must not exceed the worker's in-flight limit per request queue
	// (dpu.Config.MaxInFlightPerRQ), or requests past the limit fail with
	// TooManyInFlight. The Initiator learns that requests completed from
	// flush responses: when half the credits went out since the last
	// FLUSH it queues one of its own (fenced, like Flush), and a call that
	// would exceed the credits waits, as for window space, until a flush
	// answers. Failures reported to those internal flushes are carried
	// into the response of the next Flush, so Flush still reports every
	// failure since the previous Flush. Default DefaultCredits; at least
	// 3; negative: no flow control (a reference worker has no limit).
	Credits int
	// RendezvousThreshold: APPEND and user-op payloads longer than this
	// many bytes are sent with the rendezvous protocol, shorter ones eager.
	// SCATTER is always eager, because the reference worker refuses
	// rendezvous scatters. Default DefaultRendezvousThreshold, or
	// wire.MaxLargeEager with LargeEager on an endpoint whose only
	// transport is TCP; negative: never force rendezvous.
	// Initiator.RendezvousThreshold says which one it uses.
	RendezvousThreshold int
	// LargeEager lets an Initiator whose endpoint has no transport but TCP
	// send appends and user ops of up to wire.MaxLargeEager bytes eager
	// (when RendezvousThreshold is 0): with peer-failure detection UCX has
	// no zero-copy lanes on TCP, so a rendezvous costs a handshake and
	// then the same fragments, and 16 KiB to 256 KiB appends ran 1.2 to 3
	// times as fast eager (docs/benchmarks/large-payloads.md, "Eager over
	// TCP"). On shared memory and RDMA it changes nothing. Set it only when
	// the target said the worker has wire.CapabilityLargeEager (see
	// LargeEagerSupported): a worker with a smaller eager limit fails
	// larger eager requests with LengthOverflow. Default false.
	LargeEager bool

	// Aggregate packs requests that queued up while the progress loop
	// was busy with earlier sends into BATCH containers (op 3): several
	// requests per active message, so the per-message cost of UCX and of
	// the worker is shared, in the manner of TCP autocorking. There is no
	// added latency when idle: a request the progress loop takes alone
	// goes out at once, as a plain reference request. Sequence numbers, acks,
	// flushes, FENCE, the send window and ordering are per request, exactly
	// as without it. Only a worker that advertises wire.CapabilityBatch
	// unpacks containers (a reference worker drops them, and an older one of
	// ours fails them): set it only when the target said the worker has it
	// (see AggregateSupported). Default false.
	Aggregate bool
	// Lend registers every LendPool with the worker, so that it reads
	// AppendLent's payloads from the pool in place where it can map it
	// (shared memory on one host): those that would go by rendezvous
	// (longer than RendezvousThreshold, or than its default when it is
	// negative). Shorter ones are sent by value, eager, where one copy
	// into the transport costs less than the ack a reference needs. Only a worker that advertises
	// wire.CapabilityLend knows the registration (a reference worker
	// drops it unanswered): set it only when the target said the worker
	// has it (see LendSupported). Default false.
	Lend bool
	// GroupAcks asks the worker to answer the requests sent with
	// rdmo.FlagAck in ACK groups: the acks of the requests it completed
	// in one batch come in one message instead of one each, which over
	// TCP saves a system call per answer on both sides. Each ack still
	// completes its own call, in the order the worker made them. Requests
	// that lend their payload keep their own acks, which return the
	// buffers one by one. Only a worker that advertises wire.CapabilityAckGroup knows
	// the flag this sets (an older one of ours fails the request with
	// UnknownFlags): set it only when the target said the worker has it
	// (see AckGroupSupported). Default false.
	GroupAcks bool
	// MaxAggregate bounds a container's size in bytes (its 24-byte header
	// and its data). A request whose entry alone does not fit, and one that
	// goes by rendezvous, is sent on its own. Containers are sent eager.
	// Default DefaultMaxAggregate, or wire.MaxLargeBatch with
	// LargeBatches.
	MaxAggregate int
	// LargeBatches sends containers of up to wire.MaxLargeBatch (60 KiB)
	// instead of 8 KiB, and gives the Initiator's own UCX context large
	// shared-memory segments (ucp.ContextOptions.LargeShmSegments) so that
	// such a container crosses shared memory in one piece: a stream of
	// small or 4 KiB requests then costs UCX and the worker one message per
	// many more requests. Set it only when the target said the worker has
	// wire.CapabilityLargeBatch (see LargeBatchSupported): UCX writes a
	// message into the receiver's descriptor as large as the sender's
	// segment, and a worker without it has 8 KiB ones. A Context of the
	// caller's (Options.Context) keeps its own segments, and the
	// containers stay at 8 KiB unless it has large ones
	// (ucp.Context.LargeShmSegments); so do they when the environment
	// sets a smaller segment (ucp.ShmSegmentsLarge). Default false.
	LargeBatches bool

	// Ack sets rdmo.FlagAck on every APPEND, SCATTER and user op sent
	// through the Initiator's own methods (With overrides it per call).
	// Only our worker answers acks: never set it against a reference
	// worker, or the window fills with requests that are never answered.
	Ack bool
	// OnAck, if set, is called on the Initiator's progress loop for
	// every matched ack, successful or not, Calls' included. data is the
	// result data the handler returned (rdmo.Result.Data, at most
	// rdmo.MaxResultData bytes; nil without any, on failure, and from a
	// worker without wire.CapabilityResult), valid only during the call.
	// It must not block, and must
	// not call the Initiator's blocking methods (Close, Flush, or a call
	// that may wait for window space): the progress loop would wait
	// for itself.
	OnAck func(ack wire.AckResponse, data []byte)
	// ErrorBuffer is the capacity of the Errors channel (default
	// DefaultErrorBuffer). Failures that do not fit are counted in
	// Stats.ErrorsDropped.
	ErrorBuffer int

	// UCX overrides UCX configuration entries of the context the
	// Initiator creates (names without the UCX_ prefix, e.g. "TLS").
	// RNDV_SCHEME defaults to ucp.SafeRendezvousScheme.
	UCX map[string]string
	// Context, if set, is used instead of creating one; the Initiator
	// does not close it.
	Context *ucp.Context
	// ErrorHandling selects peer-failure detection on the endpoint
	// (ucp.ErrorHandlingPrefer by default: on where a transport can).
	ErrorHandling ucp.ErrorHandling
	// LoopThreadOnly keeps the UCP worker to the progress loop's thread
	// (UCS_THREAD_MODE_SINGLE): Flush and Call then wait for the loop to
	// deliver their answer instead of running its rounds on the caller's
	// thread while the loop is parked (see docs/ARCHITECTURE.md, "Who
	// runs the progress loop"). Set it on hosts whose UCX posts to mlx5
	// devices, where a serialized worker pays extra barriers per post, if
	// the data path matters more than a waiting caller's latency. Default
	// false.
	LoopThreadOnly bool

	// FlushTimeout bounds how long a flush sent to the worker waits for
	// its answer (0: no bound). When one is not answered in time the
	// worker is taken to have stopped: the Initiator fails as on
	// PeerFailed, every outstanding and later call at once, with a
	// *PeerFailedError whose cause is a *FlushTimeoutError
	// (errors.Is(err, ErrFlushTimeout)).
	FlushTimeout time.Duration

	// CloseTimeout bounds Close: waiting for queued and in-flight sends to
	// complete locally, then for the endpoint's graceful close (default
	// DefaultCloseTimeout). Destroying the UCP worker afterwards gives UCX
	// up to 2 s more when it still holds operations (a cut network).
	CloseTimeout time.Duration
	// Name names the endpoint in logs and errors (default "rdmo-initiator").
	Name string
	// Logger receives the Initiator's logs (default zap.NewNop()).
	Logger *zap.Logger
}

// Initiator sends RDMO requests for one client to one RDMO worker. All
// methods are safe for concurrent use.
type Initiator struct {
	opts     Options
	log      *zap.Logger
	defFlags uint32

	q     queue
	stats counters
	errs  chan error
	done  chan struct{} // closed when the progress loop has exited

	w      *ucp.Worker // for Wake only: the progress loop owns it
	ctx    *ucp.Context
	addr   []byte
	detect bool

	flushID atomic.Uint64

	// Lend pools (pool.go): AppendLent finds its data's pool in pools,
	// and sends by reference a payload longer than byRefMin.
	byRefMin int
	// autoRndv: Options.RendezvousThreshold was left 0, so the loop may
	// raise it once it knows the endpoint's transports (Options.LargeEager).
	autoRndv bool
	poolSeq  atomic.Uint64
	poolMu   sync.Mutex // serialises the writers of pools
	pools    atomic.Pointer[[]*LendPool]

	closeOnce sync.Once
	closeErr  error // set by the progress loop before done is closed

	// driveTID is the progress loop's OS thread while a Drive's fn runs on
	// it, else 0: a blocking call made there must fail, not wait for the
	// loop it blocks.
	driveTID atomic.Int32

	// lp is the progress loop, run by the goroutine holding tok (see
	// borrow.go); borrowers counts the callers that will wait for an
	// answer, spinning those waiting to take tok; parked is set while the
	// loop is parked on it; spaceBorrower is set while a producer that
	// waits for window space or credits is counted there (awaitSpace).
	lp            *loop
	tok           park.Word
	borrowers     atomic.Int32
	spinning      atomic.Int32
	parked        atomic.Bool
	spaceBorrower atomic.Bool
	// answerPoller is set while a FlushWait's or CallWait's Wait polls
	// for its answer (spinAnswer).
	answerPoller atomic.Bool
	// streamParked is set while the loop is parked for a stream's
	// producers (stream.go): a producer's request does not resume it.
	streamParked atomic.Bool
	// streamLast is when a producer last ran a round for a stream
	// (stream.go), in nanoseconds since epoch.
	streamLast atomic.Int64
}

// New creates the UCP context (unless Options.Context is set), worker and
// endpoint, and starts the progress loop.
func New(opts Options) (*Initiator, error) {
	if len(opts.WorkerAddress) == 0 && opts.Exchange == nil {
		return nil, errors.New("initiator: Options.WorkerAddress is empty")
	}
	if opts.Window <= 0 {
		opts.Window = DefaultWindow
	}
	if opts.WindowBytes <= 0 {
		opts.WindowBytes = DefaultWindowBytes
	}
	switch {
	case opts.Credits == 0:
		opts.Credits = DefaultCredits
	case opts.Credits > 0 && opts.Credits < minCredits:
		return nil, fmt.Errorf("initiator: Options.Credits is %d, at least %d (or negative for no flow control)", opts.Credits, minCredits)
	}
	autoRndv := opts.RendezvousThreshold == 0
	if autoRndv {
		opts.RendezvousThreshold = DefaultRendezvousThreshold
	}
	byRefMin := opts.RendezvousThreshold
	if byRefMin < 0 {
		byRefMin = DefaultRendezvousThreshold
	}
	if opts.ErrorBuffer <= 0 {
		opts.ErrorBuffer = DefaultErrorBuffer
	}
	if opts.MaxAggregate <= 0 {
		opts.MaxAggregate = DefaultMaxAggregate
		if largeSegments(opts) {
			opts.MaxAggregate = wire.MaxLargeBatch
		}
	}
	if opts.CloseTimeout <= 0 {
		opts.CloseTimeout = DefaultCloseTimeout
	}
	if opts.Name == "" {
		opts.Name = "rdmo-initiator"
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	opts.WorkerAddress = append([]byte(nil), opts.WorkerAddress...)
	in := &Initiator{
		opts: opts,
		log:  opts.Logger.With(zap.String("initiator", opts.Name), zap.Uint64("client", opts.ClientID)),
		errs: make(chan error, opts.ErrorBuffer),
		done: make(chan struct{}),

		byRefMin: byRefMin,
		autoRndv: autoRndv,
	}
	if opts.Ack {
		in.defFlags = rdmo.FlagAck
	}
	// Flush ids start at a random point so that a response meant for an
	// earlier initiator on the same worker never matches one of ours.
	in.flushID.Store(rand.Uint64())
	in.q.init(opts.Window, opts.WindowBytes, opts.Credits, in.wake)
	ready := make(chan error, 1)
	go in.run(ready)
	if err := <-ready; err != nil {
		<-in.done
		return nil, err
	}
	return in, nil
}

// AckGroupSupported reports whether a worker with these capabilities (as
// the target passes them out of band, host/oob.WorkerInfo.Capabilities)
// answers acks in groups, so that Options.GroupAcks may be set.
func AckGroupSupported(capabilities []string) bool {
	for _, c := range capabilities {
		if c == wire.CapabilityAckGroup {
			return true
		}
	}
	return false
}

// largeSegments reports whether an Initiator with opts sends containers of
// up to wire.MaxLargeBatch: with LargeBatches, when its UCX context (its
// own, or the caller's) carries them over shared memory in one piece. A
// context with 8 KiB segments would cut each into fragments that the
// worker's UCX copies together again: 4 KiB appends ran at a tenth of
// their rate so (docs/benchmarks/append.md, "Large containers").
func largeSegments(opts Options) bool {
	if !opts.LargeBatches {
		return false
	}
	if opts.Context != nil {
		return opts.Context.LargeShmSegments()
	}
	return ucp.ShmSegmentsLarge(opts.UCX)
}

// LargeBatchSupported reports whether a worker with these capabilities (as
// the target passes them out of band, host/oob.WorkerInfo.Capabilities)
// takes containers of up to 60 KiB in one piece, so that
// Options.LargeBatches may be set.
func LargeBatchSupported(capabilities []string) bool {
	return slices.Contains(capabilities, wire.CapabilityLargeBatch)
}

// LargeEagerSupported reports whether a worker with these capabilities (as
// the target passes them out of band, host/oob.WorkerInfo.Capabilities)
// accepts eager payloads of wire.MaxLargeEager bytes, so that
// Options.LargeEager may be set.
func LargeEagerSupported(capabilities []string) bool {
	return slices.Contains(capabilities, wire.CapabilityLargeEager)
}

// RendezvousThreshold is the payload size above which this Initiator sends
// appends and user ops by rendezvous (negative: never forced), as
// Options.RendezvousThreshold and Options.LargeEager chose it for its
// endpoint.
func (in *Initiator) RendezvousThreshold() int { return in.opts.RendezvousThreshold }

// AggregateSupported reports whether a worker with these capabilities (as
// the target passes them out of band, host/oob.WorkerInfo.Capabilities)
// unpacks BATCH containers, so that Options.Aggregate may be set.
func AggregateSupported(capabilities []string) bool {
	for _, c := range capabilities {
		if c == wire.CapabilityBatch {
			return true
		}
	}
	return false
}

// Address is the Initiator's own UCP worker address, which the target
// passes to the RDMO worker (RQ_CREATE) so it can recognise this
// initiator's connection.
func (in *Initiator) Address() []byte { return append([]byte(nil), in.addr...) }

// PeerFailureDetection reports whether UCX detects the failure of the RDMO
// worker on this endpoint: over TCP, and over shared memory since
// ucp.NewContext turns UCX's shm error handling on (there UCX watches the
// worker's process, so a worker that stops inside a process that lives on
// goes unnoticed). When it does not, the layer above should call PeerFailed
// when it learns the worker is gone.
func (in *Initiator) PeerFailureDetection() bool { return in.detect }

// ClientID is the client id the Initiator puts into every request.
func (in *Initiator) ClientID() uint64 { return in.opts.ClientID }

// Errors delivers the failures reported in acks (as *RequestError). It is
// closed when the Initiator has closed.
func (in *Initiator) Errors() <-chan error { return in.errs }

// Stats returns a snapshot of the counters.
func (in *Initiator) Stats() Stats { return in.stats.snapshot() }

// Append queues an APPEND of data to the queue whose tail pointer is at
// ptrAddr in region ptrRkey, with the data going to region dataRkey. data
// is copied; it must not be empty. It blocks while the send window is full.
func (in *Initiator) Append(ptrAddr, ptrRkey, dataRkey uint64, data []byte) error {
	_, err := Sender{in: in, flags: in.defFlags}.Append(ptrAddr, ptrRkey, dataRkey, data)
	return err
}

// Scatter queues a SCATTER: chunks[i] is written at iovs[i].Addr in region
// iovs[i].Rkey. iovs[i].Len must equal len(chunks[i]), at most 65535. The
// chunks are copied. It blocks while the send window is full.
func (in *Initiator) Scatter(iovs []wire.IOV, chunks [][]byte) error {
	_, err := Sender{in: in, flags: in.defFlags}.Scatter(iovs, chunks)
	return err
}

// User queues a plugin operation: op (>= rdmo.OpUserBase), an opaque
// sub-header of at most 48 bytes, and a payload. Both are copied. It blocks
// while the send window is full.
func (in *Initiator) User(op uint32, sub, payload []byte) error {
	_, err := Sender{in: in, flags: in.defFlags}.User(op, sub, payload)
	return err
}

// Sender sends requests with per-call flags and a context that bounds the
// wait for window space. It is a small value made by With; use it at once.
type Sender struct {
	in    *Initiator
	ctx   context.Context
	flags uint32
	poll  func() error // a Driver's (see request.poll)
}

// With returns a Sender whose requests carry flags (rdmo.FlagAck,
// rdmo.FlagFence; these replace Options.Ack) and wait for window space at
// most until ctx ends (nil: no limit).
func (in *Initiator) With(ctx context.Context, flags uint32) Sender {
	return Sender{in: in, ctx: ctx, flags: flags}
}

const sendFlags = rdmo.FlagFence | rdmo.FlagAck

func (s Sender) check() error {
	if s.in == nil {
		return errors.New("initiator: zero Sender (use Initiator.With)")
	}
	if s.flags&^sendFlags != 0 {
		return fmt.Errorf("initiator: flags %#x: only rdmo.FlagFence and rdmo.FlagAck may be set: %w",
			s.flags, rdmo.ErrUnknownFlags)
	}
	return nil
}

// Append is Initiator.Append with the Sender's flags and context. It
// returns the request's sequence number, which its ack carries.
func (s Sender) Append(ptrAddr, ptrRkey, dataRkey uint64, data []byte) (uint64, error) {
	if err := s.check(); err != nil {
		return 0, err
	}
	if len(data) == 0 {
		return 0, fmt.Errorf("initiator: append: %w", rdmo.ErrEmptyAppend)
	}
	r := request{
		op:    rdmo.OpAppend,
		flags: s.flags,
		app:   rdmo.AppendHeader{PtrAddr: ptrAddr, PtrRkey: rdmo.RegionID(ptrRkey), DataRkey: rdmo.RegionID(dataRkey)},
		data:  data,
		plen:  len(data),
		poll:  s.poll,
	}
	return s.in.enqueue(s.ctx, &r)
}

// Scatter is Initiator.Scatter with the Sender's flags and context. It
// returns the request's sequence number, which its ack carries.
func (s Sender) Scatter(iovs []wire.IOV, chunks [][]byte) (uint64, error) {
	if err := s.check(); err != nil {
		return 0, err
	}
	if len(iovs) != len(chunks) {
		return 0, fmt.Errorf("initiator: scatter: %d iovs but %d chunks: %w", len(iovs), len(chunks), rdmo.ErrPayloadMismatch)
	}
	n := 0
	for i := range iovs {
		if len(chunks[i]) > wire.MaxIOVLen {
			return 0, fmt.Errorf("initiator: scatter: chunk %d is %d bytes, at most %d: %w",
				i, len(chunks[i]), wire.MaxIOVLen, rdmo.ErrLengthOverflow)
		}
		if int(iovs[i].Len) != len(chunks[i]) {
			return 0, fmt.Errorf("initiator: scatter: iov %d has Len %d but its chunk is %d bytes: %w",
				i, iovs[i].Len, len(chunks[i]), rdmo.ErrPayloadMismatch)
		}
		n += wire.IOVDescLen + len(chunks[i])
	}
	r := request{op: rdmo.OpScatter, flags: s.flags, iovs: iovs, chunks: chunks, plen: n}
	return s.in.enqueue(s.ctx, &r)
}

// User is Initiator.User with the Sender's flags and context. It returns
// the request's sequence number, which its ack carries.
func (s Sender) User(op uint32, sub, payload []byte) (uint64, error) {
	return s.user(op, sub, payload, nil)
}

func (s Sender) user(op uint32, sub, payload []byte, call *CallWait) (uint64, error) {
	if err := s.check(); err != nil {
		return 0, err
	}
	if err := checkUser(op, sub); err != nil {
		return 0, err
	}
	r := request{op: op, flags: s.flags, sub: sub, data: payload, plen: len(payload), call: call, poll: s.poll}
	return s.in.enqueue(s.ctx, &r)
}

// checkUser checks a user op's id and sub-header as the worker would.
func checkUser(op uint32, sub []byte) error {
	if !rdmo.IsUserOp(op) {
		return fmt.Errorf("initiator: op %d is not a user op (>= %d): %w", op, rdmo.OpUserBase, rdmo.ErrUnknownOp)
	}
	if wire.HeaderLen+len(sub) > wire.MaxHeaderLen {
		return fmt.Errorf("initiator: user sub-header is %d bytes, at most %d: %w",
			len(sub), wire.MaxHeaderLen-wire.HeaderLen, rdmo.ErrHeaderTooLong)
	}
	return nil
}

// FlushWait is an outstanding flush.
type FlushWait struct {
	in   *Initiator
	id   uint64
	seq  uint64 // the FLUSH's arrival sequence number
	auto bool   // queued by flow control: nobody waits, failures carry over
	sig  latch  // set once rsp and err are final
	rsp  wire.FlushResponse
	err  error
	sent time.Time // when the loop issued it (Options.FlushTimeout)
}

// ID is the flush id the FLUSH carries and its response must echo.
func (f *FlushWait) ID() uint64 { return f.id }

// Done is closed when the flush has its answer (or failed).
func (f *FlushWait) Done() <-chan struct{} { return f.sig.C() }

// Wait waits for the flush response, ctx, Close or a peer failure. The
// error is a *FlushError when the response reports failed requests (it
// matches the first failure's status), ctx.Err() when ctx ended first (the
// flush stays outstanding), ErrClosed or a *PeerFailedError.
func (f *FlushWait) Wait(ctx context.Context) (wire.FlushResponse, error) {
	return f.wait(ctx, nil)
}

// wait is Wait; with br non-nil (Flush) the caller counted itself a
// borrower, and wait runs the loop's rounds when the loop hands it the
// token (borrow.go).
func (f *FlushWait) wait(ctx context.Context, br *borrower) (wire.FlushResponse, error) {
	if err := f.in.await(&f.sig, ctx, br); err != nil {
		return wire.FlushResponse{}, err
	}
	return f.rsp, f.err
}

// finish runs on the progress loop, once per flush.
func (f *FlushWait) finish(rsp wire.FlushResponse, err error) {
	f.rsp, f.err = rsp, err
	f.sig.fire()
}

// FlushAsync queues a FLUSH (with rdmo.FlagFence and a fresh flush id) and
// returns at once; ctx bounds only the wait for window space. When the
// FlushWait is done, every request queued before the FLUSH has completed at
// the worker and its effects are visible in target memory.
func (in *Initiator) FlushAsync(ctx context.Context) (*FlushWait, error) {
	return in.flushAsync(ctx, nil)
}

// flushAsync is FlushAsync; poll is a Driver's (see request.poll).
func (in *Initiator) flushAsync(ctx context.Context, poll func() error) (*FlushWait, error) {
	fw := &FlushWait{in: in, id: in.flushID.Add(1)}
	r := request{op: rdmo.OpFlush, flags: rdmo.FlagFence, flush: fw, poll: poll}
	if _, err := in.enqueue(ctx, &r); err != nil {
		return nil, err
	}
	return fw, nil
}

// Flush sends a FLUSH and waits for its response (see FlushWait.Wait for
// the errors). ctx bounds the whole call.
func (in *Initiator) Flush(ctx context.Context) (wire.FlushResponse, error) {
	br := in.borrowBegin()
	defer br.end(false)
	fw, err := in.FlushAsync(ctx)
	if err != nil {
		return wire.FlushResponse{}, err
	}
	return fw.wait(ctx, &br)
}

// PeerFailed tells the Initiator that the RDMO worker is gone, where UCX
// cannot detect it or sooner than UCX does (see PeerFailureDetection): the
// endpoint is closed forcibly and every pending and later call fails with a
// *PeerFailedError wrapping cause.
func (in *Initiator) PeerFailed(cause error) {
	pe := &PeerFailedError{Cause: cause}
	q := &in.q
	q.Lock()
	if q.closed {
		q.Unlock()
		return
	}
	if q.failed == nil {
		q.failed = pe
	}
	q.failReq = true
	q.attn.Store(true)
	q.broadcast()
	q.Unlock()
	in.w.Wake()
	in.resumeParked()
}

// Close sends what was queued, waits at most Options.CloseTimeout for the
// sends to complete locally, fails outstanding flushes with ErrClosed,
// closes the endpoint, worker and (if it made it) context, and stops the
// progress loop. Later calls return ErrClosed. Close is idempotent.
//
// isClosed reports whether Close was called.
func (in *Initiator) isClosed() bool {
	in.q.Lock()
	defer in.q.Unlock()
	return in.q.closed
}

// Inside a Drive's fn, Close only starts closing: the Driver's calls then
// return ErrClosed, and the loop closes once fn has returned.
func (in *Initiator) Close() error {
	in.closeOnce.Do(func() {
		q := &in.q
		q.Lock()
		q.closed = true
		q.attn.Store(true)
		q.broadcast()
		q.Unlock()
		in.w.Wake()
		in.resumeParked()
	})
	if in.onLoop() {
		return nil
	}
	<-in.done
	return in.closeErr
}
