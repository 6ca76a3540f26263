/*
 * doca_client.c: an RDMO initiator written the way NVIDIA DOCA 3.0's
 * urom_rdmo client is written (as docs/PROTOCOL.md describes it, "The
 * reference out-of-band exchange"), in plain C against libucp, for the
 * conformance test of this directory. It is not DOCA's code: it was
 * written in this repository from that description.
 *
 *   doca_client <server host> [<out-of-band port, default 18515>]
 *
 * What it does, like the reference client:
 *   - a UCP context with AM, RMA and 64-bit atomics; a single-threaded
 *     worker; an endpoint made from the RDMO worker's address with no
 *     other parameter (so no error-handling mode);
 *   - one TCP connection to the server; every step an exchange: write an
 *     8-byte host-order length and the bytes, then read the peer's;
 *   - (1) its worker address <-> the RDMO worker's address;
 *     (2) nothing <-> {u64 region id, u64 address of the queue's tail};
 *     append 8 bytes of 0x33 (client id 0), fenced FLUSH 0xbeef, wait for
 *     the reply on AM id 0; (3) empty <-> empty (barrier); scatter 16
 *     chunks of 8 bytes of 0x33 to base, base+8, ... (over the tail word),
 *     fenced FLUSH 0xbeef, wait for the reply.
 *   - every request with UCP_AM_SEND_FLAG_REPLY and client id 0.
 *
 * Where the reference is lax this client is not: it checks the flush
 * reply's response id and flush id (the reference takes any message for
 * the reply), bounds every wait, and, when the reply carries rdmo's
 * extension (32 bytes: failures since the previous flush), fails if it
 * reports any.
 *
 * Exit status 0 when both flushes were answered; 1 with one line on
 * stderr otherwise.
 *
 * For negative tests only, DOCA_CLIENT_BYTE (e.g. 0x34) replaces the 0x33
 * the demo writes, so the server's checks must fail.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <ucp/api/ucp.h>

#define MAX_OOB_LEN   1024
#define FLUSH_ID      0xbeefULL
#define OP_FLUSH      0
#define OP_APPEND     1
#define OP_SCATTER    2
#define FLAG_FENCE    1u
#define WAIT_SECONDS  30

/* The reference's request header (natural alignment, little-endian). */
struct rdmo_hdr {
    uint64_t id; /* client id: the reference writes 0 */
    uint32_t op_id;
    uint32_t flags;
};

struct rdmo_append_hdr {
    uint64_t ptr_addr;
    uint64_t ptr_rkey;
    uint64_t data_rkey;
};

struct rdmo_flush_hdr {
    uint64_t flush_id;
};

struct rdmo_scatter_hdr {
    uint64_t count;
};

struct rdmo_scatter_iov {
    uint64_t addr;
    uint64_t rkey;
    uint16_t len;
}; /* sizeof 24: 18 bytes and 6 of padding */

static int      replies;      /* flush replies received */
static uint32_t reply_rsp_id; /* of the last one */
static uint64_t reply_flush_id;
static uint32_t reply_failed;
static int      reply_len;

static void die(const char *fmt, const char *detail)
{
    fprintf(stderr, "doca_client: ");
    fprintf(stderr, fmt, detail);
    fprintf(stderr, "\n");
    exit(1);
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            die("out-of-band write: %s", strerror(errno));
        }
        p += n;
        len -= (size_t)n;
    }
}

static void read_all(int fd, void *buf, size_t len)
{
    char *p = buf;
    while (len > 0) {
        ssize_t n = read(fd, p, len);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n == 0) {
            die("out-of-band read: %s", "the server closed the connection");
        }
        if (n < 0) {
            die("out-of-band read: %s", strerror(errno));
        }
        p += n;
        len -= (size_t)n;
    }
}

/* One exchange: write our length and bytes, then read the peer's. */
static size_t exchange(int fd, const void *out, size_t out_len, void *in, size_t in_cap)
{
    size_t len = out_len;
    write_all(fd, &len, sizeof(len));
    if (out_len > 0) {
        write_all(fd, out, out_len);
    }
    read_all(fd, &len, sizeof(len));
    if (len > MAX_OOB_LEN || len > in_cap) {
        die("out-of-band exchange: %s", "the server's message is too long");
    }
    if (len > 0) {
        read_all(fd, in, len);
    }
    return len;
}

