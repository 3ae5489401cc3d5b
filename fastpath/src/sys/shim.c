#include "shim.h"

uint32_t rasa_fi_header_version(void) { return FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION); }
uint64_t rasa_fi_context_modes(void) {
    uint64_t m = 0;
#ifdef FI_CONTEXT
    m |= FI_CONTEXT;
#endif
#ifdef FI_CONTEXT2
    m |= FI_CONTEXT2;
#endif
    return m;
}
int rasa_fi_close(struct fid *fid) { return fi_close(fid); }
int rasa_fi_domain(struct fid_fabric *fabric, struct fi_info *info, struct fid_domain **domain, void *context) {
    return fi_domain(fabric, info, domain, context);
}
int rasa_fi_cq_open(struct fid_domain *domain, struct fi_cq_attr *attr, struct fid_cq **cq, void *context) {
    return fi_cq_open(domain, attr, cq, context);
}
int rasa_fi_av_open(struct fid_domain *domain, struct fi_av_attr *attr, struct fid_av **av, void *context) {
    return fi_av_open(domain, attr, av, context);
}
int rasa_fi_endpoint(struct fid_domain *domain, struct fi_info *info, struct fid_ep **ep, void *context) {
    return fi_endpoint(domain, info, ep, context);
}
int rasa_fi_ep_bind(struct fid_ep *ep, struct fid *bfid, uint64_t flags) { return fi_ep_bind(ep, bfid, flags); }
int rasa_fi_enable(struct fid_ep *ep) { return fi_enable(ep); }
int rasa_fi_getname(struct fid_ep *ep, void *addr, size_t *addrlen) { return fi_getname(&ep->fid, addr, addrlen); }
int rasa_fi_av_insert(struct fid_av *av, const void *addr, size_t count, fi_addr_t *fi_addr, uint64_t flags, void *context) {
    return fi_av_insert(av, addr, count, fi_addr, flags, context);
}
int rasa_fi_mr_reg(struct fid_domain *domain, const void *buf, size_t len, uint64_t access, uint64_t offset,
                   uint64_t requested_key, uint64_t flags, struct fid_mr **mr, void *context) {
    return fi_mr_reg(domain, buf, len, access, offset, requested_key, flags, mr, context);
}
uint64_t rasa_fi_mr_key(struct fid_mr *mr) { return fi_mr_key(mr); }
void *rasa_fi_mr_desc(struct fid_mr *mr) { return fi_mr_desc(mr); }
int rasa_fi_mr_bind(struct fid_mr *mr, struct fid *bfid, uint64_t flags) { return fi_mr_bind(mr, bfid, flags); }
int rasa_fi_mr_enable(struct fid_mr *mr) { return fi_mr_enable(mr); }
ssize_t rasa_fi_read(struct fid_ep *ep, void *buf, size_t len, void *desc, fi_addr_t src_addr, uint64_t addr,
                     uint64_t key, void *context) {
    return fi_read(ep, buf, len, desc, src_addr, addr, key, context);
}
ssize_t rasa_fi_write(struct fid_ep *ep, const void *buf, size_t len, void *desc, fi_addr_t dest_addr, uint64_t addr,
                      uint64_t key, void *context) {
    /* Completed once the bytes are in the target's memory (not merely sent): the commit
     * that follows a write finds them there. Asked per write, not for the endpoint (shm
     * then stops reporting reads with a revoked key). */
    struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
    struct fi_rma_iov rma = {.addr = addr, .len = len, .key = key};
    struct fi_msg_rma msg = {
        .msg_iov = &iov, .desc = &desc, .iov_count = 1, .addr = dest_addr,
        .rma_iov = &rma, .rma_iov_count = 1, .context = context, .data = 0,
    };
    return fi_writemsg(ep, &msg, FI_DELIVERY_COMPLETE | FI_COMPLETION);
}
ssize_t rasa_fi_cq_read(struct fid_cq *cq, void *buf, size_t count) { return fi_cq_read(cq, buf, count); }
ssize_t rasa_fi_cq_sread(struct fid_cq *cq, void *buf, size_t count, const void *cond, int timeout) {
    return fi_cq_sread(cq, buf, count, cond, timeout);
}
ssize_t rasa_fi_cq_readerr(struct fid_cq *cq, struct fi_cq_err_entry *buf, uint64_t flags) {
    return fi_cq_readerr(cq, buf, flags);
}
const char *rasa_fi_cq_strerror(struct fid_cq *cq, int prov_errno, const void *err_data, char *buf, size_t len) {
    return fi_cq_strerror(cq, prov_errno, err_data, buf, len);
}
int rasa_fi_cq_signal(struct fid_cq *cq) { return fi_cq_signal(cq); }
int rasa_fi_eq_open(struct fid_fabric *fabric, struct fi_eq_attr *attr, struct fid_eq **eq, void *context) {
    return fi_eq_open(fabric, attr, eq, context);
}
ssize_t rasa_fi_eq_read(struct fid_eq *eq, uint32_t *event, void *buf, size_t len, uint64_t flags) {
    return fi_eq_read(eq, event, buf, len, flags);
}
ssize_t rasa_fi_eq_readerr(struct fid_eq *eq, struct fi_eq_err_entry *buf, uint64_t flags) {
    return fi_eq_readerr(eq, buf, flags);
}
const char *rasa_fi_eq_strerror(struct fid_eq *eq, int prov_errno, const void *err_data, char *buf, size_t len) {
    return fi_eq_strerror(eq, prov_errno, err_data, buf, len);
}
#include <stdbool.h>
#include <rdma/fi_ext.h>
int rasa_fi_efa_emulated_read(struct fid_ep *ep) {
    bool emulated = false;
    size_t len = sizeof emulated;
    int ret = fi_getopt(&ep->fid, FI_OPT_ENDPOINT, FI_OPT_EFA_RNR_RETRY + 1, &emulated, &len);
    return ret ? ret : (emulated ? 1 : 0);
}
