/*
 * ucp/shim.c: the C half of package ucp, the only code that calls libucp on
 * the data path.
 *
 * Design: one cgo crossing per progress round, never one per message.
 * A C->Go call (a UCX callback that reached Go) costs far more than UCX's
 * own per-message work, so:
 *
 *  - No UCX callback calls Go. Completion, active-message, endpoint-error
 *    and connection-request callbacks each append a fixed-size record to
 *    the worker's event array (push_event), copying message headers and
 *    small payloads into a per-round byte arena (arena_copy).
 *  - Go queues outgoing work (sends, puts, gets, atomics, flushes, rendezvous
 *    receives, endpoint closes) as descriptors in a C-allocated array
 *    (w->ops); shim_progress issues all of them (shim_submit), hands back the
 *    message buffers Go is done with, and runs ucp_worker_progress until UCX
 *    reports no more work or a call finds a conversation's turn (a few
 *    events), all in one call. Go then reads the round's events straight
 *    from C memory.
 *  - An operation in flight is identified by a token, the index of its slot
 *    in a fixed C table (w->slots). UCX gets the slot as user_data; the slot
 *    holds what UCX writes asynchronously (atomic operand and result), so no
 *    Go memory moves under UCX and no cgo.Handle is allocated per operation.
 *
 * Threading: a worker is created UCS_THREAD_MODE_SINGLE and used only from
 * the OS thread that created it (Go locks that goroutine to its thread), or
 * UCS_THREAD_MODE_SERIALIZED (w->serialized) and used by one thread at a
 * time, in an order Go establishes. With the owner-thread check on (ucp.CheckThreads, RDMO_UCP_CHECK_THREADS)
 * the entry points that reach UCX on the data path (shim_progress,
 * shim_submit, shim_wait) refuse a call from another thread instead of
 * letting UCX misbehave (1.13) or abort (1.18); a serialized worker has no
 * owner to check. See docs/ARCHITECTURE.md,
 * "ucp: crossing cgo once per batch, not once per message".
 *
 * The structures are declared and explained in shim.h.
 */
#define _GNU_SOURCE
#include "shim.h"

#include <ucs/config/global_opts.h>

#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Appends a zeroed record to the worker's event array, growing it (doubling)
 * when full, and returns it; called from UCX callbacks inside
 * ucp_worker_progress. The array is reset at the start of each round, so it
 * settles at the largest round's size and stops allocating. On allocation
 * failure the event is counted in w->dropped (Go reports ErrEventsLost)
 * rather than lost silently. */
static shim_event_t *push_event(shim_worker_t *w)
{
    if (w->nevents == w->events_cap) {
        uint32_t ncap = w->events_cap ? w->events_cap * 2 : 256;
        shim_event_t *n = realloc(w->events, (size_t)ncap * sizeof(*n));
        if (n == NULL) {
            w->dropped++;
            return NULL;
        }
        w->events     = n;
        w->events_cap = ncap;
    }
    shim_event_t *ev = &w->events[w->nevents++];
    memset(ev, 0, sizeof(*ev));
    return ev;
}

/* Copies len bytes into the arena; returns the offset or UINT64_MAX. */
static uint64_t arena_copy(shim_worker_t *w, const void *src, size_t len)
{
    uint64_t need = w->arena_len + len;
    if (need > w->arena_cap) {
        uint64_t ncap = w->arena_cap ? w->arena_cap : 4096;
        while (ncap < need) {
            ncap *= 2;
        }
        uint8_t *n = realloc(w->arena, ncap);
        if (n == NULL) {
            w->dropped++;
            return UINT64_MAX;
        }
        w->arena     = n;
        w->arena_cap = ncap;
    }
    uint64_t off = w->arena_len;
    if (len > 0) {
        memcpy(w->arena + off, src, len);
    }
    w->arena_len = need;
    return off;
}

static int shim_thread_check;

/* Turns the owner-thread check on or off for every worker of the process
 * (ucp.CheckThreads). A relaxed atomic: it is set once, at start-up or by a
 * test, and read on every data-path entry. */
void shim_set_thread_check(int on)
{
    __atomic_store_n(&shim_thread_check, on, __ATOMIC_RELAXED);
}

/* Returns 1 (and records the caller) when the check is on and the caller is
 * not the worker's thread. */
static inline int off_thread(shim_worker_t *w)
{
    if (!__atomic_load_n(&shim_thread_check, __ATOMIC_RELAXED) || w->serialized ||
        pthread_equal(pthread_self(), w->owner)) {
        return 0;
    }
    w->wrong_tid = (int32_t)syscall(SYS_gettid);
    return 1;
}

