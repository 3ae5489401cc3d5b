// What a NIXL backend plugin shares with NIXL's core library, declared here for the Rasa
// plugin: NIXL publishes no development headers in its wheels, and a plugin meets the core
// only through a few types' memory layout and one class's table of virtual functions.
//
// These declarations follow the binary interface of NIXL 1.5.1 (PyPI nixl-cu12 1.5.1,
// plugin API version 1, C++20, libstdc++'s C++11 string ABI), checked against that wheel's
// own plugins: their engines' tables of virtual functions have the 29 entries the class
// below has (`readelf -sW libplugin_POSIX.so`: `vtable for nixlPosixEngine`, 232 bytes).
// Only the order and the types of members and virtual functions matter to the ABI; names
// in this file are NIXL's where NIXL's code reads them inline (the core calls the base
// class's inline accessors on our object), our own elsewhere.
//
// A NIXL release that changes this interface changes NIXL_PLUGIN_API_VERSION or the
// table's size; scripts/nixl-plugin.sh --check compares the table's size with the
// installed wheel's plugins before the plugin is used.
#ifndef RASA_NIXL_ABI_H
#define RASA_NIXL_ABI_H

#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace nixl_abi {

enum mem_t { DRAM_SEG, VRAM_SEG, BLK_SEG, OBJ_SEG, FILE_SEG };
enum xfer_op_t { READ, WRITE };
enum status_t {
    IN_PROG = 1,
    SUCCESS = 0,
    ERR_NOT_POSTED = -1,
    ERR_INVALID_PARAM = -2,
    ERR_BACKEND = -3,
    ERR_NOT_FOUND = -4,
    ERR_MISMATCH = -5,
    ERR_NOT_ALLOWED = -6,
    ERR_REPOST_ACTIVE = -7,
    ERR_UNKNOWN = -8,
    ERR_NOT_SUPPORTED = -9,
};
enum class thread_sync_t { NONE, STRICT, RW };

using params_t = std::unordered_map<std::string, std::string>;
using mem_list_t = std::vector<mem_t>;
using query_resp_t = std::optional<params_t>;
using notif_list_t = std::vector<std::pair<std::string, std::string>>;

// A run of memory: address, length, device (for OBJ_SEG: the object's id).
struct BasicDesc {
    uintptr_t addr;
    size_t len;
    uint64_t devId;
};

// A run of memory as it is registered, with its metadata (for OBJ_SEG: the key).
struct BlobDesc : BasicDesc {
    std::string metaInfo;
};

// What a backend keeps of a registration: a class of its own deriving from this.
class BackendMD {
protected:
    bool isPrivateMD;

public:
    explicit BackendMD(bool is_private) : isPrivateMD(is_private) {}
    virtual ~BackendMD() = default;
};

// A request under way: a class of its own deriving from this.
class BackendReqH {
public:
    BackendReqH() = default;
    virtual ~BackendReqH() = default;
};

// A descriptor of a transfer: memory and the backend's metadata of its registration.
struct MetaDesc : BasicDesc {
    BackendMD *metadataP;
};

// A list of descriptors as NIXL passes it: polymorphic (its table pointer first), then the
// memory type and the descriptors. Read only here, through these inline accessors.
template <class T> class DescList {
    void *vtable_;
    mem_t type;
    std::vector<T> descs;

public:
    DescList() = delete;
    mem_t getType() const { return type; }
    int descCount() const { return static_cast<int>(descs.size()); }
    const T &operator[](size_t i) const { return descs[i]; }
};
using meta_dlist_t = DescList<MetaDesc>;
using reg_dlist_t = DescList<BlobDesc>;

// What NIXL passes a transfer besides its descriptors (notifications are not supported).
struct OptionalArgs {
    std::string notifMsg;
    bool hasNotif = false;
    std::string customParam;
};

// What a backend is made with: the agent's name, the backend's type and parameters.
struct InitParams {
    std::string localAgent;
    std::string type;
    params_t *customParams = nullptr;
    bool enableProgTh = false;
    uint64_t pthrDelay = 0;
    thread_sync_t syncMode;
    bool enableTelemetry_ = false;
};

// An event the base class queues for NIXL's telemetry (never queued by this plugin).
struct TelemetryEvent {
    uint32_t type;
    uint64_t value;
};

