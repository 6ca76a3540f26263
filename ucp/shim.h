/*
 * C side of the ucp bindings.
 *
 * UCX calls back into the application for every completion, every arriving
 * active message and every endpoint error. A C->Go callback costs far more
 * than UCX's own per-message work, so none of those callbacks reach Go: they
 * append a fixed-size record to a per-worker event array (and, for message
 * headers, a byte arena). Go makes one cgo call per progress round
 * (shim_progress) and then reads the whole batch straight out of C memory.
 *
 * Outgoing work is batch-shaped too: Go writes operation descriptors into a
 * C-allocated array and one cgo call (shim_submit) issues them all.
 *
 * Operands and results of in-flight operations (atomic operands, fetched
 * values, received lengths) live in a fixed slot table in C memory, indexed
 * by the operation's token, so they never move while UCX holds them.
 */
#ifndef RDMO_UCP_SHIM_H
#define RDMO_UCP_SHIM_H

#include <pthread.h>
#include <stdint.h>
#include <stddef.h>
#include <ucp/api/ucp.h>

/* Event kinds recorded by callbacks. */
enum {
    SHIM_EV_COMPLETE   = 1, /* an operation finished: token, status, length */
    SHIM_EV_AM         = 2, /* an active message arrived                      */
    SHIM_EV_EP_ERROR   = 3, /* an endpoint failed: ep, status                 */
    SHIM_EV_CONN_REQ   = 4  /* a listener got a connection request            */
};

/* Flags of an SHIM_EV_AM event. */
enum {
    SHIM_AM_DATA_PERSISTENT = 1 << 0, /* data stays valid until released  */
    SHIM_AM_DATA_RNDV       = 1 << 1, /* data is a rendezvous descriptor  */
    SHIM_AM_DATA_COPIED     = 1 << 2, /* data was copied into the arena   */
    SHIM_AM_HAS_REPLY_EP    = 1 << 3  /* reply_ep is valid                */
};

typedef struct shim_event {
    uint32_t kind;
    int32_t  status;      /* ucs_status_t */
    uint64_t token;       /* completion token, or listener token      */
    uint32_t am_id;
    uint32_t am_flags;
    uint32_t header_len;
    uint32_t header_off;  /* offset of the header copy in the arena   */
    void    *data;        /* AM data or rendezvous descriptor          */
    uint64_t data_off;    /* SHIM_AM_DATA_COPIED: offset in the arena.
                             Never in data: Go reads data as a pointer,
                             and a pointer-typed value below 4096 on a
                             goroutine's stack makes the runtime throw
                             ("invalid pointer found on stack") when it
                             copies the stack.                          */
    uint64_t length;      /* AM data length, or received length        */
    void    *ep;          /* reply ep, failed ep, or conn request      */
} shim_event_t;

/* Operation kinds for shim_submit. */
enum {
    SHIM_OP_AM_SEND   = 1,
    SHIM_OP_PUT       = 2,
    SHIM_OP_GET       = 3,
    SHIM_OP_ATOMIC    = 4,
    SHIM_OP_EP_FLUSH  = 5,
    SHIM_OP_AM_RECV   = 6, /* receive rendezvous data into buffer */
    SHIM_OP_WORKER_FLUSH = 7,
    SHIM_OP_EP_CLOSE  = 8,
    SHIM_OP_NOP       = 9  /* completes in place: a completion in order */
};

/* Results written into shim_op.result by shim_submit. */
enum {
    SHIM_RES_PENDING   = 1, /* a SHIM_EV_COMPLETE event will follow        */
    SHIM_RES_DONE      = 0  /* finished in place; status holds the outcome */
};

typedef struct shim_op {
    uint32_t kind;
    uint32_t flags;       /* AM send flags, close flags                 */
    uint32_t am_id;
    uint32_t atomic_op;   /* ucp_atomic_op_t                           */
    uint64_t token;       /* slot index                                 */
    void    *ep;
    void    *header;
    uint64_t header_len;
    void    *buffer;      /* local buffer                               */
    void    *desc;        /* AM data descriptor (SHIM_OP_AM_RECV)       */
    uint64_t length;
    uint64_t raddr;
    void    *rkey;
    uint64_t value;       /* atomic operand                             */
    uint64_t compare;     /* compare-and-swap: expected value           */
    /* out */
    int32_t  result;      /* SHIM_RES_*                                 */
    int32_t  status;      /* ucs_status_t when result == DONE          */
} shim_op_t;

/* Per-token storage that must not move while UCX holds it. */
typedef struct shim_worker shim_worker_t;

/* Arriving payloads up to this size are copied into the worker's arena and
 * their UCX buffer is returned at once: cheaper than keeping a descriptor
 * and releasing it later. */
#define SHIM_COPY_MAX 1024

/* A ucp_worker_progress call that adds fewer events than this ends
 * shim_progress's round at once (a conversation's turn); more keep it
 * draining up to its budget (a stream). */
#define SHIM_TURN_EVENTS 4

/* Small sends and puts are copied here instead of pinning Go memory. */
#define SHIM_INLINE 256

typedef struct shim_slot {
    uint64_t       operand;
    uint64_t       reply;
    shim_worker_t *w;
    void          *req;       /* the UCX request while it is pending       */
    uint32_t       abandoned; /* freed by shim_abandon_pending: ignore it */
    uint32_t       pad;
    uint8_t        inl[SHIM_INLINE];
} shim_slot_t;

/* Atomic kinds for shim_op.atomic_op. */
enum {
    SHIM_AMO_ADD   = 0, /* post, no result */
    SHIM_AMO_FADD  = 1,
    SHIM_AMO_SWAP  = 2,
    SHIM_AMO_CSWAP = 3
};