/* Wraps a freshly created ucp_worker_h with rdmo's C state: the slot table
 * (nslots operations in flight at most: ErrTooManyOutstanding beyond it), the
 * op descriptor array Go fills (ops_cap per round), the owner thread (the
 * caller: Go creates the worker on the goroutine, locked to its thread, that
 * will drive it), and the worker's event fd for Wait (ucp_worker_get_efd; -1
 * when UCX has none, and Wait reports UNSUPPORTED). */
shim_worker_t *shim_worker_new(ucp_worker_h worker, uint32_t nslots, uint32_t ops_cap)
{
    shim_worker_t *w = calloc(1, sizeof(*w));
    if (w == NULL) {
        return NULL;
    }
    w->owner   = pthread_self();
    w->worker  = worker;
    w->slots   = calloc(nslots, sizeof(*w->slots));
    w->ops     = calloc(ops_cap, sizeof(*w->ops));
    w->nslots  = nslots;
    w->ops_cap = ops_cap;
    w->efd     = -1;
    if (w->slots == NULL || w->ops == NULL) {
        shim_worker_free(w);
        return NULL;
    }
    for (uint32_t i = 0; i < nslots; i++) {
        w->slots[i].w = w;
    }
    if (ucp_worker_get_efd(worker, &w->efd) != UCS_OK) {
        w->efd = -1;
    }
    return w;
}

/* Frees the C state of a worker after ucp_worker_destroy: the AM handler
 * contexts, the event array, the arena, the slots and the op array. UCX
 * holds none of them any more (shim_abandon_pending released its requests
 * before the destroy). */
void shim_worker_free(shim_worker_t *w)
{
    if (w == NULL) {
        return;
    }
    for (int i = 0; i < SHIM_MAX_AM_ID; i++) {
        free(w->am[i]);
    }
    free(w->events);
    free(w->arena);
    free(w->slots);
    free(w->ops);
    free(w);
}

/* Records the completion of the operation in slot s as an event (token =
 * slot index, UCX status, received length for rendezvous receives). Go
 * delivers it to the operation's Completer in the next Progress. */
static void shim_complete(shim_slot_t *s, ucs_status_t status, uint64_t length)
{
    shim_worker_t *w  = s->w;
    shim_event_t  *ev = push_event(w);
    if (ev == NULL) {
        return;
    }
    ev->kind   = SHIM_EV_COMPLETE;
    ev->status = status;
    ev->token  = (uint64_t)(s - w->slots);
    ev->length = length;
}

/* UCX's completion callback for every non-AM-receive operation (send, put,
 * get, atomic, flush, close): records the completion and frees the UCX
 * request in place, so no request outlives its callback and Go never sees a
 * request handle. A slot abandoned at worker close is left alone: its
 * request was already freed. */
static void shim_send_cb(void *request, ucs_status_t status, void *user_data)
{
    shim_slot_t *s = user_data;
    if (s->abandoned) {
        return; /* already released by shim_abandon_pending */
    }
    s->req = NULL;
    shim_complete(s, status, 0);
    ucp_request_free(request);
}

/* UCX's completion callback for ucp_am_recv_data_nbx (fetching a rendezvous
 * payload into a buffer Go chose): like shim_send_cb, plus the length UCX
 * received. */
static void shim_recv_cb(void *request, ucs_status_t status, size_t length,
                         void *user_data)
{
    shim_slot_t *s = user_data;
    if (s->abandoned) {
        return;
    }
    s->req = NULL;
    shim_complete(s, status, length);
    ucp_request_free(request);
}

/* Frees every UCX request still in flight, before ucp_worker_destroy (which
 * asserts that none is left). Each slot is marked abandoned so a callback
 * UCX still runs for it during the destroy records nothing and frees
 * nothing twice. */
void shim_abandon_pending(shim_worker_t *w)
{
    for (uint32_t i = 0; i < w->nslots; i++) {
        shim_slot_t *s = &w->slots[i];
        if (s->req != NULL) {
            s->abandoned = 1;
            ucp_request_free(s->req);
            s->req = NULL;
        }
    }
}

