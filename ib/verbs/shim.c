//go:build linux && cgo

// shim.c: C helpers of package verbs; see shim.h for why they exist. Functions return 0 or a
// positive errno value unless stated otherwise.

#include <endian.h>
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <netinet/in.h>
#include <sys/stat.h>
#include <unistd.h>
#include <infiniband/ib.h>
#include "shim.h"

// struct sockaddr_ib as addr_ib.go reads and writes it.
_Static_assert(sizeof(struct sockaddr_ib) == 48, "sockaddr_ib size");
_Static_assert(offsetof(struct sockaddr_ib, sib_pkey) == 2, "sib_pkey");
_Static_assert(offsetof(struct sockaddr_ib, sib_flowinfo) == 4, "sib_flowinfo");
_Static_assert(offsetof(struct sockaddr_ib, sib_addr) == 8, "sib_addr");
_Static_assert(offsetof(struct sockaddr_ib, sib_sid) == 24, "sib_sid");
_Static_assert(offsetof(struct sockaddr_ib, sib_sid_mask) == 32, "sib_sid_mask");
_Static_assert(offsetof(struct sockaddr_ib, sib_scope_id) == 40, "sib_scope_id");
_Static_assert(AF_IB == 27, "AF_IB");
_Static_assert(sizeof(struct sockaddr_ib) <= SRPT_SOCKADDR_SIZE, "sockaddr_ib fits");

const int srpt_off_rdma_remote_addr = offsetof(struct ibv_send_wr, wr.rdma.remote_addr);
const int srpt_off_rdma_rkey = offsetof(struct ibv_send_wr, wr.rdma.rkey);
const int srpt_sizeof_send_wr = sizeof(struct ibv_send_wr);
const int srpt_sizeof_recv_wr = sizeof(struct ibv_recv_wr);
const int srpt_sizeof_sge = sizeof(struct ibv_sge);
const int srpt_sizeof_wc = sizeof(struct ibv_wc);

static int err_or(int fallback)
{
	return errno ? errno : fallback;
}

// cm_ret turns a librdmacm return value (0, or -1 with errno set, mostly) into 0 or an errno
// value; the caller clears errno before the call, so that a failure without one is EIO.
static int cm_ret(int ret)
{
	return ret ? err_or(EIO) : 0;
}

static void copy_sockaddr(uint8_t *dst, const struct sockaddr *sa)
{
	size_t n = 0;

	memset(dst, 0, SRPT_SOCKADDR_SIZE);
	if (!sa)
		return;
	switch (sa->sa_family) {
	case AF_INET:
		n = sizeof(struct sockaddr_in);
		break;
	case AF_INET6:
		n = sizeof(struct sockaddr_in6);
		break;
	case AF_IB:
		n = sizeof(struct sockaddr_ib);
		break;
	default:
		n = sizeof(sa->sa_family); // family only: the Go side reports it as unsupported
		break;
	}
	memcpy(dst, sa, n);
}

static socklen_t sockaddr_len(const uint8_t *sa)
{
	const struct sockaddr *s = (const struct sockaddr *)sa;

	switch (s->sa_family) {
	case AF_INET6:
		return sizeof(struct sockaddr_in6);
	case AF_IB:
		return sizeof(struct sockaddr_ib);
	}
	return sizeof(struct sockaddr_in);
}

int srpt_get_cm_event(struct rdma_event_channel *ch, struct srpt_cm_event *out)
{
	struct rdma_cm_event *ev;
	const struct rdma_conn_param *cp;

	errno = 0;
	if (rdma_get_cm_event(ch, &ev))
		return err_or(EIO);
	memset(out, 0, offsetof(struct srpt_cm_event, private_data));
	out->event = ev->event;
	out->status = ev->status;
	out->id = ev->id;
	out->key = (uint64_t)(uintptr_t)ev->id->context;
	if (ev->listen_id)
		out->listen_key = (uint64_t)(uintptr_t)ev->listen_id->context;
	if (ev->id->verbs)
		out->device = ev->id->verbs->device;
	switch (ev->event) {
	case RDMA_CM_EVENT_CONNECT_REQUEST:
	case RDMA_CM_EVENT_CONNECT_RESPONSE:
	case RDMA_CM_EVENT_ESTABLISHED:
	case RDMA_CM_EVENT_REJECTED:
	case RDMA_CM_EVENT_DISCONNECTED:
		cp = &ev->param.conn;
		out->responder_resources = cp->responder_resources;
		out->initiator_depth = cp->initiator_depth;
		out->rnr_retry_count = cp->rnr_retry_count;
		if (cp->private_data && cp->private_data_len) {
			out->private_data_len = cp->private_data_len;
			memcpy(out->private_data, cp->private_data, cp->private_data_len);
		}
		break;
	default:
		break;
	}
	if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
		copy_sockaddr(out->local, rdma_get_local_addr(ev->id));
		copy_sockaddr(out->peer, rdma_get_peer_addr(ev->id));
	}
	// Acknowledge at once: rdma_destroy_id waits for the events of its id to be acknowledged,
	// and nothing above is needed after this point.
	rdma_ack_cm_event(ev);
	return 0;
}