#define SHIM_MAX_AM_ID 256

typedef struct shim_am_ctx {
    shim_worker_t *w;
    uint32_t       id;
} shim_am_ctx_t;

typedef struct shim_listener_ctx {
    shim_worker_t *w;
    uint64_t       token;
    ucp_listener_h listener;
} shim_listener_ctx_t;

struct shim_worker {
    ucp_worker_h  worker;
    shim_am_ctx_t *am[SHIM_MAX_AM_ID];
    shim_event_t *events;
    uint32_t      nevents;
    uint32_t      busy;         /* ucp_worker_progress calls of the last
                                   round that did work, ours or UCX's own */
    uint32_t      events_cap;
    uint8_t      *arena;
    uint64_t      arena_len;
    uint64_t      arena_cap;
    uint32_t      dropped;      /* events lost to allocation failure */
    shim_slot_t  *slots;
    uint32_t      nslots;
    shim_op_t    *ops;          /* submit scratch, owned by Go        */
    uint32_t      ops_cap;
    int           efd;
    pthread_t     owner;        /* the thread that created the worker */
    int           serialized;   /* UCS_THREAD_MODE_SERIALIZED: no owner */
    int32_t       wrong_tid;    /* set when the thread check failed   */
};

shim_worker_t *shim_worker_new(ucp_worker_h worker, uint32_t nslots, uint32_t ops_cap);
void           shim_worker_free(shim_worker_t *w);

/* One crossing per round: issue ops[0..nops), release the given AM data
 * descriptors, then progress the worker until it reports no more work,
 * a call adds fewer than SHIM_TURN_EVENTS events (a conversation's turn),
 * or `budget` rounds pass. Returns the number of events now recorded (the
 * previous round's events and arena are discarded first). */
uint32_t shim_progress(shim_worker_t *w, uint32_t nops, const uintptr_t *release,
                       uint32_t nrelease, uint32_t budget);

/* Issue ops[0..n) in order. Each op's result/status is filled in. */
void shim_submit(shim_worker_t *w, uint32_t n);

/* Owner-thread check of shim_progress, shim_submit and shim_wait: while it is
 * on, a call from a thread other than the one that made the worker touches
 * nothing and records the caller's thread id in w->wrong_tid (progress
 * returns 0, wait returns 0). Off by default; costs a pthread_self. */
void shim_set_thread_check(int on);

/* Releases every request still pending (before ucp_worker_destroy, which
 * asserts that requests were released); their late callbacks are ignored. */
void shim_abandon_pending(shim_worker_t *w);

/* The data path's two crossings, taking the worker as an integer. cgo
 * checks at run time every pointer argument whose C type holds pointers
 * (cgocheck: a lookup in Go's heap per argument), and shim_worker_t holds
 * some; the worker is C memory, so a check can never find it in Go's
 * heap. Passed as an integer it is not checked: measured at a twentieth
 * of the worker's samples on a stream of small requests. */
static inline uint32_t shim_progress_h(uintptr_t w, uint32_t nops, const uintptr_t *release,
                                       uint32_t nrelease, uint32_t budget)
{
    return shim_progress((shim_worker_t *)w, nops, release, nrelease, budget);
}
static inline void shim_submit_h(uintptr_t w, uint32_t n)
{
    shim_submit((shim_worker_t *)w, n);
}

ucs_status_t shim_set_am_handler(shim_worker_t *w, uint16_t id);
ucs_status_t shim_clear_am_handler(shim_worker_t *w, uint16_t id);

/* mode: 0 no peer-failure detection, 1 prefer it (fall back quietly when no
 * transport to the peer supports it), 2 require it. *detect reports the
 * mode the endpoint got. */
ucs_status_t shim_ep_create_addr(shim_worker_t *w, const void *addr, int mode,
                                 ucp_ep_h *ep, int *detect);
int  shim_log_level(void);
void shim_set_log_level(int level);
ucs_status_t shim_ep_create_sockaddr(shim_worker_t *w, const char *host, uint16_t port,
                                     int peer_err, ucp_ep_h *ep);
ucs_status_t shim_ep_create_conn(shim_worker_t *w, void *conn_req, int peer_err,
                                 ucp_ep_h *ep);
ucs_status_t shim_listener_create(shim_worker_t *w, const char *host, uint16_t port,
                                  uint64_t token, ucp_listener_h *listener,
                                  uint16_t *bound_port, void **ctx);

/* Block until the worker has something to do or timeout_ms passes (-1: no
 * limit). Returns 1 when woken by an event, 0 on timeout, <0 on error. */
int shim_wait(shim_worker_t *w, int timeout_ms);

ucs_status_t shim_context_create(uint64_t features, const char **keys,
                                 const char **values, int n, ucp_context_h *ctx);
char *shim_context_info(ucp_context_h ctx);
char *shim_ep_info(ucp_ep_h ep);
char *shim_worker_info(ucp_worker_h w);

ucs_status_t shim_mem_map(ucp_context_h ctx, void *addr, size_t len, int allocate,
                          ucp_mem_h *memh, void **addr_out, size_t *len_out);
ucs_status_t shim_rkey_pack(ucp_context_h ctx, ucp_mem_h memh, void **buf, size_t *len);
ucs_status_t shim_memh_pack(ucp_context_h ctx, ucp_mem_h memh, void **buf, size_t *len);
void         shim_memh_buffer_release(void *buf);
int          shim_have_exported_memh(void);

#endif