/* UCX's active-message receive callback (registered per AM id by
 * shim_set_am_handler with UCP_AM_FLAG_WHOLE_MSG | PERSISTENT_DATA). It
 * records one SHIM_EV_AM event: the AM id, a copy of the header in the arena
 * (UCX's header buffer is valid only during the callback), the reply
 * endpoint when the sender asked for one, and the data in one of three forms:
 *  - rendezvous: the data is still at the sender; keep UCX's descriptor
 *    (UCS_INPROGRESS) until Go receives it (SHIM_OP_AM_RECV) or releases it;
 *  - eager and larger than SHIM_COPY_MAX: keep UCX's buffer zero-copy
 *    (UCS_INPROGRESS), released by ucp_am_data_release once Go is done
 *    (the release list of the next shim_progress, or later for a kept
 *    Message);
 *  - eager and small: copy it into the arena and return UCS_OK, so UCX
 *    reuses its buffer at once (cheaper than a persistent descriptor).
 * When the event cannot be recorded (allocation failure, counted in
 * w->dropped) it returns UCS_OK so UCX keeps ownership of the data. */
static ucs_status_t shim_am_cb(void *arg, const void *header, size_t header_length,
                               void *data, size_t length,
                               const ucp_am_recv_param_t *param)
{
    shim_am_ctx_t *ctx = arg;
    shim_worker_t *w   = ctx->w;
    ucs_status_t   ret = UCS_OK;
    shim_event_t  *ev  = push_event(w);
    if (ev == NULL) {
        return UCS_OK; /* dropped: the data goes back to UCX */
    }
    uint64_t hoff = arena_copy(w, header, header_length);
    if (hoff == UINT64_MAX) {
        w->nevents--;
        return UCS_OK;
    }
    ev->kind       = SHIM_EV_AM;
    ev->am_id      = ctx->id;
    ev->header_len = (uint32_t)header_length;
    ev->header_off = (uint32_t)hoff;
    ev->length     = length;
    if (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) {
        ev->ep        = param->reply_ep;
        ev->am_flags |= SHIM_AM_HAS_REPLY_EP;
    }
    if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) {
        ev->am_flags |= SHIM_AM_DATA_RNDV;
        ev->data      = data;
        ret           = UCS_INPROGRESS;
    } else if ((param->recv_attr & UCP_AM_RECV_ATTR_FLAG_DATA) && length > SHIM_COPY_MAX) {
        ev->am_flags |= SHIM_AM_DATA_PERSISTENT;
        ev->data      = data;
        ret           = UCS_INPROGRESS;
    } else {
        uint64_t doff = arena_copy(w, data, length);
        if (doff == UINT64_MAX) {
            w->nevents--;
            return UCS_OK;
        }
        ev->am_flags |= SHIM_AM_DATA_COPIED;
        ev->data_off  = doff;
    }
    return ret;
}

/* UCX's endpoint error callback (endpoints made with peer-failure detection,
 * set_err_mode): records the failed endpoint and status. Go fails the
 * endpoint's pending and later operations with an ErrPeerFailed-matching
 * error and calls the endpoint's OnError. */
static void shim_ep_err_cb(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    shim_worker_t *w  = arg;
    shim_event_t  *ev = push_event(w);
    if (ev == NULL) {
        return;
    }
    ev->kind   = SHIM_EV_EP_ERROR;
    ev->status = status;
    ev->ep     = ep;
}

/* UCX's listener callback for an incoming client-server connection: records
 * the connection request with the listener's token; Go accepts it with
 * shim_ep_create_conn or rejects it. If the event cannot be recorded the
 * request is rejected here, so the peer is not left waiting. */
static void shim_conn_cb(ucp_conn_request_h conn_request, void *arg)
{
    shim_listener_ctx_t *ctx = arg;
    shim_event_t        *ev  = push_event(ctx->w);
    if (ev == NULL) {
        ucp_listener_reject(ctx->listener, conn_request);
        return;
    }
    ev->kind  = SHIM_EV_CONN_REQ;
    ev->token = ctx->token;
    ev->ep    = conn_request;
}

/* The one crossing per round (Worker.Progress). Discards the previous
 * round's events and arena (Go has delivered them), then:
 *  1. issues every operation Go queued since the last round (shim_submit);
 *  2. releases the persistent AM buffers Go has finished with
 *     (ucp_am_data_release), which must happen on the worker's thread;
 *  3. runs ucp_worker_progress until it reports no more work, at most
 *     `budget` times, so one round cannot run forever under a flood; a
 *     call that adds 1 to SHIM_TURN_EVENTS-1 events ends the round early
 *     (see the loop).
 * Returns the number of events recorded; Go reads them from w->events, and
 * w->busy counts the progress calls that did any work, UCX's own wire-up
 * included, which no event of ours shows (Worker.settle).
 * Off the owner thread (check on) it touches nothing and returns 0; Go sees
 * w->wrong_tid and returns ErrWrongThread. */
