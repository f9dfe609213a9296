/*
 * test_rdma_mw.c - can per-lease memory windows (type 2) narrow what an
 * RDMA peer reaches, on the soft-RoCE of the VM, and what do they cost?
 * (docs/SECURITY.md "Memory windows: evaluation".) Plain verbs, no kvbatch
 * code: a "server" and a "client" connected over rdma_cm in one process.
 *
 *   - the device must announce type 2 windows (IBV_DEVICE_MEM_WINDOW_TYPE_2A
 *     or 2B); if not, the test says so and skips;
 *   - the region is registered with IBV_ACCESS_MW_BIND only (no remote
 *     access of its own): READ with the region's rkey fails;
 *   - a window bound to one 4 KiB slot: READ inside it works; READ with its
 *     rkey from another queue pair fails (type 2 windows belong to the QP
 *     they were bound on); READ after IBV_WR_LOCAL_INV fails;
 *   - READ of the next slot (inside the region, outside the window) with
 *     the window's rkey: printed, not asserted. Soft-RoCE does not enforce
 *     a window's bounds (rxe check_rkey checks the range against the
 *     window's MR only), so there it succeeds; hardware that enforces them
 *     fails it.
 *   - figures (printed, not asserted: the VM is emulated and loaded): time
 *     per bind + invalidate pair on the server's QP, next to one 4 KiB READ
 *     round trip by the client.
 * Each failing access leaves the client's QP in error, so each has its own
 * connection.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <rdma/rdma_cma.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "clock.h"

#define SLOT     4096
#define NSLOTS   4
#define WAIT_S   15
#define ROUNDS   200
#define LOCALBUF (2 * SLOT)

static const char *host;
static char port[8];
static struct rdma_event_channel *lec; /* listener */
static struct rdma_cm_id *lid;
static struct ibv_pd *spd; /* the server's PD: region, windows, QPs */
static uint8_t *region;
static struct ibv_mr *region_mr; /* IBV_ACCESS_MW_BIND, no remote access */
static int mw_supported;

struct pair {
    struct rdma_event_channel *cec;
    struct rdma_cm_id *cid, *sid;
    struct ibv_pd *cpd;
    struct ibv_cq *ccq, *scq;
    uint8_t *cbuf;
    struct ibv_mr *cmr;
};

/* Seconds on the monotonic clock. */
static double now_s(void)
{
    return (double)kvs_now_ns() / 1e9;
}

static void nonblock(int fd)
{
    assert_int_equal(fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK), 0);
}

/* The next CM event on ec (bounded wait); its type, its id in *id. */
static int next_event(struct rdma_event_channel *ec, struct rdma_cm_id **id,
                      struct rdma_conn_param *param)
{
    double end = now_s() + WAIT_S;
    while (now_s() < end) {
        struct rdma_cm_event *ev;
        if (rdma_get_cm_event(ec, &ev) == 0) {
            int type = ev->event;
            if (id) *id = ev->id;
            if (param) *param = ev->param.conn;
            rdma_ack_cm_event(ev);
            return type;
        }
        usleep(1000);
    }
    return -1;
}

/* Waits (bounded) for one completion on cq; its status, or -ETIMEDOUT. */
static int wait_wc(struct ibv_cq *cq)
{
    double end = now_s() + WAIT_S;
    while (now_s() < end) {
        struct ibv_wc wc;
        int n = ibv_poll_cq(cq, 1, &wc);
        assert_true(n >= 0);
        if (n == 1) return wc.status;
    }
    return -ETIMEDOUT;
}

