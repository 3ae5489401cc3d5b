// The Rasa NIXL backend (`libplugin_RASA.so`): NIXL's engine interface (nixl_abi.h) over
// the Rust SDK (rasa_nixl.h, nixl-plugin/src). A thin shim: it keeps NIXL's registrations
// and hands each transfer's descriptor pairs to Rust in one call; every byte is moved by
// the SDK, one-sided where the fast path is on.
//
// Parameters (`agent.create_backend("RASA", {...})`): endpoint (required), namespace,
// token, fast_path (auto | required | off), timeout_ms. Memory: DRAM_SEG (the agent's,
// registered once for one-sided reads) and OBJ_SEG (a Rasa key: the descriptor's metaInfo
// at registration, else its device id in decimal, as NIXL's OBJ plugin names objects).
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "nixl_abi.h"
#include "rasa_nixl.h"

using namespace nixl_abi;

namespace {

constexpr size_t ERR_LEN = 512;

// A registration: local memory (a Rust region) or a key.
struct RasaMD : BackendMD {
    rasa_nixl_region *region = nullptr; // DRAM_SEG
    std::string key;                    // OBJ_SEG
    explicit RasaMD(rasa_nixl_region *r) : BackendMD(true), region(r) {}
    explicit RasaMD(std::string k) : BackendMD(true), key(std::move(k)) {}
    ~RasaMD() override { rasa_nixl_deregister(region); }
};

// A transfer: its items (kept until it is released) and the Rust transfer moving them.
struct RasaReq : BackendReqH {
    std::vector<rasa_nixl_item> items;
    rasa_nixl_xfer *xfer = nullptr;
    bool reported = false; // its failure went to standard error
    ~RasaReq() override { rasa_nixl_release(xfer); }
};

// NIXL passes a status code only: the reason goes to standard error, as NIXL's own
// plugins log theirs.
void report(const char *what, const char *why) {
    std::fprintf(stderr, "rasa-nixl: %s: %s\n", what, why);
}

std::string param(const params_t &params, const char *name) {
    auto it = params.find(name);
    return it == params.end() ? std::string() : it->second;
}

class RasaEngine : public BackendEngine {
    rasa_nixl_backend *backend_ = nullptr;

public:
    explicit RasaEngine(const InitParams *p) : BackendEngine(p) {
        const params_t &params = *p->customParams;
        std::string endpoint = param(params, "endpoint"), ns = param(params, "namespace"),
                    token = param(params, "token"), fast = param(params, "fast_path"),
                    timeout = param(params, "timeout_ms");
        rasa_nixl_settings s{};
        s.endpoint = endpoint.data();
        s.endpoint_len = endpoint.size();
        s.namespace_ = ns.data();
        s.namespace_len = ns.size();
        s.token = token.data();
        s.token_len = token.size();
        s.fast_path = fast.data();
        s.fast_path_len = fast.size();
        try {
            s.timeout_ms = timeout.empty() ? 0 : std::stoull(timeout);
        } catch (const std::exception &) {
            report("the backend was not made", "timeout_ms is not a number of milliseconds");
            initErr = true;
            return;
        }
        char err[ERR_LEN] = {0};
        backend_ = rasa_nixl_open(&s, err, sizeof err);
        if (!backend_) {
            report("the backend was not made", err);
            initErr = true;
        }
    }
    ~RasaEngine() override { rasa_nixl_close(backend_); }

    bool supportsRemote() const override { return false; }
    bool supportsLocal() const override { return true; }
    bool supportsNotif() const override { return false; }
    mem_list_t getSupportedMems() const override { return {DRAM_SEG, OBJ_SEG}; }

    status_t registerMem(const BlobDesc &mem, const mem_t &type, BackendMD *&out) override {
        char err[ERR_LEN] = {0};
        switch (type) {
        case DRAM_SEG: {
            rasa_nixl_region *r = rasa_nixl_register(mem.addr, mem.len, err, sizeof err);
            if (!r) {
                report("memory was not registered", err);
                return ERR_INVALID_PARAM;
            }
            out = new RasaMD(r);
            return SUCCESS;
        }
        case OBJ_SEG:
            out = new RasaMD(mem.metaInfo.empty() ? std::to_string(mem.devId) : mem.metaInfo);
            return SUCCESS;
        default:
            return ERR_NOT_SUPPORTED;
        }
    }