uint32_t shim_progress(shim_worker_t *w, uint32_t nops, const uintptr_t *release,
                       uint32_t nrelease, uint32_t budget)
{
    w->nevents   = 0;
    w->busy      = 0;
    w->arena_len = 0;
    if (off_thread(w)) {
        return 0;
    }
    shim_submit(w, nops);
    for (uint32_t i = 0; i < nrelease; i++) {
        ucp_am_data_release(w->worker, (void*)release[i]);
    }
    for (uint32_t r = 0; r < budget; r++) {
        uint32_t before = w->nevents;
        if (ucp_worker_progress(w->worker) == 0) {
            break;
        }
        w->busy++;
        /* A call that found only a few events found a conversation's turn
         * (a request, an answer), not a stream: hand it to Go now. Calling
         * UCX again first would cost the turn one more poll of every
         * transport, an epoll_wait on tcp, before anyone answers it (about
         * a microsecond of each round trip here, docs/benchmarks/idle-policy.md). A
         * call that found more keeps draining, so a stream still arrives
         * in large rounds. */
        uint32_t added = w->nevents - before;
        if (added > 0 && added < SHIM_TURN_EVENTS) {
            break;
        }
    }
    return w->nevents;
}

/* Maps rdmo's atomic kinds (SHIM_AMO_*) to UCX's opcodes; ADD is the
 * default so an unknown kind cannot reach UCX as garbage. */
static ucp_atomic_op_t amo_opcode(uint32_t kind)
{
    switch (kind) {
    case SHIM_AMO_SWAP:
        return UCP_ATOMIC_OP_SWAP;
    case SHIM_AMO_CSWAP:
        return UCP_ATOMIC_OP_CSWAP;
    default:
        return UCP_ATOMIC_OP_ADD;
    }
}

/* Issues ops[0..n) in order with UCX's non-blocking *_nbx calls, each with
 * shim_send_cb (or shim_recv_cb) and its slot as user_data. For each op it
 * writes the outcome back into the descriptor for Go to collect:
 * SHIM_RES_DONE when UCX finished in place (NULL: success, or an error
 * pointer: its status), SHIM_RES_PENDING when UCX returned a request (a
 * SHIM_EV_COMPLETE event follows; the request is kept in the slot only so
 * shim_abandon_pending can free it at close). Atomic operands and fetched
 * values live in the slot (s->operand, s->reply), which does not move while
 * UCX holds it. Called by shim_progress, and by Go directly (Worker.submit)
 * before calls that must see queued operations issued (Wait, Fence). */
void shim_submit(shim_worker_t *w, uint32_t n)
{
    if (off_thread(w)) {
        return;
    }
    for (uint32_t i = 0; i < n; i++) {
        shim_op_t        *op = &w->ops[i];
        shim_slot_t      *s  = &w->slots[op->token];
        ucp_request_param_t p;
        ucs_status_ptr_t  sp;

        memset(&p, 0, sizeof(p));
        p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
        p.user_data    = s;
        p.cb.send      = shim_send_cb;

        switch (op->kind) {
        case SHIM_OP_AM_SEND:
            p.op_attr_mask |= UCP_OP_ATTR_FIELD_FLAGS;
            p.flags         = op->flags;
            sp = ucp_am_send_nbx(op->ep, op->am_id, op->header, op->header_len,
                                 op->buffer, op->length, &p);
            break;
        case SHIM_OP_PUT:
            sp = ucp_put_nbx(op->ep, op->buffer, op->length, op->raddr, op->rkey, &p);
            break;
        case SHIM_OP_GET:
            sp = ucp_get_nbx(op->ep, op->buffer, op->length, op->raddr, op->rkey, &p);
            break;
        case SHIM_OP_ATOMIC:
            p.op_attr_mask |= UCP_OP_ATTR_FIELD_DATATYPE;
            p.datatype      = ucp_dt_make_contig(8);
            if (op->atomic_op == SHIM_AMO_CSWAP) {
                s->operand = op->compare;
                s->reply   = op->value;
            } else {
                s->operand = op->value;
                s->reply   = 0;
            }
            if (op->atomic_op != SHIM_AMO_ADD) {
                p.op_attr_mask |= UCP_OP_ATTR_FIELD_REPLY_BUFFER;
                p.reply_buffer  = &s->reply;
            }
            sp = ucp_atomic_op_nbx(op->ep, amo_opcode(op->atomic_op), &s->operand, 1,
                                   op->raddr, op->rkey, &p);
            break;
        case SHIM_OP_EP_FLUSH:
            sp = ucp_ep_flush_nbx(op->ep, &p);
            break;
        case SHIM_OP_WORKER_FLUSH:
            sp = ucp_worker_flush_nbx(w->worker, &p);
            break;
        case SHIM_OP_AM_RECV:
            p.cb.recv_am = shim_recv_cb;
            sp = ucp_am_recv_data_nbx(w->worker, op->desc, op->buffer, op->length, &p);
            break;
        case SHIM_OP_EP_CLOSE:
            p.op_attr_mask |= UCP_OP_ATTR_FIELD_FLAGS;
            p.flags         = op->flags;
            sp = ucp_ep_close_nbx(op->ep, &p);
            break;
        case SHIM_OP_NOP:
            sp = NULL;
            break;
        default:
            sp = UCS_STATUS_PTR(UCS_ERR_INVALID_PARAM);
            break;
        }

        if (sp == NULL) {
            op->result = SHIM_RES_DONE;
            op->status = UCS_OK;
        } else if (UCS_PTR_IS_ERR(sp)) {
            op->result = SHIM_RES_DONE;
            op->status = UCS_PTR_STATUS(sp);
        } else {
            op->result   = SHIM_RES_PENDING;
            op->status   = UCS_INPROGRESS;
            s->req       = sp;
            s->abandoned = 0;
        }
    }
}

