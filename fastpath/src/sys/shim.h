/* Linkable wrappers for libfabric's `static inline` calls (and the FI_VERSION macro).
 * Mechanical one-liners: every judgement lives in the safe Rust layer. */
#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_eq.h>

uint32_t rasa_fi_header_version(void);
/* FI_CONTEXT | FI_CONTEXT2 where the headers still define them (0 otherwise). */
uint64_t rasa_fi_context_modes(void);
int rasa_fi_close(struct fid *fid);
int rasa_fi_domain(struct fid_fabric *fabric, struct fi_info *info, struct fid_domain **domain, void *context);
int rasa_fi_cq_open(struct fid_domain *domain, struct fi_cq_attr *attr, struct fid_cq **cq, void *context);
int rasa_fi_av_open(struct fid_domain *domain, struct fi_av_attr *attr, struct fid_av **av, void *context);
int rasa_fi_endpoint(struct fid_domain *domain, struct fi_info *info, struct fid_ep **ep, void *context);
int rasa_fi_ep_bind(struct fid_ep *ep, struct fid *bfid, uint64_t flags);
int rasa_fi_enable(struct fid_ep *ep);
int rasa_fi_getname(struct fid_ep *ep, void *addr, size_t *addrlen);
int rasa_fi_av_insert(struct fid_av *av, const void *addr, size_t count, fi_addr_t *fi_addr, uint64_t flags, void *context);
int rasa_fi_mr_reg(struct fid_domain *domain, const void *buf, size_t len, uint64_t access, uint64_t offset,
                   uint64_t requested_key, uint64_t flags, struct fid_mr **mr, void *context);
uint64_t rasa_fi_mr_key(struct fid_mr *mr);
void *rasa_fi_mr_desc(struct fid_mr *mr);
int rasa_fi_mr_bind(struct fid_mr *mr, struct fid *bfid, uint64_t flags);
int rasa_fi_mr_enable(struct fid_mr *mr);
ssize_t rasa_fi_read(struct fid_ep *ep, void *buf, size_t len, void *desc, fi_addr_t src_addr, uint64_t addr,
                     uint64_t key, void *context);
ssize_t rasa_fi_write(struct fid_ep *ep, const void *buf, size_t len, void *desc, fi_addr_t dest_addr, uint64_t addr,
                      uint64_t key, void *context);
ssize_t rasa_fi_cq_read(struct fid_cq *cq, void *buf, size_t count);
ssize_t rasa_fi_cq_sread(struct fid_cq *cq, void *buf, size_t count, const void *cond, int timeout);
ssize_t rasa_fi_cq_readerr(struct fid_cq *cq, struct fi_cq_err_entry *buf, uint64_t flags);
const char *rasa_fi_cq_strerror(struct fid_cq *cq, int prov_errno, const void *err_data, char *buf, size_t len);
int rasa_fi_cq_signal(struct fid_cq *cq);
int rasa_fi_eq_open(struct fid_fabric *fabric, struct fi_eq_attr *attr, struct fid_eq **eq, void *context);
ssize_t rasa_fi_eq_read(struct fid_eq *eq, uint32_t *event, void *buf, size_t len, uint64_t flags);
ssize_t rasa_fi_eq_readerr(struct fid_eq *eq, struct fi_eq_err_entry *buf, uint64_t flags);
const char *rasa_fi_eq_strerror(struct fid_eq *eq, int prov_errno, const void *err_data, char *buf, size_t len);
/* fi_getopt(FI_OPT_EFA_EMULATED_READ): 1 emulated, 0 device RDMA read, negative error. The
 * option is the enum member after FI_OPT_EFA_RNR_RETRY (fi_ext.h since 1.18), so it is
 * reachable with the 1.17 headers too; other providers answer -FI_ENOPROTOOPT/-FI_ENOSYS. */
int rasa_fi_efa_emulated_read(struct fid_ep *ep);