static int oob_connect(const char *host, const char *port)
{
    struct addrinfo hints, *res, *ai;
    int             fd = -1, rc;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family   = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    rc = getaddrinfo(host, port, &hints, &res);
    if (rc != 0) {
        die("resolving the server: %s", gai_strerror(rc));
    }
    /* The server may still be starting: retry for a while. */
    for (double end = now() + WAIT_SECONDS; fd < 0 && now() < end;) {
        for (ai = res; ai != NULL; ai = ai->ai_next) {
            fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
            if (fd < 0) {
                continue;
            }
            if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
                break;
            }
            close(fd);
            fd = -1;
        }
        if (fd < 0) {
            usleep(100 * 1000);
        }
    }
    freeaddrinfo(res);
    if (fd < 0) {
        die("cannot connect to the server: %s", strerror(errno));
    }
    return fd;
}

/* The responses arrive on AM id 0; the flush response is in the header. */
static ucs_status_t on_reply(void *arg, const void *header, size_t header_length, void *data,
                             size_t length, const ucp_am_recv_param_t *param)
{
    (void)arg;
    (void)data;
    (void)length;
    (void)param;
    reply_len = (int)header_length;
    if (header_length >= 12) {
        memcpy(&reply_rsp_id, header, 4);
        memcpy(&reply_flush_id, (const char*)header + 4, 8);
    }
    reply_failed = 0;
    if (header_length >= 32) {
        memcpy(&reply_failed, (const char*)header + 12, 4); /* rdmo's extension */
    }
    replies++;
    return UCS_OK;
}

static void wait_request(ucp_worker_h worker, ucs_status_ptr_t req, const char *what)
{
    double end = now() + WAIT_SECONDS;
    if (req == NULL) {
        return;
    }
    if (UCS_PTR_IS_ERR(req)) {
        die("%s failed", what);
    }
    while (ucp_request_check_status(req) == UCS_INPROGRESS) {
        ucp_worker_progress(worker);
        if (now() > end) {
            die("%s did not complete", what);
        }
    }
    if (ucp_request_check_status(req) != UCS_OK) {
        die("%s failed", what);
    }
    ucp_request_free(req);
}

static void send_request(ucp_worker_h worker, ucp_ep_h ep, const void *hdr, size_t hdr_len,
                         const void *data, size_t len, const char *what)
{
    ucp_request_param_t param;
    memset(&param, 0, sizeof(param));
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags        = UCP_AM_SEND_FLAG_REPLY;
    wait_request(worker, ucp_am_send_nbx(ep, 0, hdr, hdr_len, data, len, &param), what);
}

static void flush(ucp_worker_h worker, ucp_ep_h ep, const char *what)
{
    struct {
        struct rdmo_hdr       h;
        struct rdmo_flush_hdr f;
    } req;
    int    before = replies;
    double end;
    memset(&req, 0, sizeof(req));
    req.h.op_id   = OP_FLUSH;
    req.h.flags   = FLAG_FENCE;
    req.f.flush_id = FLUSH_ID;
    send_request(worker, ep, &req, sizeof(req), NULL, 0, what);
    for (end = now() + WAIT_SECONDS; replies == before;) {
        ucp_worker_progress(worker);
        if (now() > end) {
            die("%s: no flush reply", what);
        }
    }
    if (reply_len < 12 || reply_rsp_id != OP_FLUSH || reply_flush_id != FLUSH_ID) {
        die("%s: the reply is not the flush response of flush 0xbeef", what);
    }
    if (reply_failed > 0) {
        fprintf(stderr, "doca_client: %s: the worker reports %u failed request(s)\n", what, reply_failed);
        exit(1);
    }
}