/* Registers shim_am_cb for AM id `id` (ucp_worker_set_am_recv_handler). Its
 * argument is a small per-id context (worker and id), allocated once and
 * kept until shim_worker_free, so re-registering never leaves UCX with a
 * freed pointer. WHOLE_MSG: UCX reassembles fragments, so a handler always
 * sees a whole message. PERSISTENT_DATA: the callback may keep the data
 * (UCS_INPROGRESS) instead of copying it. */
ucs_status_t shim_set_am_handler(shim_worker_t *w, uint16_t id)
{
    if (id >= SHIM_MAX_AM_ID) {
        return UCS_ERR_INVALID_PARAM;
    }
    if (w->am[id] == NULL) {
        w->am[id] = calloc(1, sizeof(*w->am[id]));
        if (w->am[id] == NULL) {
            return UCS_ERR_NO_MEMORY;
        }
        w->am[id]->w  = w;
        w->am[id]->id = id;
    }
    ucp_am_handler_param_t p;
    memset(&p, 0, sizeof(p));
    p.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS |
                   UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG;
    p.id    = id;
    p.flags = UCP_AM_FLAG_WHOLE_MSG | UCP_AM_FLAG_PERSISTENT_DATA;
    p.cb    = shim_am_cb;
    p.arg   = w->am[id];
    return ucp_worker_set_am_recv_handler(w->worker, &p);
}

/* Unregisters the handler of AM id `id` (a NULL callback): later messages of
 * that id are dropped by UCX. Used by SetHandler(id, nil) and at close. */
ucs_status_t shim_clear_am_handler(shim_worker_t *w, uint16_t id)
{
    if (id >= SHIM_MAX_AM_ID) {
        return UCS_ERR_INVALID_PARAM;
    }
    ucp_am_handler_param_t p;
    memset(&p, 0, sizeof(p));
    p.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB;
    p.id = id;
    p.cb = NULL;
    return ucp_worker_set_am_recv_handler(w->worker, &p);
}

/* Asks UCX for peer-failure detection on an endpoint being created
 * (UCP_ERR_HANDLING_MODE_PEER with shim_ep_err_cb), when peer_err is set.
 * Both ends of a connection must use the same mode: UCX refuses mismatched
 * ends. */
static void set_err_mode(shim_worker_t *w, ucp_ep_params_t *p, int peer_err)
{
    if (peer_err) {
        p->field_mask     |= UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                             UCP_EP_PARAM_FIELD_ERR_HANDLER;
        p->err_mode        = UCP_ERR_HANDLING_MODE_PEER;
        p->err_handler.cb  = shim_ep_err_cb;
        p->err_handler.arg = w;
    }
}

/* Creates an endpoint to a peer's UCP worker address, with or without
 * peer-failure detection. */