    status_t deregisterMem(BackendMD *meta) override {
        delete static_cast<RasaMD *>(meta);
        return SUCCESS;
    }
    status_t connect(const std::string &) override { return SUCCESS; }
    status_t disconnect(const std::string &) override { return SUCCESS; }
    status_t unloadMD(BackendMD *) override { return SUCCESS; }
    status_t loadLocalMD(BackendMD *input, BackendMD *&output) override {
        output = input;
        return SUCCESS;
    }

    // Checks that the lists pair local memory with keys; the items, or why not.
    status_t items(const meta_dlist_t &local, const meta_dlist_t &remote,
                   std::vector<rasa_nixl_item> &out) const {
        if (local.getType() != DRAM_SEG || remote.getType() != OBJ_SEG ||
            local.descCount() != remote.descCount())
            return ERR_INVALID_PARAM;
        out.clear();
        out.reserve(local.descCount());
        for (int i = 0; i < local.descCount(); i++) {
            const MetaDesc &l = local[i], &r = remote[i];
            auto *lmd = static_cast<const RasaMD *>(l.metadataP);
            auto *rmd = static_cast<const RasaMD *>(r.metadataP);
            if (!rmd || rmd->key.empty() || l.len != r.len) return ERR_INVALID_PARAM;
            out.push_back(rasa_nixl_item{rmd->key.data(), rmd->key.size(), r.addr, l.addr, l.len,
                                         lmd ? lmd->region : nullptr});
        }
        return SUCCESS;
    }

    status_t prepXfer(const xfer_op_t &, const meta_dlist_t &local, const meta_dlist_t &remote,
                      const std::string &, BackendReqH *&handle,
                      const OptionalArgs *) const override {
        auto *req = new RasaReq();
        status_t st = items(local, remote, req->items);
        if (st != SUCCESS) {
            delete req;
            return st;
        }
        handle = req;
        return SUCCESS;
    }

    // The items prepXfer made from the same lists (NIXL posts a handle with the lists it
    // was prepared with); a handle may be posted again once its transfer ended.
    status_t postXfer(const xfer_op_t &op, const meta_dlist_t &, const meta_dlist_t &,
                      const std::string &, BackendReqH *&handle,
                      const OptionalArgs *) const override {
        auto *req = static_cast<RasaReq *>(handle);
        if (!req) return ERR_INVALID_PARAM;
        rasa_nixl_release(req->xfer);
        req->xfer = nullptr;
        req->reported = false;
        char err[ERR_LEN] = {0};
        req->xfer = rasa_nixl_post(backend_, op == WRITE, req->items.data(), req->items.size(),
                                   err, sizeof err);
        if (!req->xfer) {
            report("the transfer was not started", err);
            return ERR_INVALID_PARAM;
        }
        return IN_PROG;
    }

    status_t checkXfer(BackendReqH *handle) const override {
        auto *req = static_cast<RasaReq *>(handle);
        if (!req || !req->xfer) return ERR_NOT_POSTED;
        char err[ERR_LEN] = {0};
        int code = rasa_nixl_check(req->xfer, err, sizeof err);
        if (code < 0 && !req->reported) {
            report("the transfer failed", err);
            req->reported = true;
        }
        return static_cast<status_t>(code);
    }

    status_t releaseReqH(BackendReqH *handle) const override {
        delete static_cast<RasaReq *>(handle);
        return SUCCESS;
    }
};

BackendEngine *create_engine(const InitParams *p) {
    try {
        return new RasaEngine(p);
    } catch (const std::exception &) {
        return nullptr;
    }
}

void destroy_engine(BackendEngine *e) { delete e; }
const char *plugin_name() { return "RASA"; }
const char *plugin_version() { return rasa_nixl_version(); }
params_t backend_options() {
    return {{"endpoint", ""}, {"namespace", ""}, {"token", ""}, {"fast_path", "auto"},
            {"timeout_ms", "30000"}};
}
mem_list_t backend_mems() { return {DRAM_SEG, OBJ_SEG}; }

Plugin the_plugin = {PLUGIN_API_VERSION, create_engine, destroy_engine, plugin_name,
                     plugin_version,     backend_options, backend_mems};

} // namespace

extern "C" __attribute__((visibility("default"))) Plugin *nixl_plugin_init() { return &the_plugin; }
extern "C" __attribute__((visibility("default"))) void nixl_plugin_fini() {}
