// shim.h declares the C helpers of package verbs (shim.c). They exist for three reasons:
// rdma-core's data-path verbs are static inline functions and some query verbs are macros that
// cgo cannot call directly; a helper can do several verbs calls in one Go->C crossing; and
// structures with unions are easier to fill and read on the C side.
#ifndef SRPT_SHIM_H
#define SRPT_SHIM_H

#include <stdint.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#define SRPT_SOCKADDR_SIZE 128
#define SRPT_PRIVATE_DATA_MAX 256

// srpt_cm_event is a copy of what package verbs needs from one struct rdma_cm_event, taken
// before the event is acknowledged (private data and addresses are owned by the event).
struct srpt_cm_event {
	int event;
	int status;
	uint64_t key;        // id->context
	uint64_t listen_key; // listen_id->context, connection requests only
	struct rdma_cm_id *id;
	struct ibv_device *device; // id->verbs->device, or NULL when the id has no device yet
	uint8_t responder_resources;
	uint8_t initiator_depth;
	uint8_t rnr_retry_count;
	uint8_t private_data_len;
	uint8_t private_data[SRPT_PRIVATE_DATA_MAX];
	uint8_t local[SRPT_SOCKADDR_SIZE]; // connection requests only
	uint8_t peer[SRPT_SOCKADDR_SIZE];
};

int srpt_get_cm_event(struct rdma_event_channel *ch, struct srpt_cm_event *out);
int srpt_create_id(struct rdma_event_channel *ch, uint64_t key, int ps, struct rdma_cm_id **out);
void srpt_set_key(struct rdma_cm_id *id, uint64_t key);
struct ibv_device *srpt_id_device(struct rdma_cm_id *id);
int srpt_bind(struct rdma_cm_id *id, const uint8_t *sa);
int srpt_resolve_addr(struct rdma_cm_id *id, const uint8_t *src, const uint8_t *dst, int timeout_ms);
void srpt_addrs(struct rdma_cm_id *id, uint8_t *local, uint8_t *peer);
int srpt_accept(struct rdma_cm_id *id, uint32_t qpn, const void *pd, uint8_t pdlen,
		uint8_t rr, uint8_t depth, uint8_t rnr);
int srpt_connect(struct rdma_cm_id *id, uint32_t qpn, const void *pd, uint8_t pdlen,
		 uint8_t rr, uint8_t depth, uint8_t rnr);
int srpt_reject(struct rdma_cm_id *id, const void *pd, uint8_t pdlen);
void srpt_sync_devices(void);

// srpt_cma_ref identifies librdmacm's own verbs context of a device (rdma_cm_id.verbs, shared
// by every id on the device) and the command file it was opened with, so that the file can be
// told apart from a later one with the same number.
struct srpt_cma_ref {
	struct ibv_context *ctx; // NULL: none recorded
	int cmd_fd;
	uint64_t st_dev;
	uint64_t st_ino;
	uint64_t st_rdev;
};
int srpt_cma_ref(struct rdma_cm_id *id, struct srpt_cma_ref *out);

// Results of srpt_release_cma.
#define SRPT_CMA_LISTED 1   // libibverbs still lists the device: try again later
#define SRPT_CMA_CLOSED 2   // librdmacm's context of the device is closed (by librdmacm)
#define SRPT_CMA_DETACHED 3 // its files were closed here (librdmacm keeps the context itself)
#define SRPT_CMA_NONE 4     // no context recorded
int srpt_release_cma(struct ibv_device *dev, struct srpt_cma_ref *ref);

struct ibv_qp *srpt_create_qp(struct ibv_pd *pd, struct ibv_cq *send_cq, struct ibv_cq *recv_cq,
			      struct ibv_srq *srq, uint32_t sq, uint32_t rq, uint32_t send_sge,
			      uint32_t recv_sge, uint32_t inline_data);
struct ibv_srq *srpt_create_srq(struct ibv_pd *pd, uint32_t max_wr, uint32_t max_sge);
int srpt_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wrs, int n, int *bad);
int srpt_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wcs);
int srpt_qp_init(struct rdma_cm_id *id, struct ibv_qp *qp);
int srpt_qp_rtr_rts(struct rdma_cm_id *id, struct ibv_qp *qp, uint8_t resp_res, uint8_t init_depth);
int srpt_qp_err(struct ibv_qp *qp);
uint32_t srpt_qp_num(struct ibv_qp *qp);

void srpt_link_send(struct ibv_send_wr *wrs, int n);
void srpt_link_recv(struct ibv_recv_wr *wrs, int n);
int srpt_post_send(struct ibv_qp *qp, struct ibv_send_wr *wrs, int n, int *bad);
int srpt_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wrs, int n, int *bad);
int srpt_poll_cqs(struct ibv_cq *scq, struct ibv_cq *rcq, int n, struct ibv_wc *wcs);
int srpt_req_notify_cq(struct ibv_cq *cq);
enum { SRPT_CQ_EVENT_RECV = 1, SRPT_CQ_EVENT_SEND = 2 };
int srpt_cq_event(struct ibv_comp_channel *ch, struct ibv_cq *scq);
struct ibv_cq *srpt_next_cq_event(struct ibv_comp_channel *ch);
int srpt_poll_cq_pair(struct ibv_cq *a, struct ibv_cq *b, int poll_b, int n, struct ibv_wc *wcs);

struct srpt_async_event {
	int type;
	uint32_t qp_num;
};
int srpt_get_async_event(struct ibv_context *ctx, struct srpt_async_event *out);

struct srpt_device_attr {
	uint64_t node_guid; // host order
	int max_qp_wr;
	int max_sge;
	int max_sge_rd;
	int max_cqe;
	int max_qp_rd_atom;
	int max_qp_init_rd_atom;
	int phys_port_cnt;
	int max_srq_wr;
	int max_srq_sge;
	int num_comp_vectors;
};
int srpt_query_device(struct ibv_context *ctx, struct srpt_device_attr *out);
int srpt_probe_inline(struct ibv_context *ctx, struct ibv_pd *pd, int max);
struct ibv_mr *srpt_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access);

struct srpt_port_attr {
	int state;
	int link_layer;
	int active_mtu;
	int gid_tbl_len;
	uint16_t lid;
	uint16_t sm_lid;
	uint32_t port_cap_flags;
	uint16_t pkey0;
};
int srpt_query_port(struct ibv_context *ctx, uint8_t port, struct srpt_port_attr *out);
// srpt_query_gids returns the valid GID entries of every port (at most max), or -errno.
long srpt_query_gids(struct ibv_context *ctx, struct ibv_gid_entry *out, long max);
uint32_t srpt_gid_ifindex(struct ibv_context *ctx, const uint8_t *gid);
uint64_t srpt_device_guid(struct ibv_device *dev);

// Layout facts the Go side relies on when it fills work requests in C memory.
extern const int srpt_off_rdma_remote_addr;
extern const int srpt_off_rdma_rkey;
extern const int srpt_sizeof_send_wr;
extern const int srpt_sizeof_recv_wr;
extern const int srpt_sizeof_sge;
extern const int srpt_sizeof_wc;

#endif