static ucs_status_t ep_create_addr(shim_worker_t *w, const void *addr, int peer_err,
                                   ucp_ep_h *ep)
{
    ucp_ep_params_t p;
    memset(&p, 0, sizeof(p));
    p.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    p.address    = addr;
    set_err_mode(w, &p, peer_err);
    return ucp_ep_create(w->worker, &p, ep);
}

/* UCX's global log level (ucs_global_opts), for the binary's --sdk-log-level
 * and for quieting an expected failure (shim_ep_create_addr). */
int shim_log_level(void)
{
    return ucs_global_opts.log_component.log_level;
}

/* Sets UCX's global log level (--sdk-log-level). */
void shim_set_log_level(int level)
{
    ucs_global_opts.log_component.log_level = (ucs_log_level_t)level;
}

/* Creates an endpoint to a worker address in one of three detection modes
 * (see shim.h): 0 none; 2 required; 1 preferred: try with detection and, if
 * UCX answers UCS_ERR_UNREACHABLE (UCX 1.13's shared-memory transports
 * cannot detect a dead peer and refuse such endpoints), create it without.
 * During that first attempt UCX's log is raised to FATAL, because UCX logs
 * the expected refusal as an error. *detect says which mode the endpoint
 * got (Endpoint.PeerFailureDetection). */
ucs_status_t shim_ep_create_addr(shim_worker_t *w, const void *addr, int mode,
                                 ucp_ep_h *ep, int *detect)
{
    *detect = 0;
    if (mode == 0) {
        return ep_create_addr(w, addr, 0, ep);
    }
    ucs_log_level_t saved = ucs_global_opts.log_component.log_level;
    if (mode == 1) {
        /* The failed attempt is expected; UCX would log it as an error. */
        ucs_global_opts.log_component.log_level = UCS_LOG_LEVEL_FATAL;
    }
    ucs_status_t st = ep_create_addr(w, addr, 1, ep);
    ucs_global_opts.log_component.log_level = saved;
    if (st == UCS_OK) {
        *detect = 1;
        return st;
    }
    if (mode == 1 && st == UCS_ERR_UNREACHABLE) {
        return ep_create_addr(w, addr, 0, ep);
    }
    return st;
}

/* Resolves host:port with getaddrinfo for a client-server endpoint or a
 * listener (passive: an empty host binds every address). */
static ucs_status_t resolve(const char *host, uint16_t port, int passive,
                            struct sockaddr_storage *ss, socklen_t *len)
{
    struct addrinfo hints, *res = NULL;
    char            portstr[8];
    memset(&hints, 0, sizeof(hints));
    hints.ai_family   = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags    = passive ? AI_PASSIVE : 0;
    snprintf(portstr, sizeof(portstr), "%u", port);
    if (getaddrinfo((host && host[0]) ? host : NULL, portstr, &hints, &res) != 0 ||
        res == NULL) {
        return UCS_ERR_INVALID_ADDR;
    }
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    *len = res->ai_addrlen;
    freeaddrinfo(res);
    return UCS_OK;
}

/* Creates a client-server endpoint to host:port (UCX's own connection
 * establishment over a socket address). UCX requires peer error-handling
 * mode on such endpoints, so detection is always on; peer_err is unused. */
ucs_status_t shim_ep_create_sockaddr(shim_worker_t *w, const char *host, uint16_t port,
                                     int peer_err, ucp_ep_h *ep)
{
    struct sockaddr_storage ss;
    socklen_t               len;
    ucs_status_t            st = resolve(host, port, 0, &ss, &len);
    if (st != UCS_OK) {
        return st;
    }
    ucp_ep_params_t p;
    memset(&p, 0, sizeof(p));
    p.field_mask       = UCP_EP_PARAM_FIELD_SOCK_ADDR | UCP_EP_PARAM_FIELD_FLAGS;
    p.flags            = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
    p.sockaddr.addr    = (struct sockaddr*)&ss;
    p.sockaddr.addrlen = len;
    set_err_mode(w, &p, 1); /* client-server endpoints require peer mode */
    (void)peer_err;
    return ucp_ep_create(w->worker, &p, ep);
}

/* Accepts a connection request recorded by shim_conn_cb: creates the
 * server's endpoint from it, with peer error handling like every
 * client-server endpoint. */
ucs_status_t shim_ep_create_conn(shim_worker_t *w, void *conn_req, int peer_err,
                                 ucp_ep_h *ep)
{
    ucp_ep_params_t p;
    memset(&p, 0, sizeof(p));
    p.field_mask   = UCP_EP_PARAM_FIELD_CONN_REQUEST;
    p.conn_request = conn_req;
    set_err_mode(w, &p, 1);
    (void)peer_err;
    return ucp_ep_create(w->worker, &p, ep);
}