int srpt_create_id(struct rdma_event_channel *ch, uint64_t key, int ps, struct rdma_cm_id **out)
{
	errno = 0;
	return cm_ret(rdma_create_id(ch, out, (void *)(uintptr_t)key, (enum rdma_port_space)ps));
}

void srpt_set_key(struct rdma_cm_id *id, uint64_t key)
{
	id->context = (void *)(uintptr_t)key;
}

struct ibv_device *srpt_id_device(struct rdma_cm_id *id)
{
	return id->verbs ? id->verbs->device : NULL;
}

int srpt_bind(struct rdma_cm_id *id, const uint8_t *sa)
{
	errno = 0;
	return cm_ret(rdma_bind_addr(id, (struct sockaddr *)sa));
}

int srpt_resolve_addr(struct rdma_cm_id *id, const uint8_t *src, const uint8_t *dst, int timeout_ms)
{
	errno = 0;
	return cm_ret(rdma_resolve_addr(id, (struct sockaddr *)src, (struct sockaddr *)dst, timeout_ms));
}

void srpt_addrs(struct rdma_cm_id *id, uint8_t *local, uint8_t *peer)
{
	if (local)
		copy_sockaddr(local, rdma_get_local_addr(id));
	if (peer)
		copy_sockaddr(peer, rdma_get_peer_addr(id));
}

// conn_call makes rdma_accept's or rdma_connect's call (the same parameters) with the
// connection parameters of an RC connection.
static int conn_call(int (*call)(struct rdma_cm_id *, struct rdma_conn_param *), struct rdma_cm_id *id,
		     uint32_t qpn, const void *pd, uint8_t pdlen, uint8_t rr, uint8_t depth, uint8_t rnr)
{
	struct rdma_conn_param p;

	memset(&p, 0, sizeof(p));
	p.private_data = pdlen ? pd : NULL;
	p.private_data_len = pdlen;
	p.responder_resources = rr;
	p.initiator_depth = depth;
	p.flow_control = 1;
	p.retry_count = 7;
	p.rnr_retry_count = rnr;
	p.srq = 0;
	p.qp_num = qpn;
	errno = 0;
	return cm_ret(call(id, &p));
}

int srpt_accept(struct rdma_cm_id *id, uint32_t qpn, const void *pd, uint8_t pdlen,
		uint8_t rr, uint8_t depth, uint8_t rnr)
{
	return conn_call(rdma_accept, id, qpn, pd, pdlen, rr, depth, rnr);
}

int srpt_connect(struct rdma_cm_id *id, uint32_t qpn, const void *pd, uint8_t pdlen,
		 uint8_t rr, uint8_t depth, uint8_t rnr)
{
	return conn_call(rdma_connect, id, qpn, pd, pdlen, rr, depth, rnr);
}

int srpt_reject(struct rdma_cm_id *id, const void *pd, uint8_t pdlen)
{
	errno = 0;
	return cm_ret(rdma_reject(id, pdlen ? pd : NULL, pdlen));
}

// srpt_sync_devices makes librdmacm re-read the device list, so that it marks removed devices
// dead and closes its own verbs context of such a device once no rdma_cm_id uses it any more.
// Without this, librdmacm notices a removal only when a later lookup misses, and a device whose
// driver cannot disassociate user contexts (rxe) cannot finish unregistering meanwhile.
void srpt_sync_devices(void)
{
	int n = 0;
	struct ibv_context **l = rdma_get_devices(&n);

	if (l)
		rdma_free_devices(l);
}

