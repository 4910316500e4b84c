/* optpipe runtime shim: the C ABI a trainer loads on every pipeline rank (docs/design.md §9,
 * docs/runtime-shim.md). It reads a compiled `.opsched` schedule, walks one rank's actions calling
 * the trainer back for compute and p2p, moves activations to a pinned host pool and back
 * (offload engine), and records op timings into a measured optpipe.profile/v1.
 *
 * Every function returns an optpipe_rt_status; no C++ exception crosses this boundary. On error,
 * optpipe_rt_last_error() gives a one-line message for the calling thread. Handles are opaque. A
 * rank handle is used by one thread at a time (its rank's thread); different ranks may run on
 * different threads of one process. */
#ifndef OPTPIPE_RT_H_
#define OPTPIPE_RT_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif
#if defined(__GNUC__)
#pragma GCC visibility push(default) /* the library hides everything but this ABI */
#endif

/* 2: op R, stage recompute fields, the recompute callback (appended to optpipe_rt_callbacks).
 * 3: optpipe_rt_config and optpipe_rt_callbacks start with struct_size, so fields appended later
 *    leave callers built against an older header working (the library reads only struct_size
 *    bytes and defaults the rest); enum-valued fields have their enum types. */
#define OPTPIPE_RT_ABI_VERSION 4

typedef enum optpipe_rt_status {
  OPTPIPE_RT_OK = 0,
  OPTPIPE_RT_E_INVALID_ARGUMENT = 1, /* null handle, rank/stage/microbatch out of range, ... */
  OPTPIPE_RT_E_IO = 2,               /* the schedule file cannot be read, or an output written */
  OPTPIPE_RT_E_TRUNCATED = 3,        /* the file ends before its declared size */
  OPTPIPE_RT_E_BAD_MAGIC = 4,        /* not an .opsched file */
  OPTPIPE_RT_E_WRONG_ENDIAN = 5,     /* written big-endian; .opsched is little-endian */
  OPTPIPE_RT_E_VERSION = 6,          /* a format version this shim does not read */
  OPTPIPE_RT_E_CHECKSUM = 7,         /* header or file CRC32 mismatch: corrupted */
  OPTPIPE_RT_E_CORRUPT = 8,          /* checksums match but the content is inconsistent */
  OPTPIPE_RT_E_HOST_POOL = 9,        /* the pinned host pool cannot be allocated */
  OPTPIPE_RT_E_POOL_EXHAUSTED = 10,  /* an offload does not fit the host pool */
  OPTPIPE_RT_E_BACKEND = 11,         /* a CUDA (or copy thread) call failed */
  OPTPIPE_RT_E_UNAVAILABLE = 12,     /* backend not built into this library */
  OPTPIPE_RT_E_STATE = 13,           /* e.g. reload without offload, offload twice */
  OPTPIPE_RT_E_CALLBACK = 14,        /* a trainer callback returned non-zero */
  OPTPIPE_RT_E_INTERNAL = 15
} optpipe_rt_status;

/* Static description of a status code. */
const char* optpipe_rt_strerror(optpipe_rt_status status);
/* Message of the last failed call on this thread ("" if none); valid until the next call. */
const char* optpipe_rt_last_error(void);
int optpipe_rt_abi_version(void);

/* ---- Schedule ------------------------------------------------------------------------------ */

typedef struct optpipe_rt_schedule optpipe_rt_schedule;

typedef enum optpipe_rt_time_unit {
  OPTPIPE_RT_TIME_MS = 0,
  OPTPIPE_RT_TIME_US = 1
} optpipe_rt_time_unit;

typedef enum optpipe_rt_placement {
  OPTPIPE_RT_PLACEMENT_LOOP = 0,
  OPTPIPE_RT_PLACEMENT_VSHAPE = 1,
  OPTPIPE_RT_PLACEMENT_EXPLICIT = 2
} optpipe_rt_placement;

typedef enum optpipe_rt_channel_mode {
  OPTPIPE_RT_CHANNELS_OF_SCHEDULE = -1, /* config only: the schedule's */
  OPTPIPE_RT_CHANNELS_SHARED = 0,       /* one copy queue for both directions */
  OPTPIPE_RT_CHANNELS_DUPLEX = 1        /* a D2H and an H2D queue */
} optpipe_rt_channel_mode;

typedef enum optpipe_rt_op {
  OPTPIPE_RT_OP_F = 0,
  OPTPIPE_RT_OP_B = 1,
  OPTPIPE_RT_OP_W = 2,
  OPTPIPE_RT_OP_BW = 3,
  OPTPIPE_RT_OP_OFFLOAD = 4,
  OPTPIPE_RT_OP_RELOAD = 5,
  OPTPIPE_RT_OP_R = 6 /* recompute: the forward again from its checkpoint, before the backward */
} optpipe_rt_op;