int main(int argc, char **argv)
{
    ucp_params_t         params;
    ucp_worker_params_t  wparams;
    ucp_am_handler_param_t am;
    ucp_ep_params_t      eparams;
    ucp_context_h        context;
    ucp_worker_h         worker;
    ucp_address_t       *addr;
    size_t               addr_len, n;
    ucp_ep_h             ep;
    unsigned char        remote[MAX_OOB_LEN];
    uint64_t             info[2];
    int                  fd, i;
    const char          *port = argc > 2 ? argv[2] : "18515";
    unsigned char        fill = 0x33;

    if (getenv("DOCA_CLIENT_BYTE") != NULL) {
        fill = (unsigned char)strtoul(getenv("DOCA_CLIENT_BYTE"), NULL, 0);
    }
    if (argc < 2) {
        fprintf(stderr, "usage: doca_client <server host> [<port>]\n");
        return 2;
    }

    memset(&params, 0, sizeof(params));
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features   = UCP_FEATURE_AM | UCP_FEATURE_RMA | UCP_FEATURE_AMO64;
    if (ucp_init(&params, NULL, &context) != UCS_OK) {
        die("%s", "ucp_init failed");
    }
    memset(&wparams, 0, sizeof(wparams));
    wparams.field_mask  = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wparams.thread_mode = UCS_THREAD_MODE_SINGLE;
    if (ucp_worker_create(context, &wparams, &worker) != UCS_OK) {
        die("%s", "ucp_worker_create failed");
    }
    if (ucp_worker_get_address(worker, &addr, &addr_len) != UCS_OK) {
        die("%s", "ucp_worker_get_address failed");
    }

    /* (1) our worker address <-> the RDMO worker's. */
    fd = oob_connect(argv[1], port);
    n  = exchange(fd, addr, addr_len, remote, sizeof(remote));
    if (n == 0) {
        die("%s", "the server sent no worker address");
    }
    memset(&eparams, 0, sizeof(eparams));
    eparams.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    eparams.address    = (const ucp_address_t*)remote;
    if (ucp_ep_create(worker, &eparams, &ep) != UCS_OK) {
        die("%s", "ucp_ep_create failed");
    }
    memset(&am, 0, sizeof(am));
    am.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                    UCP_AM_HANDLER_PARAM_FIELD_ARG;
    am.id         = 0;
    am.cb         = on_reply;
    am.arg        = NULL;
    if (ucp_worker_set_am_recv_handler(worker, &am) != UCS_OK) {
        die("%s", "ucp_worker_set_am_recv_handler failed");
    }

    /* (2) nothing <-> {region id, address of the tail word}. */
    if (exchange(fd, NULL, 0, info, sizeof(info)) != sizeof(info)) {
        die("%s", "the server's queue description is not 16 bytes");
    }
    {
        struct {
            struct rdmo_hdr        h;
            struct rdmo_append_hdr a;
        } req;
        unsigned char data[8];
        memset(&req, 0, sizeof(req));
        req.h.op_id     = OP_APPEND;
        req.a.ptr_addr  = info[1];
        req.a.ptr_rkey  = info[0];
        req.a.data_rkey = info[0];
        memset(data, fill, sizeof(data));
        send_request(worker, ep, &req, sizeof(req), data, sizeof(data), "append");
        flush(worker, ep, "append flush");
    }
    printf("doca_client: append of 8 bytes done and flushed\n");

    /* (3) barrier: the server checked the append and cleared the queue. */
    if (exchange(fd, NULL, 0, remote, sizeof(remote)) != 0) {
        die("%s", "the barrier message is not empty");
    }

    /* (4) 16 chunks of 8 bytes of 0x33 at base, base+8, ... */
    {
        struct {
            struct rdmo_hdr         h;
            struct rdmo_scatter_hdr s;
        } req;
        unsigned char payload[16 * (sizeof(struct rdmo_scatter_iov) + 8)];
        unsigned char *p = payload;
        memset(&req, 0, sizeof(req));
        req.h.op_id  = OP_SCATTER;
        req.s.count  = 16;
        for (i = 0; i < 16; i++) {
            struct rdmo_scatter_iov iov;
            memset(&iov, 0, sizeof(iov));
            iov.addr = info[1] + 8 * (uint64_t)i;
            iov.rkey = info[0];
            iov.len  = 8;
            memcpy(p, &iov, sizeof(iov));
            p += sizeof(iov);
            memset(p, fill, 8);
            p += 8;
        }
        send_request(worker, ep, &req, sizeof(req), payload, sizeof(payload), "scatter");
        flush(worker, ep, "scatter flush");
    }
    printf("doca_client: scatter of 16 chunks done and flushed\n");

    /* Tear down; like the reference, say nothing more to the server. */
    {
        ucp_request_param_t cp;
        memset(&cp, 0, sizeof(cp));
        /* flush mode: what is sent still leaves */
        wait_request(worker, ucp_ep_close_nbx(ep, &cp), "endpoint close");
    }
    close(fd);
    ucp_worker_release_address(worker, addr);
    ucp_worker_destroy(worker);
    ucp_cleanup(context);
    printf("doca_client: RDMO demo done\n");
    return 0;
}