// srpt_cma_ref records librdmacm's verbs context of id's device and the identity of its
// command file (fstat), for srpt_release_cma.
int srpt_cma_ref(struct rdma_cm_id *id, struct srpt_cma_ref *out)
{
	struct stat st;

	memset(out, 0, sizeof(*out));
	out->cmd_fd = -1;
	if (!id->verbs)
		return ENODEV;
	errno = 0;
	if (fstat(id->verbs->cmd_fd, &st))
		return err_or(EBADF);
	out->ctx = id->verbs;
	out->cmd_fd = id->verbs->cmd_fd;
	out->st_dev = st.st_dev;
	out->st_ino = st.st_ino;
	out->st_rdev = st.st_rdev;
	return 0;
}

// cma_open reports whether the recorded command file is still open under its number. librdmacm
// closes it only when it frees the context (ibv_close_device -> verbs_uninit_context), so while
// it is open the context is alive. A device's /dev/infiniband/uverbsN node is a new inode each
// time the device is registered, so another file under the same number does not match.
static int cma_open(const struct srpt_cma_ref *ref)
{
	struct stat st;

	if (ref->cmd_fd < 0 || fstat(ref->cmd_fd, &st))
		return 0;
	return st.st_dev == ref->st_dev && st.st_ino == ref->st_ino && st.st_rdev == ref->st_rdev;
}

// srpt_release_cma makes sure librdmacm's own verbs context of a removed device is closed, once
// libibverbs no longer lists the device (dev must be kept alive by an open context of the
// caller, so that the pointer cannot name another device). A driver that cannot disassociate
// user contexts (rxe) finishes unregistering only when every file of the device is closed,
// this one included, and librdmacm (rdma-core 44, librdmacm/cma.c) closes it only in
// remove_cma_dev, which runs when sync_devices_list finds the device gone (with no id on it),
// or at the last ucma_put_device of a device found gone. sync_devices_list runs when a lookup
// misses (a new device) or on rdma_get_devices, and it returns ENODEV before comparing
// anything when libibverbs lists no device at all: librdmacm keeps the context open until a
// device appears, or for ever when the last device went. And forcing a sync with
// rdma_get_devices is unsafe before rdma-core 52: sync_devices_list sorts the device pointers
// with a comparison that truncates their difference to int (dev_cmp, fixed by c4a5ac8bb) and
// then walks both lists in step; misordered, the walk inserts a device again and then removes
// every entry of it, which can empty librdmacm's device list, after which its next ucma_init
// re-initialises with its mutex held and deadlocks in ucma_set_af_ib_support.
//
// So the context's command and event files are closed here, and set to -1 in the context,
// which verbs_uninit_context (libibverbs/device.c) skips when librdmacm frees the context at
// its next sync. Nothing of the context is used meanwhile: every rdma_cm_id on the device is
// gone (so ucma_put_device cannot free it), and a new device never matches the old entry
// (ucma_get_cma_device matches the kernel's device index, which is new). The caller makes sure
// that no librdmacm call that could sync runs at the same time (librdmacm would free the
// context under this function's feet).
int srpt_release_cma(struct ibv_device *dev, struct srpt_cma_ref *ref)
{
	struct ibv_device **list;
	int n = 0, i, listed = 0, cmd, async;

	list = ibv_get_device_list(&n);
	if (!list)
		return SRPT_CMA_LISTED; // cannot tell yet
	for (i = 0; i < n; i++)
		if (list[i] == dev)
			listed = 1;
	ibv_free_device_list(list);
	if (listed)
		return SRPT_CMA_LISTED;
	if (!ref->ctx)
		return SRPT_CMA_NONE;
	if (!cma_open(ref)) {
		ref->ctx = NULL;
		return SRPT_CMA_CLOSED;
	}
	cmd = ref->ctx->cmd_fd;
	async = ref->ctx->async_fd;
	ref->ctx->cmd_fd = -1;
	ref->ctx->async_fd = -1;
	close(cmd);
	if (async >= 0)
		close(async);
	ref->ctx = NULL;
	return SRPT_CMA_DETACHED;
}