typedef struct optpipe_rt_schedule_info {
  int32_t ranks, stages, microbatches, chunks_per_rank;
  optpipe_rt_time_unit time_unit;
  optpipe_rt_placement placement;
  optpipe_rt_channel_mode channel_mode; /* SHARED or DUPLEX */
  int32_t has_offload_link;
  double p2p_latency; /* time unit */
  double d2h_bytes_per_time, h2d_bytes_per_time;
  uint8_t profile_sha256[32];
  char method[56]; /* NUL-terminated */
} optpipe_rt_schedule_info;

typedef struct optpipe_rt_stage_info {
  int32_t rank;
  double forward, backward_input, backward_weight; /* time unit */
  int64_t activation_bytes, weight_grad_bytes, offloadable_bytes;
  double recompute_forward; /* time unit */
  int64_t checkpoint_bytes; /* C: what F keeps of a recomputed activation; -1: cannot recompute */
} optpipe_rt_stage_info;

typedef struct optpipe_rt_rank_info {
  int64_t budget_bytes, static_bytes;
  int32_t link_group;
  int32_t action_count;
  /* Host bytes the offload engine needs: the pool high-water mark when the rank's actions run in
   * the runner's issue order (optpipe_rt_schedule_issue_order; a slot of the offload's planned
   * bytes is taken at OFFLOAD and given back after the consuming B/BW). */
  int64_t host_pool_bytes;
} optpipe_rt_rank_info;

typedef struct optpipe_rt_action {
  optpipe_rt_op op;
  int32_t stage, microbatch;
  double start, end; /* predicted, time unit */
  int64_t bytes;     /* transfers only */
} optpipe_rt_action;

/* Reads and checks a whole .opsched file (magic, byte order, version, size, CRC32, structure). */
optpipe_rt_status optpipe_rt_schedule_open(const char* path, optpipe_rt_schedule** out);
optpipe_rt_status optpipe_rt_schedule_open_memory(const void* data, size_t size,
                                                  optpipe_rt_schedule** out);
void optpipe_rt_schedule_close(optpipe_rt_schedule* schedule);
optpipe_rt_status optpipe_rt_schedule_get_info(const optpipe_rt_schedule* schedule,
                                               optpipe_rt_schedule_info* out);
optpipe_rt_status optpipe_rt_schedule_get_stage(const optpipe_rt_schedule* schedule, int stage,
                                                optpipe_rt_stage_info* out);
optpipe_rt_status optpipe_rt_schedule_get_rank(const optpipe_rt_schedule* schedule, int rank,
                                               optpipe_rt_rank_info* out);
/* Action `index` (0-based, in the rank's order: predicted start) of `rank`. */
optpipe_rt_status optpipe_rt_schedule_get_action(const optpipe_rt_schedule* schedule, int rank,
                                                 int index, optpipe_rt_action* out);

/* The rank's action indices (as optpipe_rt_schedule_get_action numbers them) in the order the
 * runner issues them: each transfer right after the last compute op that ends by its predicted
 * start (docs/runtime-shim.md, "Runner"). The host pool is sized in this order, and a trainer that
 * drives the offload engine itself must issue its transfers in it. `indices` holds `capacity`
 * entries; *count receives the action count (E_INVALID_ARGUMENT when capacity is smaller). */
optpipe_rt_status optpipe_rt_schedule_issue_order(const optpipe_rt_schedule* schedule, int rank,
                                                  int32_t* indices, int capacity, int* count);

/* ---- Rank runtime: offload engine, runner, timing recorder ---------------------------------- */

typedef struct optpipe_rt_rank optpipe_rt_rank;

typedef enum optpipe_rt_backend {
  OPTPIPE_RT_BACKEND_AUTO = 0, /* CUDA when built and a device is present, else CPU */
  OPTPIPE_RT_BACKEND_CPU = 1,  /* copy threads and host buffers: "device" memory is host memory */
  OPTPIPE_RT_BACKEND_CUDA = 2
} optpipe_rt_backend;

typedef struct optpipe_rt_config {
  uint32_t struct_size; /* sizeof(optpipe_rt_config) as the caller knows it: optpipe_rt_config_init
                           sets it; the library reads that many bytes and defaults the rest */
  optpipe_rt_backend backend;
  optpipe_rt_channel_mode channel_mode;
  int64_t host_pool_bytes;       /* 0: the schedule's optpipe_rt_rank_info.host_pool_bytes */
  int64_t host_pool_limit_bytes; /* 0: none; else refuse (E_HOST_POOL) a larger pool up front */
  int32_t cuda_device;
  void* cuda_compute_stream; /* cudaStream_t the trainer computes on; NULL = legacy default */
  int32_t verify_checksums;  /* 1: CRC32 each offloaded buffer and check it after reload */
  /* CPU backend only: emulate a link of this many bytes per second (0: copy at memcpy speed). */
  double cpu_emulated_bytes_per_second;
} optpipe_rt_config;