/* Creates a UCX listener on host:port whose connection requests become
 * events tagged with `token` (shim_conn_cb). The callback context is
 * returned in *ctx_out for Go to free after ucp_listener_destroy. With port
 * 0 the kernel chooses; *bound_port is read back from the listener. */
ucs_status_t shim_listener_create(shim_worker_t *w, const char *host, uint16_t port,
                                  uint64_t token, ucp_listener_h *listener,
                                  uint16_t *bound_port, void **ctx_out)
{
    struct sockaddr_storage ss;
    socklen_t               len;
    ucs_status_t            st = resolve(host, port, 1, &ss, &len);
    if (st != UCS_OK) {
        return st;
    }
    shim_listener_ctx_t *ctx = calloc(1, sizeof(*ctx));
    if (ctx == NULL) {
        return UCS_ERR_NO_MEMORY;
    }
    ctx->w     = w;
    ctx->token = token;
    ucp_listener_params_t p;
    memset(&p, 0, sizeof(p));
    p.field_mask       = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR |
                         UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
    p.sockaddr.addr    = (struct sockaddr*)&ss;
    p.sockaddr.addrlen = len;
    p.conn_handler.cb  = shim_conn_cb;
    p.conn_handler.arg = ctx;
    st = ucp_listener_create(w->worker, &p, listener);
    if (st != UCS_OK) {
        free(ctx);
        return st;
    }
    ctx->listener = *listener;
    ucp_listener_attr_t attr;
    memset(&attr, 0, sizeof(attr));
    attr.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
    *bound_port     = port;
    if (ucp_listener_query(*listener, &attr) == UCS_OK) {
        if (attr.sockaddr.ss_family == AF_INET) {
            *bound_port = ntohs(((struct sockaddr_in*)&attr.sockaddr)->sin_port);
        } else if (attr.sockaddr.ss_family == AF_INET6) {
            *bound_port = ntohs(((struct sockaddr_in6*)&attr.sockaddr)->sin6_port);
        }
    }
    *ctx_out = ctx;
    return UCS_OK;
}

/* Sleeps until the worker has work (Worker.Wait): ucp_worker_arm, then poll
 * the worker's event fd. UCS_ERR_BUSY from arm means events are already
 * pending, so it returns 1 at once without sleeping. A ucp_worker_signal
 * from another thread (Worker.Wake) makes the fd readable. Arm and poll are
 * one crossing; Go issues queued operations first (Worker.submit). */
int shim_wait(shim_worker_t *w, int timeout_ms)
{
    if (off_thread(w)) {
        return 0;
    }
    if (w->efd < 0) {
        return -(int)UCS_ERR_UNSUPPORTED;
    }
    ucs_status_t st = ucp_worker_arm(w->worker);
    if (st == UCS_ERR_BUSY) {
        return 1;
    }
    if (st != UCS_OK) {
        return st;
    }
    struct pollfd pfd = {.fd = w->efd, .events = POLLIN};
    int           r   = poll(&pfd, 1, timeout_ms);
    if (r < 0) {
        return errno == EINTR ? 1 : (int)UCS_ERR_IO_ERROR;
    }
    return r > 0 ? 1 : 0;
}

/* Creates the UCP context: reads the UCX_* environment (ucp_config_read),
 * applies the caller's overrides (ucp_config_modify, names without UCX_),
 * and initialises it with the requested features. mt_workers_shared: the
 * context is shared by workers on different threads (one per dpu worker,
 * initiator, target), each worker itself single-threaded. */
ucs_status_t shim_context_create(uint64_t features, const char **keys,
                                 const char **values, int n, ucp_context_h *ctx)
{
    ucp_config_t *cfg;
    ucs_status_t  st = ucp_config_read(NULL, NULL, &cfg);
    if (st != UCS_OK) {
        return st;
    }
    for (int i = 0; i < n; i++) {
        st = ucp_config_modify(cfg, keys[i], values[i]);
        if (st != UCS_OK) {
            ucp_config_release(cfg);
            return st;
        }
    }
    ucp_params_t p;
    memset(&p, 0, sizeof(p));
    p.field_mask        = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
    p.features          = features;
    p.mt_workers_shared = 1;
    st = ucp_init(&p, cfg, ctx);
    ucp_config_release(cfg);
    return st;
}

/* UCX's diagnostic printers write to a FILE*; this collects their output in
 * a malloc'd string (freed by Go) for the *_info functions below. */