struct ibv_qp *srpt_create_qp(struct ibv_pd *pd, struct ibv_cq *send_cq, struct ibv_cq *recv_cq,
			      struct ibv_srq *srq, uint32_t sq, uint32_t rq, uint32_t send_sge,
			      uint32_t recv_sge, uint32_t inline_data)
{
	struct ibv_qp_init_attr a;

	memset(&a, 0, sizeof(a));
	a.send_cq = send_cq;
	a.recv_cq = recv_cq;
	a.srq = srq;
	a.qp_type = IBV_QPT_RC;
	a.sq_sig_all = 0;
	a.cap.max_send_wr = sq;
	a.cap.max_recv_wr = rq;
	a.cap.max_send_sge = send_sge;
	a.cap.max_recv_sge = recv_sge;
	a.cap.max_inline_data = inline_data;
	errno = 0;
	return ibv_create_qp(pd, &a);
}

// srpt_qp_init moves a new QP to INIT with the attributes the CM computes for it (P_Key index,
// port, access flags), as librdmacm's rdma_create_qp does.
int srpt_qp_init(struct rdma_cm_id *id, struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	int mask = 0;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	errno = 0;
	if (rdma_init_qp_attr(id, &a, &mask))
		return err_or(EIO);
	return ibv_modify_qp(qp, &a, mask);
}

// srpt_qp_rtr_rts moves the QP through INIT (again: the access flags depend on the negotiated
// responder resources, known only now), RTR and RTS, with the attributes the CM computes, as
// librdmacm's rdma_accept and its connect-response handling do for a QP it owns. resp_res and
// init_depth override max_dest_rd_atomic and max_rd_atomic unless they are 0xff
// (RDMA_MAX_RESP_RES, RDMA_MAX_INIT_DEPTH).
int srpt_qp_rtr_rts(struct rdma_cm_id *id, struct ibv_qp *qp, uint8_t resp_res, uint8_t init_depth)
{
	struct ibv_qp_attr a;
	struct ibv_port_attr pa;
	int mask = 0, ret;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	errno = 0;
	if (rdma_init_qp_attr(id, &a, &mask))
		return err_or(EIO);
	ret = ibv_modify_qp(qp, &a, mask);
	if (ret)
		return ret;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	if (rdma_init_qp_attr(id, &a, &mask))
		return err_or(EIO);
	// librdmacm works around an old rdma_ucm bug that sets RoCE-only mask bits (21-24) on
	// InfiniBand ports; do the same.
	memset(&pa, 0, sizeof(pa));
	if (!ibv_query_port(qp->context, id->port_num, &pa) &&
	    pa.link_layer == IBV_LINK_LAYER_INFINIBAND)
		mask &= UINT_MAX ^ 0xe00000;
	if (resp_res != RDMA_MAX_RESP_RES)
		a.max_dest_rd_atomic = resp_res;
	ret = ibv_modify_qp(qp, &a, mask);
	if (ret)
		return ret;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	if (rdma_init_qp_attr(id, &a, &mask))
		return err_or(EIO);
	if (init_depth != RDMA_MAX_INIT_DEPTH)
		a.max_rd_atomic = init_depth;
	return ibv_modify_qp(qp, &a, mask);
}

int srpt_qp_err(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_ERR;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE);
}

uint32_t srpt_qp_num(struct ibv_qp *qp)
{
	return qp->qp_num;
}

// srpt_post_send links wrs[0..n-1] through their next pointers and posts them with one
// ibv_post_send. On failure *bad is the index of the first work request not posted.
void srpt_link_send(struct ibv_send_wr *wrs, int n)
{
	int i;

	for (i = 0; i < n - 1; i++)
		wrs[i].next = &wrs[i + 1];
	wrs[n - 1].next = NULL;
}

void srpt_link_recv(struct ibv_recv_wr *wrs, int n)
{
	int i;

	for (i = 0; i < n - 1; i++)
		wrs[i].next = &wrs[i + 1];
	wrs[n - 1].next = NULL;
}

int srpt_post_send(struct ibv_qp *qp, struct ibv_send_wr *wrs, int n, int *bad)
{
	struct ibv_send_wr *bad_wr = NULL;
	int ret;

	srpt_link_send(wrs, n);
	ret = ibv_post_send(qp, wrs, &bad_wr);
	if (ret)
		*bad = bad_wr ? (int)(bad_wr - wrs) : 0;
	return ret;
}

int srpt_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wrs, int n, int *bad)
{
	struct ibv_recv_wr *bad_wr = NULL;
	int ret;

	srpt_link_recv(wrs, n);
	ret = ibv_post_recv(qp, wrs, &bad_wr);
	if (ret)
		*bad = bad_wr ? (int)(bad_wr - wrs) : 0;
	return ret;
}

