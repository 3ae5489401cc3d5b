// The C ABI of the Rust half of the Rasa NIXL plugin (nixl-plugin/src/lib.rs): what the
// C++ engine (plugin.cpp) calls. Strings are UTF-8 with a length, not NUL-terminated;
// `err` buffers get a NUL-terminated reason, cut to fit.
#ifndef RASA_NIXL_H
#define RASA_NIXL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Codes, equal to NIXL's nixl_status_t values of the same meaning. */
#define RASA_NIXL_IN_PROGRESS 1
#define RASA_NIXL_DONE 0
#define RASA_NIXL_INVALID (-2)
#define RASA_NIXL_FAILED (-3)
#define RASA_NIXL_NOT_FOUND (-4)
#define RASA_NIXL_MISMATCH (-5)

typedef struct rasa_nixl_backend rasa_nixl_backend;
typedef struct rasa_nixl_region rasa_nixl_region;
typedef struct rasa_nixl_xfer rasa_nixl_xfer;

typedef struct {
    const char *endpoint;
    size_t endpoint_len;
    const char *namespace_;
    size_t namespace_len;
    const char *token;
    size_t token_len;
    const char *fast_path;
    size_t fast_path_len;
    uint64_t timeout_ms;
} rasa_nixl_settings;

typedef struct {
    const char *key;
    size_t key_len;
    uint64_t offset;
    uintptr_t addr;
    size_t len;
    const rasa_nixl_region *region;
} rasa_nixl_item;

const char *rasa_nixl_version(void);
rasa_nixl_backend *rasa_nixl_open(const rasa_nixl_settings *settings, char *err, size_t err_len);
void rasa_nixl_close(rasa_nixl_backend *backend);
rasa_nixl_region *rasa_nixl_register(uintptr_t addr, size_t len, char *err, size_t err_len);
void rasa_nixl_deregister(rasa_nixl_region *region);
rasa_nixl_xfer *rasa_nixl_post(const rasa_nixl_backend *backend, bool write,
                               const rasa_nixl_item *items, size_t n, char *err,
                               size_t err_len);
int rasa_nixl_check(const rasa_nixl_xfer *xfer, char *err, size_t err_len);
int rasa_nixl_release(rasa_nixl_xfer *xfer);

#ifdef __cplusplus
}
#endif

#endif