/* Defaults: AUTO backend, the schedule's channel mode and pool size, no checksums; struct_size. */
void optpipe_rt_config_init(optpipe_rt_config* config);

/* Opens `rank` of an opened schedule (the rank handle keeps the schedule's data alive, so the
 * schedule may be closed first). Allocates the pinned host pool now: fails with E_HOST_POOL,
 * naming the size, when it cannot. `config` may be NULL for defaults. */
optpipe_rt_status optpipe_rt_rank_open(const optpipe_rt_schedule* schedule, int rank,
                                       const optpipe_rt_config* config, optpipe_rt_rank** out);
/* optpipe_rt_schedule_open + optpipe_rt_rank_open. */
optpipe_rt_status optpipe_rt_open(const char* path, int rank, const optpipe_rt_config* config,
                                  optpipe_rt_rank** out);
/* Waits for outstanding copies, frees the pool. */
void optpipe_rt_rank_close(optpipe_rt_rank* rank);
/* Which backend the rank runs on (OPTPIPE_RT_BACKEND_CPU or _CUDA). */
int optpipe_rt_rank_backend(const optpipe_rt_rank* rank);

/* Offload engine. `device_ptr` is device memory on CUDA, any memory on the CPU backend. */
/* Async D2H of activation (stage, mb) into a host pool slot, after the work already issued on the
 * compute stream (the producing F). The device buffer must stay valid until the copy has ended:
 * see optpipe_rt_transfer_done / optpipe_rt_synchronize. */
optpipe_rt_status optpipe_rt_offload(optpipe_rt_rank* rank, int stage, int microbatch,
                                     const void* device_ptr, size_t bytes);
/* The same for an activation held in `count` device buffers (the storages its saved tensors
 * view), copied straight into one host slot, each at a 16-byte boundary of it: no packed device
 * copy is made. Every buffer must stay valid until the copy has ended. */
optpipe_rt_status optpipe_rt_offload_segments(optpipe_rt_rank* rank, int stage, int microbatch,
                                              const void* const* device_ptrs, const size_t* bytes,
                                              size_t count);
/* Async H2D of the offloaded bytes back into `device_ptr` (as many bytes as were offloaded: the
 * segments at their offsets in the slot), after the offload has ended. */
optpipe_rt_status optpipe_rt_reload(optpipe_rt_rank* rank, int stage, int microbatch,
                                    void* device_ptr);
/* Async H2D of each offloaded segment into its own device buffer (`count` as offloaded, each of
 * its segment's size), after the offload has ended. */
optpipe_rt_status optpipe_rt_reload_segments(optpipe_rt_rank* rank, int stage, int microbatch,
                                             void* const* device_ptrs, size_t count);
/* The compute stream waits for the latest transfer of (stage, mb): on CUDA an event wait (the host
 * does not block), on CPU the calling thread blocks. Verifies the checksum after a reload when
 * verify_checksums is set (E_CORRUPT on mismatch). */
optpipe_rt_status optpipe_rt_wait(optpipe_rt_rank* rank, int stage, int microbatch);
/* The host blocks until the latest transfer of (stage, mb) has ended. */
optpipe_rt_status optpipe_rt_synchronize(optpipe_rt_rank* rank, int stage, int microbatch);
/* *done = 1 when the latest transfer of (stage, mb) has ended (non-blocking). */
optpipe_rt_status optpipe_rt_transfer_done(optpipe_rt_rank* rank, int stage, int microbatch,
                                           int* done);
/* Gives the host slot of (stage, mb) back to the pool (after its reload has ended). */
optpipe_rt_status optpipe_rt_release(optpipe_rt_rank* rank, int stage, int microbatch);
/* Host bytes of the pool in use now, and its size. */
optpipe_rt_status optpipe_rt_host_pool_usage(const optpipe_rt_rank* rank, int64_t* used_bytes,
                                             int64_t* capacity_bytes);

/* Runner. Every callback returns 0 on success; non-zero stops the run with E_CALLBACK. NULL hooks
 * are skipped, except forward and backward_input/backward_weight (or backward, for fused BW
 * schedules), and recompute for schedules with R, which the schedule needs. p2p hooks are called
 * only where the neighbouring stage lives on another rank. */