// srpt_create_srq makes a shared receive queue of max_wr receives of max_sge SGEs.
struct ibv_srq *srpt_create_srq(struct ibv_pd *pd, uint32_t max_wr, uint32_t max_sge)
{
	struct ibv_srq_init_attr a;

	memset(&a, 0, sizeof(a));
	a.attr.max_wr = max_wr;
	a.attr.max_sge = max_sge;
	errno = 0;
	return ibv_create_srq(pd, &a);
}

int srpt_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wrs, int n, int *bad)
{
	struct ibv_recv_wr *bad_wr = NULL;
	int ret;

	srpt_link_recv(wrs, n);
	ret = ibv_post_srq_recv(srq, wrs, &bad_wr);
	if (ret)
		*bad = bad_wr ? (int)(bad_wr - wrs) : 0;
	return ret;
}

// srpt_poll_cq is ibv_poll_cq, a static inline function cgo cannot call.
int srpt_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wcs)
{
	return ibv_poll_cq(cq, n, wcs);
}

// srpt_poll_cqs takes up to n completions, the send CQ's first and then the receive CQ's, in
// one call from Go instead of two. It returns how many it took, or -(k + 1) if a poll failed
// after k completions were taken (they are in wcs all the same).
int srpt_poll_cqs(struct ibv_cq *scq, struct ibv_cq *rcq, int n, struct ibv_wc *wcs)
{
	int s, r;

	s = ibv_poll_cq(scq, n, wcs);
	if (s < 0)
		return -1;
	if (s == n)
		return s;
	r = ibv_poll_cq(rcq, n - s, wcs + s);
	if (r < 0)
		return -(s + 1);
	return s + r;
}

// srpt_poll_cq_pair takes up to n completions of a and then, when poll_b, of b, in one call
// from Go instead of two. It returns how many it took, or -(k + 1) if a poll failed after k
// completions were taken (they are in wcs all the same).
int srpt_poll_cq_pair(struct ibv_cq *a, struct ibv_cq *b, int poll_b, int n, struct ibv_wc *wcs)
{
	int s, r;

	s = ibv_poll_cq(a, n, wcs);
	if (s < 0)
		return -1;
	if (s == n || !poll_b || b == a)
		return s;
	r = ibv_poll_cq(b, n - s, wcs + s);
	if (r < 0)
		return -(s + 1);
	return s + r;
}

int srpt_req_notify_cq(struct ibv_cq *cq)
{
	return ibv_req_notify_cq(cq, 0);
}

// srpt_cq_event reads one completion event of ch, whose CQs are a connection's send queue's
// (scq) and receive queue's, and says which raised it: SRPT_CQ_EVENT_SEND or
// SRPT_CQ_EVENT_RECV, 0 if the channel is empty (EAGAIN), or -errno. The answer is the return
// value, so that Go passes no pointer to its own memory (which would escape to the heap, one
// allocation per event).
int srpt_cq_event(struct ibv_comp_channel *ch, struct ibv_cq *scq)
{
	struct ibv_cq *cq;
	void *ctx;
	int e;

	errno = 0;
	if (ibv_get_cq_event(ch, &cq, &ctx)) {
		e = err_or(EIO);
		return e == EAGAIN ? 0 : -e;
	}
	return cq == scq ? SRPT_CQ_EVENT_SEND : SRPT_CQ_EVENT_RECV;
}

// srpt_next_cq_event reads one completion event of ch and returns the CQ that raised it, or
// NULL if the channel is empty (EAGAIN) or the read failed. The CQ is the return value, so
// that Go passes no pointer to its own memory (which would escape to the heap).
struct ibv_cq *srpt_next_cq_event(struct ibv_comp_channel *ch)
{
	struct ibv_cq *cq;
	void *ctx;

	if (ibv_get_cq_event(ch, &cq, &ctx))
		return NULL;
	return cq;
}

int srpt_get_async_event(struct ibv_context *ctx, struct srpt_async_event *out)
{
	struct ibv_async_event ev;

	errno = 0;
	if (ibv_get_async_event(ctx, &ev))
		return err_or(EIO);
	out->type = ev.event_type;
	out->qp_num = 0;
	switch (ev.event_type) {
	case IBV_EVENT_COMM_EST:
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_SQ_DRAINED:
	case IBV_EVENT_PATH_MIG:
	case IBV_EVENT_PATH_MIG_ERR:
	case IBV_EVENT_QP_LAST_WQE_REACHED:
		out->qp_num = ev.element.qp->qp_num;
		break;
	default:
		break;
	}
	// Acknowledge at once: ibv_destroy_qp waits for the events of its QP to be acknowledged.
	ibv_ack_async_event(&ev);
	return 0;
}