static struct ibv_qp_init_attr qp_attr(struct ibv_cq *cq)
{
    return (struct ibv_qp_init_attr){
        .send_cq = cq,
        .recv_cq = cq,
        .qp_type = IBV_QPT_RC,
        .cap = {.max_send_wr = 64, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
}

/* A client QP connected to a server QP on spd. */
static struct pair *pair_connect(void)
{
    struct pair *p = calloc(1, sizeof(*p));
    assert_non_null(p);
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res;
    assert_int_equal(getaddrinfo(host, port, &hints, &res), 0);
    p->cec = rdma_create_event_channel();
    assert_non_null(p->cec);
    nonblock(p->cec->fd);
    assert_int_equal(rdma_create_id(p->cec, &p->cid, NULL, RDMA_PS_TCP), 0);
    assert_int_equal(rdma_resolve_addr(p->cid, NULL, res->ai_addr, 5000), 0);
    freeaddrinfo(res);
    assert_int_equal(next_event(p->cec, NULL, NULL), RDMA_CM_EVENT_ADDR_RESOLVED);
    assert_int_equal(rdma_resolve_route(p->cid, 5000), 0);
    assert_int_equal(next_event(p->cec, NULL, NULL), RDMA_CM_EVENT_ROUTE_RESOLVED);
    p->cpd = ibv_alloc_pd(p->cid->verbs);
    assert_non_null(p->cpd);
    p->ccq = ibv_create_cq(p->cid->verbs, 128, NULL, NULL, 0);
    assert_non_null(p->ccq);
    struct ibv_qp_init_attr qa = qp_attr(p->ccq);
    assert_int_equal(rdma_create_qp(p->cid, p->cpd, &qa), 0);
    p->cbuf = calloc(1, LOCALBUF);
    assert_non_null(p->cbuf);
    p->cmr = ibv_reg_mr(p->cpd, p->cbuf, LOCALBUF, IBV_ACCESS_LOCAL_WRITE);
    assert_non_null(p->cmr);
    struct rdma_conn_param cp = {.initiator_depth = 1, .retry_count = 7, .rnr_retry_count = 7};
    assert_int_equal(rdma_connect(p->cid, &cp), 0);

    struct rdma_conn_param req;
    assert_int_equal(next_event(lec, &p->sid, &req), RDMA_CM_EVENT_CONNECT_REQUEST);
    if (!spd) {
        spd = ibv_alloc_pd(p->sid->verbs);
        assert_non_null(spd);
    }
    p->scq = ibv_create_cq(p->sid->verbs, 128, NULL, NULL, 0);
    assert_non_null(p->scq);
    qa = qp_attr(p->scq);
    assert_int_equal(rdma_create_qp(p->sid, spd, &qa), 0);
    struct rdma_conn_param sp = {.responder_resources = 1, .rnr_retry_count = 7};
    assert_int_equal(rdma_accept(p->sid, &sp), 0);
    assert_int_equal(next_event(p->cec, NULL, NULL), RDMA_CM_EVENT_ESTABLISHED);
    assert_int_equal(next_event(lec, NULL, NULL), RDMA_CM_EVENT_ESTABLISHED);
    return p;
}

static void pair_close(struct pair *p)
{
    rdma_disconnect(p->cid);
    rdma_destroy_qp(p->cid);
    rdma_destroy_qp(p->sid);
    ibv_dereg_mr(p->cmr);
    ibv_destroy_cq(p->ccq);
    ibv_destroy_cq(p->scq);
    ibv_dealloc_pd(p->cpd);
    rdma_destroy_id(p->cid);
    rdma_destroy_id(p->sid);
    rdma_destroy_event_channel(p->cec);
    free(p->cbuf);
    free(p);
    /* The listener's channel gets DISCONNECTED / TIMEWAIT_EXIT for sid: drain it. */
    struct rdma_cm_event *ev;
    while (rdma_get_cm_event(lec, &ev) == 0)
        rdma_ack_cm_event(ev);
}

/* The client READs len bytes at raddr with rkey; the completion's status. */
static int client_read(struct pair *p, uint64_t raddr, uint32_t rkey, uint32_t len)
{
    struct ibv_sge sge = {.addr = (uintptr_t)p->cbuf, .length = len, .lkey = p->cmr->lkey};
    struct ibv_send_wr wr = {.wr_id = 1,
                             .sg_list = &sge,
                             .num_sge = 1,
                             .opcode = IBV_WR_RDMA_READ,
                             .send_flags = IBV_SEND_SIGNALED,
                             .wr.rdma = {.remote_addr = raddr, .rkey = rkey}},
                       *bad;
    assert_int_equal(ibv_post_send(p->cid->qp, &wr, &bad), 0);
    return wait_wc(p->ccq);
}

/* Binds mw to slot i (read-only) on the server's QP; the new rkey. */
static uint32_t bind_slot(struct pair *p, struct ibv_mw *mw, int i)
{
    uint32_t rkey = ibv_inc_rkey(mw->rkey);
    struct ibv_send_wr wr = {.wr_id = 2, .opcode = IBV_WR_BIND_MW, .send_flags = IBV_SEND_SIGNALED},
                       *bad;
    wr.bind_mw.mw = mw;
    wr.bind_mw.rkey = rkey;
    wr.bind_mw.bind_info = (struct ibv_mw_bind_info){.mr = region_mr,
                                                     .addr = (uintptr_t)(region + i * SLOT),
                                                     .length = SLOT,
                                                     .mw_access_flags = IBV_ACCESS_REMOTE_READ};
    assert_int_equal(ibv_post_send(p->sid->qp, &wr, &bad), 0);
    assert_int_equal(wait_wc(p->scq), IBV_WC_SUCCESS);
    mw->rkey = rkey;
    return rkey;
}

static void invalidate(struct pair *p, struct ibv_mw *mw)
{
    struct ibv_send_wr wr = {.wr_id = 3,
                             .opcode = IBV_WR_LOCAL_INV,
                             .send_flags = IBV_SEND_SIGNALED,
                             .invalidate_rkey = mw->rkey},
                       *bad;
    assert_int_equal(ibv_post_send(p->sid->qp, &wr, &bad), 0);
    assert_int_equal(wait_wc(p->scq), IBV_WC_SUCCESS);
}

static int setup(void **state)
{
    (void)state;
    host = getenv("KVS_RDMA_ADDR_A");
    if (!host) {
        fprintf(stderr, "test_rdma_mw: KVS_RDMA_ADDR_A not set: run inside scripts/rxe-vm.sh\n");
        return -1;
    }
    snprintf(port, sizeof(port), "%d", 20000 + (int)((getpid() + 11) % 20000));
    struct addrinfo hints = {.ai_family = AF_INET,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE},
                    *res;
    if (getaddrinfo(host, port, &hints, &res) != 0) return -1;
    lec = rdma_create_event_channel();
    if (!lec || rdma_create_id(lec, &lid, NULL, RDMA_PS_TCP) != 0 ||
        rdma_bind_addr(lid, res->ai_addr) != 0 || rdma_listen(lid, 8) != 0) {
        freeaddrinfo(res);
        return -1;
    }
    freeaddrinfo(res);
    fcntl(lec->fd, F_SETFL, fcntl(lec->fd, F_GETFL) | O_NONBLOCK);
    struct ibv_device_attr da;
    if (ibv_query_device(lid->verbs, &da) != 0) return -1;
    mw_supported = (da.device_cap_flags &
                    (IBV_DEVICE_MEM_WINDOW_TYPE_2A | IBV_DEVICE_MEM_WINDOW_TYPE_2B)) != 0;
    fprintf(stderr, "# device %s: max_mw %d, MEM_WINDOW %d, TYPE_2A %d, TYPE_2B %d\n",
            ibv_get_device_name(lid->verbs->device), da.max_mw,
            !!(da.device_cap_flags & IBV_DEVICE_MEM_WINDOW),
            !!(da.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2A),
            !!(da.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B));
    region = aligned_alloc(4096, NSLOTS * SLOT);
    if (!region) return -1;
    for (int i = 0; i < NSLOTS * SLOT; i++)
        region[i] = (uint8_t)(i / SLOT + 1);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    if (region_mr) ibv_dereg_mr(region_mr);
    if (spd) ibv_dealloc_pd(spd);
    if (lid) rdma_destroy_id(lid);
    if (lec) rdma_destroy_event_channel(lec);
    free(region);
    return 0;
}

/* The first connection also registers the region (the PD comes from the server's id). */
static struct pair *connect_and_register(void)
{
    struct pair *p = pair_connect();
    if (!region_mr) {
        region_mr =
            ibv_reg_mr(spd, region, NSLOTS * SLOT, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
        assert_non_null(region_mr);
    }
    return p;
}

static void test_type2_window_properties(void **state)
{
    (void)state;
    if (!mw_supported) skip();
    struct pair *p = connect_and_register();
    struct ibv_mw *mw = ibv_alloc_mw(spd, IBV_MW_TYPE_2);
    assert_non_null(mw);
    uint32_t rkey = bind_slot(p, mw, 1);
    uint64_t slot1 = (uintptr_t)(region + SLOT), slot2 = slot1 + SLOT;
    assert_int_equal(client_read(p, slot1, rkey, SLOT), IBV_WC_SUCCESS);
    assert_int_equal(p->cbuf[0], 2);
    assert_int_equal(p->cbuf[SLOT - 1], 2);

    /* Figures: bind + invalidate on the server's QP vs one 4 KiB READ by the client. */
    double t0 = now_s();
    for (int i = 0; i < ROUNDS; i++) {
        invalidate(p, mw);
        rkey = bind_slot(p, mw, i % NSLOTS);
    }
    double t1 = now_s();
    for (int i = 0; i < ROUNDS; i++)
        assert_int_equal(client_read(p,
                                     (uintptr_t)(region + (size_t)((ROUNDS - 1) % NSLOTS) * SLOT),
                                     rkey, SLOT),
                         IBV_WC_SUCCESS);
    double t2 = now_s();
    fprintf(stderr, "# %d x (LOCAL_INV + BIND_MW), each waited for: %.1f us per pair\n", ROUNDS,
            (t1 - t0) * 1e6 / ROUNDS);
    fprintf(stderr, "# %d x 4 KiB READ through the window, each waited for: %.1f us per READ\n",
            ROUNDS, (t2 - t1) * 1e6 / ROUNDS);
    fprintf(stderr, "# ratio bind+inv / READ: %.2f\n", (t1 - t0) / (t2 - t1));
    pair_close(p);
    assert_int_equal(ibv_dealloc_mw(mw), 0);

    /* The next slot, through the window's rkey: outside the window, inside the region. */
    p = connect_and_register();
    mw =
        ibv_alloc_mw(spd, IBV_MW_TYPE_2); /* a fresh one: a bound type 2 window cannot be rebound */
    assert_non_null(mw);
    rkey = bind_slot(p, mw, 1);
    memset(p->cbuf, 0, SLOT);
    int st = client_read(p, slot2, rkey, SLOT);
    fprintf(stderr, "# READ of the next slot with the window's rkey: %s%s\n",
            st >= 0 ? ibv_wc_status_str(st) : strerror(-st),
            st == IBV_WC_SUCCESS && p->cbuf[0] == 3 ? " (window bounds NOT enforced)"
                                                    : " (window bounds enforced)");
    /* Another QP of the same PD cannot use the window's rkey. */
    struct pair *other = connect_and_register();
    st = client_read(other, slot1, rkey, SLOT);
    fprintf(stderr, "# READ with the window's rkey from another QP: %s\n",
            st >= 0 ? ibv_wc_status_str(st) : strerror(-st));
    assert_true(st != IBV_WC_SUCCESS);
    pair_close(other);
    pair_close(p);
    assert_int_equal(ibv_dealloc_mw(mw), 0);

    /* After LOCAL_INV the window's rkey is dead. */
    p = connect_and_register();
    mw = ibv_alloc_mw(spd, IBV_MW_TYPE_2);
    assert_non_null(mw);
    rkey = bind_slot(p, mw, 1);
    invalidate(p, mw);
    st = client_read(p, slot1, rkey, SLOT);
    fprintf(stderr, "# READ after LOCAL_INV: %s\n",
            st >= 0 ? ibv_wc_status_str(st) : strerror(-st));
    assert_true(st != IBV_WC_SUCCESS);
    pair_close(p);
    assert_int_equal(ibv_dealloc_mw(mw), 0);

    /* The region's own rkey gives nothing: it has no remote access. */
    p = connect_and_register();
    st = client_read(p, slot1, region_mr->rkey, SLOT);
    fprintf(stderr, "# READ with the region's own rkey: %s\n",
            st >= 0 ? ibv_wc_status_str(st) : strerror(-st));
    assert_true(st != IBV_WC_SUCCESS);
    pair_close(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_type2_window_properties),
    };
    return cmocka_run_group_tests_name("rdma_mw", tests, setup, teardown);
}