typedef struct optpipe_rt_callbacks {
  uint32_t struct_size; /* sizeof(optpipe_rt_callbacks) as the caller knows it:
                           optpipe_rt_callbacks_init sets it; hooks past it are NULL */
  int (*forward)(void* user, int stage, int microbatch);
  int (*backward_input)(void* user, int stage, int microbatch);
  int (*backward_weight)(void* user, int stage, int microbatch);
  int (*backward)(void* user, int stage, int microbatch);      /* fused BW; NULL: B then W */
  int (*recv_forward)(void* user, int stage, int microbatch);  /* before F, from stage - 1 */
  int (*send_forward)(void* user, int stage, int microbatch);  /* after F, to stage + 1 */
  int (*recv_backward)(void* user, int stage, int microbatch); /* before B/BW, from stage + 1 */
  int (*send_backward)(void* user, int stage, int microbatch); /* after B/BW, to stage - 1 */
  /* OFFLOAD: the device buffer holding the activation's offloadable part. */
  int (*offload_source)(void* user, int stage, int microbatch, const void** device_ptr,
                        size_t* bytes);
  /* The offload of (stage, mb) has ended: its device buffer may be freed. */
  int (*offload_complete)(void* user, int stage, int microbatch);
  /* RELOAD: a device buffer of `bytes` to bring the activation back into. */
  int (*reload_target)(void* user, int stage, int microbatch, size_t bytes, void** device_ptr);
  /* R: run the forward of (stage, mb) again from the checkpoint its F kept, rebuilding what its
   * backward reads. Local: no p2p. See optpipe_rt_recomputed. */
  int (*recompute)(void* user, int stage, int microbatch);
  /* Since ABI version 4. OFFLOAD of an activation held in several device buffers (used instead of
   * offload_source when set): *count buffers, *device_ptrs and *bytes arrays of them that stay
   * valid until the next callback; each buffer until offload_complete. No packed copy is made. */
  int (*offload_segments)(void* user, int stage, int microbatch, const void* const** device_ptrs,
                          const size_t** bytes, size_t* count);
  /* RELOAD into one device buffer per offloaded segment (used instead of reload_target when
   * set): fill device_ptrs[0..count) with buffers of bytes[0..count). */
  int (*reload_segments)(void* user, int stage, int microbatch, size_t count, const size_t* bytes,
                         void** device_ptrs);
} optpipe_rt_callbacks;

/* Every hook NULL, struct_size set. */
void optpipe_rt_callbacks_init(optpipe_rt_callbacks* callbacks);

/* *recomputed = 1 when the rank's schedule recomputes (stage, mb): its forward should keep only the
 * checkpoint (checkpoint_bytes, usually the stage input) and free the rest when it ends. */
optpipe_rt_status optpipe_rt_recomputed(const optpipe_rt_rank* rank, int stage, int microbatch,
                                        int* recomputed);

/* Runs one iteration of the rank's schedule: walks its actions in order (predicted start), calls
 * compute and p2p callbacks, issues offloads and reloads where the schedule puts them, makes each
 * B/BW of an offloaded activation wait for its reload and then releases the host slot. Before each
 * allocation point (F, RELOAD, R) it waits for the offloads the schedule has ended by then, so
 * device memory never exceeds what the schedule predicts. Records op timings. */
optpipe_rt_status optpipe_rt_run(optpipe_rt_rank* rank, const optpipe_rt_callbacks* callbacks,
                                 void* user);

/* ---- Timing recorder --------------------------------------------------------------------------
 */

/* Median measured duration of (op, stage) over the iterations run so far, in the schedule's time
 * unit; *samples = 0 when never measured. op: F, B, W, BW or R. */
optpipe_rt_status optpipe_rt_measured(const optpipe_rt_rank* rank, int op, int stage,
                                      double* median, int* samples);
/* Bandwidth of the finished offloads (D2H) and reloads (H2D) so far, bytes per time unit, and
 * how many copies each figure is over (0: none ran, bandwidth 0). */
optpipe_rt_status optpipe_rt_measured_bandwidth(const optpipe_rt_rank* rank, double* d2h,
                                                int* d2h_copies, double* h2d, int* h2d_copies);
/* Wall time of the last run, first action start to last end, in the time unit. */
optpipe_rt_status optpipe_rt_last_makespan(const optpipe_rt_rank* rank, double* makespan);

/* Writes a measured optpipe.profile/v1 JSON at `path`: the schedule's pipeline, memory and link,
 * with the median times measured by `ranks` (n handles of one schedule, e.g. all in-process ranks)
 * replacing the predicted times of the stages they ran (R's as recompute_forward); bandwidths
 * measured from transfers when any ran. Stages no handle measured keep the schedule's times. */
optpipe_rt_status optpipe_rt_write_measured_profile(const optpipe_rt_rank* const* ranks, size_t n,
                                                    const char* name, const char* path);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif
#ifdef __cplusplus
}
#endif

#endif /* OPTPIPE_RT_H_ */