int srpt_query_device(struct ibv_context *ctx, struct srpt_device_attr *out)
{
	struct ibv_device_attr a;
	int ret;

	memset(&a, 0, sizeof(a));
	ret = ibv_query_device(ctx, &a);
	if (ret)
		return ret;
	out->node_guid = be64toh(a.node_guid);
	out->max_qp_wr = a.max_qp_wr;
	out->max_sge = a.max_sge;
	out->max_sge_rd = a.max_sge_rd;
	out->max_cqe = a.max_cqe;
	out->max_qp_rd_atom = a.max_qp_rd_atom;
	out->max_qp_init_rd_atom = a.max_qp_init_rd_atom;
	out->phys_port_cnt = a.phys_port_cnt;
	out->max_srq_wr = a.max_srq_wr;
	out->max_srq_sge = a.max_srq_sge;
	out->num_comp_vectors = ctx->num_comp_vectors;
	return 0;
}

// srpt_probe_inline finds how much inline data an RC QP of this device accepts, trying
// halving sizes from max down: verbs has no device attribute for it.
int srpt_probe_inline(struct ibv_context *ctx, struct ibv_pd *pd, int max)
{
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	int n;

	cq = ibv_create_cq(ctx, 2, NULL, NULL, 0);
	if (!cq)
		return 0;
	for (n = max; n > 0; n /= 2) {
		qp = srpt_create_qp(pd, cq, cq, NULL, 1, 1, 1, 1, n);
		if (qp) {
			ibv_destroy_qp(qp);
			break;
		}
	}
	ibv_destroy_cq(cq);
	return n;
}

struct ibv_mr *srpt_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access)
{
	errno = 0;
	return ibv_reg_mr(pd, addr, len, access);
}

int srpt_query_port(struct ibv_context *ctx, uint8_t port, struct srpt_port_attr *out)
{
	struct ibv_port_attr a;
	int ret;

	memset(&a, 0, sizeof(a));
	ret = ibv_query_port(ctx, port, &a);
	if (ret)
		return ret;
	out->state = a.state;
	out->link_layer = a.link_layer;
	out->active_mtu = a.active_mtu;
	out->gid_tbl_len = a.gid_tbl_len;
	out->lid = a.lid;
	out->sm_lid = a.sm_lid;
	out->port_cap_flags = a.port_cap_flags;
	// P_Key index 0, host order (ibv_query_pkey returns it in network order); 0 if unknown.
	out->pkey0 = 0;
	if (a.pkey_tbl_len > 0) {
		__be16 pk;

		if (ibv_query_pkey(ctx, port, 0, &pk) == 0)
			out->pkey0 = be16toh(pk);
	}
	return 0;
}

long srpt_query_gids(struct ibv_context *ctx, struct ibv_gid_entry *out, long max)
{
	return (long)ibv_query_gid_table(ctx, out, max, 0);
}

// srpt_gid_ifindex returns the netdev index of the GID table entry equal to gid (16 bytes), on
// any port, or 0.
uint32_t srpt_gid_ifindex(struct ibv_context *ctx, const uint8_t *gid)
{
	struct ibv_device_attr da;
	struct ibv_port_attr pa;
	struct ibv_gid_entry *e;
	long total = 0, n, i;
	uint32_t idx = 0;
	int p;

	if (ibv_query_device(ctx, &da))
		return 0;
	for (p = 1; p <= da.phys_port_cnt; p++)
		if (!ibv_query_port(ctx, p, &pa))
			total += pa.gid_tbl_len;
	if (total <= 0)
		return 0;
	e = calloc(total, sizeof(*e));
	if (!e)
		return 0;
	n = srpt_query_gids(ctx, e, total);
	for (i = 0; i < n; i++) {
		if (!memcmp(e[i].gid.raw, gid, 16)) {
			idx = e[i].ndev_ifindex;
			break;
		}
	}
	free(e);
	return idx;
}

uint64_t srpt_device_guid(struct ibv_device *dev)
{
	return be64toh(ibv_get_device_guid(dev));
}