// The base class of every backend engine: NIXL's core reads its members through inline
// accessors compiled into the core, so their order and types are the ABI, and calls the
// virtual functions below by their place in the table.
class BackendEngine {
    std::string backendType;
    params_t customParams;
    std::vector<TelemetryEvent> telemetryEvents_;
    std::mutex telemetryEventsMutex_;

protected:
    bool initErr = false;
    const std::string localAgent;
    const bool enableTelemetry_;

    bool getInitParam(const std::string &key, std::string &value) const {
        auto it = customParams.find(key);
        if (it == customParams.end()) return false;
        value = it->second;
        return true;
    }

public:
    explicit BackendEngine(const InitParams *p)
        : backendType(p->type),
          customParams(*p->customParams),
          localAgent(p->localAgent),
          enableTelemetry_(p->enableTelemetry_) {}
    BackendEngine(const BackendEngine &) = delete;
    BackendEngine &operator=(const BackendEngine &) = delete;
    virtual ~BackendEngine() = default;

    virtual bool supportsRemote() const = 0;
    virtual bool supportsLocal() const = 0;
    virtual bool supportsNotif() const = 0;
    virtual mem_list_t getSupportedMems() const = 0;

    virtual status_t registerMem(const BlobDesc &mem, const mem_t &nixl_mem, BackendMD *&out) = 0;
    virtual status_t deregisterMem(BackendMD *meta) = 0;
    virtual status_t connect(const std::string &remote_agent) = 0;
    virtual status_t disconnect(const std::string &remote_agent) = 0;
    virtual status_t unloadMD(BackendMD *input) = 0;
    virtual status_t prepXfer(const xfer_op_t &op, const meta_dlist_t &local,
                              const meta_dlist_t &remote, const std::string &remote_agent,
                              BackendReqH *&handle, const OptionalArgs *opt = nullptr) const = 0;
    virtual status_t postXfer(const xfer_op_t &op, const meta_dlist_t &local,
                              const meta_dlist_t &remote, const std::string &remote_agent,
                              BackendReqH *&handle, const OptionalArgs *opt = nullptr) const = 0;
    virtual status_t checkXfer(BackendReqH *handle) const = 0;
    virtual status_t releaseReqH(BackendReqH *handle) const = 0;

    // Memory views (two overloads: remote, local) and their release: not supported.
    virtual status_t prepRemoteMemView(const void *, void *&, const OptionalArgs * = nullptr) const {
        return ERR_NOT_SUPPORTED;
    }
    virtual status_t prepLocalMemView(const void *, void *&, const OptionalArgs * = nullptr) const {
        return ERR_NOT_SUPPORTED;
    }
    virtual void releaseMemView(void *) const {}

    // Remote agents' metadata: not supported (the plugin's transfers are local to Rasa).
    virtual status_t getPublicData(const BackendMD *, std::string &) const { return ERR_BACKEND; }
    virtual status_t getConnInfo(std::string &) const { return ERR_BACKEND; }
    virtual status_t loadRemoteConnInfo(const std::string &, const std::string &) {
        return ERR_BACKEND;
    }
    virtual status_t loadRemoteMD(const BlobDesc &, const mem_t &, const std::string &,
                                  BackendMD *&) {
        return ERR_BACKEND;
    }
    virtual status_t loadLocalMD(BackendMD *input, BackendMD *&output) = 0;
    virtual status_t getNotifs(notif_list_t &) { return ERR_BACKEND; }
    virtual status_t genNotif(const std::string &, const std::string &) const {
        return ERR_BACKEND;
    }
    virtual status_t queryMem(const reg_dlist_t &, std::vector<query_resp_t> &) const {
        return ERR_NOT_SUPPORTED;
    }
    virtual status_t estimateXferCost(const xfer_op_t &, const meta_dlist_t &,
                                      const meta_dlist_t &, const std::string &,
                                      BackendReqH *const &, std::chrono::microseconds &,
                                      std::chrono::microseconds &, int &,
                                      const void * = nullptr) const {
        return ERR_NOT_SUPPORTED;
    }
};

// The table a plugin's nixl_plugin_init returns.
constexpr int PLUGIN_API_VERSION = 1;
struct Plugin {
    int api_version;
    BackendEngine *(*create_engine)(const InitParams *init_params);
    void (*destroy_engine)(BackendEngine *engine);
    const char *(*get_plugin_name)();
    const char *(*get_plugin_version)();
    params_t (*get_backend_options)();
    mem_list_t (*get_backend_mems)();
};

} // namespace nixl_abi

#endif