#define PRINT_TO_STRING(call)                 \
    char  *buf = NULL;                        \
    size_t len = 0;                           \
    FILE  *f   = open_memstream(&buf, &len);  \
    if (f == NULL) {                          \
        return NULL;                          \
    }                                         \
    call;                                     \
    fclose(f);                                \
    return buf

/* ucp_context_print_info as a string (Context.Info: transports, devices). */
char *shim_context_info(ucp_context_h ctx)
{
    PRINT_TO_STRING(ucp_context_print_info(ctx, f));
}

/* ucp_ep_print_info as a string (Endpoint.Info: the lanes UCX chose). */
char *shim_ep_info(ucp_ep_h ep)
{
    PRINT_TO_STRING(ucp_ep_print_info(ep, f));
}

/* ucp_worker_print_info as a string (Worker.Info). */
char *shim_worker_info(ucp_worker_h w)
{
    PRINT_TO_STRING(ucp_worker_print_info(w, f));
}

/* Registers memory with UCX (ucp_mem_map): the caller's range, or, with
 * allocate, memory UCX allocates. Then queries the handle for the actual
 * address and length (UCX may round an allocation up), which Go exposes as
 * Memory's bytes. */
ucs_status_t shim_mem_map(ucp_context_h ctx, void *addr, size_t len, int allocate,
                          ucp_mem_h *memh, void **addr_out, size_t *len_out)
{
    ucp_mem_map_params_t p;
    memset(&p, 0, sizeof(p));
    p.field_mask = UCP_MEM_MAP_PARAM_FIELD_LENGTH | UCP_MEM_MAP_PARAM_FIELD_FLAGS;
    p.length     = len;
    if (allocate) {
        p.flags = UCP_MEM_MAP_ALLOCATE;
    } else {
        p.field_mask |= UCP_MEM_MAP_PARAM_FIELD_ADDRESS;
        p.address     = addr;
    }
    ucs_status_t st = ucp_mem_map(ctx, &p, memh);
    if (st != UCS_OK) {
        return st;
    }
    ucp_mem_attr_t attr;
    memset(&attr, 0, sizeof(attr));
    attr.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH;
    st = ucp_mem_query(*memh, &attr);
    if (st != UCS_OK) {
        ucp_mem_unmap(ctx, *memh);
        return st;
    }
    *addr_out = attr.address;
    *len_out  = attr.length;
    return UCS_OK;
}

/* Packs a remote key for a registered range (ucp_rkey_pack): the bytes a
 * target sends (MR_REG) so a worker can reach its memory. */
ucs_status_t shim_rkey_pack(ucp_context_h ctx, ucp_mem_h memh, void **buf, size_t *len)
{
    return ucp_rkey_pack(ctx, memh, buf, len);
}

#if UCP_API_VERSION >= UCP_VERSION(1, 14)
/* Whether this libucp's headers have exported memory handles (UCX >= 1.14):
 * Go reports ErrNotSupported for PackExported otherwise. */
int shim_have_exported_memh(void)
{
    return 1;
}

/* Packs a memory handle for export (ucp_memh_pack with
 * UCP_MEMH_PACK_FLAG_EXPORT), so another process can import it. */
ucs_status_t shim_memh_pack(ucp_context_h ctx, ucp_mem_h memh, void **buf, size_t *len)
{
    ucp_memh_pack_params_t p;
    (void)ctx;
    memset(&p, 0, sizeof(p));
    p.field_mask = UCP_MEMH_PACK_PARAM_FIELD_FLAGS;
    p.flags      = UCP_MEMH_PACK_FLAG_EXPORT;
    return ucp_memh_pack(memh, &p, buf, len);
}

/* Frees a buffer returned by shim_memh_pack. */
void shim_memh_buffer_release(void *buf)
{
    ucp_memh_buffer_release_params_t p;
    memset(&p, 0, sizeof(p));
    ucp_memh_buffer_release(buf, &p);
}
#else
/* Headers older than UCX 1.14: no exported memory handles; the stubs keep
 * the Go side version-independent. */
int shim_have_exported_memh(void)
{
    return 0;
}

ucs_status_t shim_memh_pack(ucp_context_h ctx, ucp_mem_h memh, void **buf, size_t *len)
{
    (void)ctx;
    (void)memh;
    (void)buf;
    (void)len;
    return UCS_ERR_UNSUPPORTED;
}

void shim_memh_buffer_release(void *buf)
{
    (void)buf;
}
#endif
