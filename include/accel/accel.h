/*
 * accel.h - the C interface of libaccel.
 *
 * libaccel runs one training program unchanged on one CPU, many processes and many machines, with
 * the semantics of Hugging Face Accelerate. This header is the whole public interface: plain C99,
 * no other header needed beyond <stdint.h>, <stddef.h> and <stdbool.h>. It is written for the
 * authors of language bindings first: every rule a binding relies on is stated here.
 *
 * ------------------------------------------------------------------------------------------------
 * Conventions (they hold for every function below unless its comment says otherwise)
 * ------------------------------------------------------------------------------------------------
 *
 * Status and errors
 *  - Every fallible function returns an accel_status (int32_t). ACCEL_OK (0) is success; every
 *    other value names one class of error. No C++ exception, abort or exit ever crosses this
 *    interface, and no input makes the library crash the host program.
 *  - A call that fails changes nothing the caller can observe: every object it was given is as it
 *    was before the call, no file it was asked to write is left half-written where a later call
 *    would read it, and no resource is leaked. The few exceptions are stated in the function's
 *    comment (a collective that fails because a peer died leaves the process group unusable;
 *    accel_load_state runs the program's own load callbacks before it applies the rest).
 *  - Every numeric input is checked where it enters, whichever function it enters through: a
 *    value that is not finite or is out of the key's range is ACCEL_ERR_INVALID_ARGUMENT (or
 *    ACCEL_ERR_CONFIG for configuration keys) naming the key.
 *  - The message of a failure is per OS thread: accel_last_error_message() on the thread that made
 *    the failing call, before that thread makes another accel call that fails. A binding whose
 *    calls may move between OS threads (Go's goroutines, Julia's tasks on several threads) must
 *    read the message on the thread that made the call and before anything else runs there: Go,
 *    in the same cgo call as the failing function (a small C shim that makes the call and, on
 *    failure, copies status and message), or with runtime.LockOSThread around both; Julia, right
 *    after the ccall with nothing that yields in between; Rust, at once on the same thread.
 *
 * Handles and ownership
 *  - Handles are opaque pointers. NULL where a handle is required is ACCEL_ERR_INVALID_ARGUMENT; a
 *    handle of another kind (an accel_config* cast to an accel_tensor*, say) is
 *    ACCEL_ERR_WRONG_HANDLE; neither is undefined behaviour. A handle already freed is undefined
 *    behaviour (it is detected when its memory has not been reused, not always).
 *  - Output parameters come last. The caller owns what a constructor or an `out` parameter
 *    returns and releases it with the matching accel_<type>_free. On failure, outputs are left
 *    untouched (the size outputs of the buffer convention below excepted) and nothing is leaked.
 *    A returned `const` pointer is borrowed: its comment says how long it lives.
 *  - Handles keep what they need alive: a dataloader its dataset, an optimizer its model, a
 *    prepared object its place in the accelerator. Free them in any order.
 *  - Every accel_<type>_free accepts NULL, returns nothing, may be called from any thread (the
 *    finalizers of garbage-collected languages run on arbitrary threads), never waits for other
 *    ranks and never waits for a lock held across a collective. Its comment says exactly what it
 *    waits for. A handle of the wrong kind given to a free function is left alone (the error is
 *    recorded as for any failing call).
 *
 * Arrays and text: one convention
 *  - Results whose size the caller can know before the call (text, a tensor's data and shape, the
 *    fields of a batch) are written into caller memory given as (buffer, capacity, out_size or
 *    out_count). `capacity` counts bytes for text and data and elements for other arrays;
 *    *out_size / *out_count receives the size the result needs (text: including the terminating
 *    NUL). When the buffer is too small (or NULL with a nonzero need) the function fails with
 *    ACCEL_ERR_BUFFER_TOO_SMALL before doing anything else, still writing the needed size, so that
 *    asking again with a larger buffer is safe and nothing happens twice.
 *  - Results whose number is known only once the work is done (the outputs of a model method,
 *    the entries of gather_object) come back as a list the library owns (accel_tensor_list,
 *    accel_bytes_list): one call, never a second run.
 *  - Strings given to the library are UTF-8 and NUL-terminated. Numbers in text ("0.01", "1e-5",
 *    YAML values, checkpoint files) are read and written in the C locale's format, whatever
 *    setlocale() or std::locale::global() the host program chose.
 *
 * Callbacks
 *  - A function that takes a callback takes it with a `void* user_data` passed back on every call,
 *    and an optional accel_release_fn: the library calls it exactly once with `user_data`, after
 *    the last call of the callback has returned and when no later call can happen, so a binding
 *    frees its closure state there. On failure of the registering call neither is ever called.
 *  - Callbacks return int32_t: 0 is success; anything else fails the operation that called them
 *    with ACCEL_ERR_CALLBACK. Each callback's comment names the threads it runs on and what it may
 *    call back into.
 *
 * Types
 *  - Enumerations are fixed-width: the type is a typedef of int32_t and its values are constants
 *    (ACCEL_DTYPE_F32, ...). Ranks and process counts are int32_t. Counts of data (tensor
 *    elements, samples, batches) and the indexes into them are int64_t, as in LibTorch. Counts of
 *    and indexes into arrays the caller passes or receives (dimensions, fields, list entries) and
 *    sizes in bytes are size_t.
 *
 * Names
 *  - Types are accel_<noun>; constants ACCEL_<NOUN>_<NAME>.
 *  - Every function of a type is accel_<type>_<verb or property>: accel_tensor_shape,
 *    accel_dataloader_next. Constructors are accel_<type>_new, accel_<type>_from_<source> or
 *    accel_<type>_load_<format>; the destructor is always accel_<type>_free.
 *  - The accelerator is the root object and Accelerate's Accelerator: its constructor is
 *    accel_init, its destructor accel_accelerator_free, and its operations and properties keep
 *    Accelerate's names with no noun: accel_prepare, accel_backward, accel_gather,
 *    accel_save_state, accel_process_index, accel_num_processes, accel_sync_gradients. Functions
 *    that mirror an Accelerate utility keep its name too (accel_load_checkpoint_in_model).
 *  - A query is named by what it returns, never with _get (accel_tensor_dtype,
 *    accel_mixed_precision); a property setter is _set_<property> (accel_optimizer_set_lr).
 *    _get and _set alone take a key or an index into a container: accel_config_set(key, value),
 *    accel_dataloader_set(key, value), accel_tensor_list_get(index).
 *  - A number of things is <thing>_count (accel_tensor_element_count,
 *    accel_dataloader_batch_count); a size in bytes is _size (accel_dtype_size,
 *    accel_tensor_data_size).
 *
 * Threads
 *  - Every function may be called from any thread. Which calls may run at the same time:
 *  - accel_config, accel_tensor, accel_tensor_list, accel_bytes_list, accel_dataset,
 *    accel_tokenizer: any calls, on the same handle or on different ones, at once (a config's
 *    writes are serialised inside; the others are not changed by any function of this interface).
 *  - A training family is an accelerator together with every model, optimizer and scheduler
 *    prepared with it; before preparation, a model together with the optimizers and schedulers
 *    made over it is a family of its own, and accel_prepare joins it to the accelerator's. The
 *    library serialises the calls into one family with a lock held for the whole call: calls from
 *    several threads are safe and run one after the other. Distinct families run in parallel. The
 *    accelerator's collectives run in the order their calls take that lock: to keep the order
 *    identical on every rank, make collectives from one thread (or order them yourself).
 *  - An accel_dataloader serialises the calls on it with a lock of its own; its sample callbacks
 *    run with no libaccel lock held.
 *  - The accelerator's queries (accel_process_index, accel_local_process_index,
 *    accel_num_processes, accel_is_main_process, accel_is_local_main_process, accel_device,
 *    accel_distributed_type, accel_mixed_precision, accel_effective_config) never block.
 *  - A free must not run while another call on the same handle is running (a binding's last use
 *    of a handle must happen before its free); calls on other handles may be running.
 */
#ifndef ACCEL_ACCEL_H
#define ACCEL_ACCEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32) && !defined(__GNUC__)
#ifdef ACCEL_BUILD
#define ACCEL_API __declspec(dllexport)
#else
#define ACCEL_API __declspec(dllimport)
#endif
#else
#define ACCEL_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ----------------------------------------------------------------------------------------------------
 * Versions
 *
 * While the major version is 0, the minor version is the ABI: 0.1 and 0.2 are incompatible, and
 * the shared library's SONAME carries both (libaccel.so.0.2); the CMake package accepts only the
 * same major.minor (find_package(accel 0.2)); patch releases only add. From 1.0 on the major
 * version alone is the ABI (libaccel.so.1). A binding checks at run time that
 * accel_version_number() lies in the range it supports, e.g. [0.2.0, 0.3.0).
 * -------------------------------------------------------------------------------------------------
 */

#define ACCEL_VERSION_MAJOR 0
#define ACCEL_VERSION_MINOR 2
#define ACCEL_VERSION_PATCH 4
/** The version as one comparable number: major * 10000 + minor * 100 + patch (0.2.0 is 200). */
#define ACCEL_VERSION_NUMBER \
  (ACCEL_VERSION_MAJOR * 10000 + ACCEL_VERSION_MINOR * 100 + ACCEL_VERSION_PATCH)
/** True when this header is at least version major.minor.patch. */
#define ACCEL_VERSION_CHECK(major, minor, patch) \
  (ACCEL_VERSION_NUMBER >= ((major)*10000 + (minor)*100 + (patch)))

/** The version of the library actually loaded, as "major.minor.patch" (static storage). */
ACCEL_API const char* accel_version(void);

/**
 * The version of the library actually loaded as one number, computed as ACCEL_VERSION_NUMBER is.
 * Compare it with the header's ACCEL_VERSION_NUMBER, or with the range a binding supports.
 */
ACCEL_API uint32_t accel_version_number(void);

/* ----------------------------------------------------------------------------------------------------
 * Status codes and errors
 * -------------------------------------------------------------------------------------------------
 */

/** Result of every fallible call: one of the ACCEL_OK / ACCEL_ERR_* values below. */
typedef int32_t accel_status;

/** Values are stable: new classes are only ever appended. */
enum accel_status_values {
  ACCEL_OK = 0,
  /** A required pointer was NULL, or a numeric or text argument is out of range. */
  ACCEL_ERR_INVALID_ARGUMENT = 1,
  /** A handle of another kind was passed (or a handle already freed, when that can be detected). */
  ACCEL_ERR_WRONG_HANDLE = 2,
  /** A configuration key is unknown or its value is invalid (file, environment variable or setter).
   */
  ACCEL_ERR_CONFIG = 3,
  /** Understood but not supported by this build (DeepSpeed, FSDP, TPU, fp16 on CPU...). */
  ACCEL_ERR_UNSUPPORTED = 4,
  /** A file could not be read or written, or is corrupt. */
  ACCEL_ERR_IO = 5,
  /** Tensor shapes disagree (across ranks, or with what the call needs). */
  ACCEL_ERR_SHAPE = 6,
  /** A tensor's dtype is not acceptable for the call, or dtypes disagree across ranks. */
  ACCEL_ERR_DTYPE = 7,
  /** The processes could not meet: a rank never arrived, the store is unreachable, a port is in
     use. */
  ACCEL_ERR_RENDEZVOUS = 8,
  /** A collective did not complete within the collective timeout (a peer hung). */
  ACCEL_ERR_TIMEOUT = 9,
  /** A peer process died or closed its connection during a collective. */
  ACCEL_ERR_PEER_FAILED = 10,
  /** The call is not valid in the current state (a collective after the process group failed, a
     closed dataloader, a call from inside a callback that may not make it). */
  ACCEL_ERR_STATE = 11,
  /** An output buffer was too small; the needed size was written to the size output. */
  ACCEL_ERR_BUFFER_TOO_SMALL = 12,
  /** A user callback reported failure. */
  ACCEL_ERR_CALLBACK = 13,
  /** Memory could not be allocated. */
  ACCEL_ERR_OUT_OF_MEMORY = 14,
  /** LibTorch reported an error that fits no other class; its message is kept. */
  ACCEL_ERR_TORCH = 15,
  /** An internal error (a bug in libaccel); the message says what. */
  ACCEL_ERR_INTERNAL = 16,
  /** A call that waits gave up because the program interrupted it (accel_set_interrupted). */
  ACCEL_ERR_CANCELLED = 17
};

/**
 * The message of the last failed call on the calling OS thread (UTF-8, never NULL; "" if no call
 * on this thread has failed yet). Borrowed: valid until the next failing accel call on the same
 * thread. A successful call does not clear it, so read it only after a failure, on the same thread
 * (see "Status and errors" at the top).
 */
ACCEL_API const char* accel_last_error_message(void);

/** The status of the last failed call on the calling OS thread (ACCEL_OK if none has failed). */
ACCEL_API accel_status accel_last_error_status(void);

/** A constant name for a status value, e.g. "ACCEL_ERR_CONFIG" (static storage; never NULL). */
ACCEL_API const char* accel_status_name(accel_status status);

/** Called once with a callback's user_data when the library will never call that callback again
 * (see "Callbacks" at the top). It runs on the thread whose call dropped the last use. */
typedef void (*accel_release_fn)(void* user_data);

/* ----------------------------------------------------------------------------------------------------
 * Configuration
 *
 * An accel_config holds settings by key. Keys and values are those of Accelerate's YAML
 * configuration (compute_environment, distributed_type, mixed_precision, num_processes,
 * num_machines, machine_rank, main_process_ip, main_process_port, use_cpu, gpu_ids, ...) plus
 * libaccel's own:
 *   debug                        Accelerate's debug mode (ACCELERATE_DEBUG_MODE): accel_init
 *                                prints one line to stderr saying where this rank stands (rank,
 *                                local rank and who said so, threads, device, all-reduce transport,
 *                                store and its source). Collectives always check shapes.
 *   gradient_accumulation_steps  integer >= 1                    (default 1; when nothing sets
 *                                it, deepspeed_config's gradient_accumulation_steps, as Accelerate)
 *   rendezvous_timeout           seconds > 0: how long init waits for every rank (default 120)
 *   collective_timeout           seconds > 0: how long one collective may take (default 300)
 *   num_threads                  intra-op threads per rank; 0 = cores / local ranks (default 0)
 *   malloc_tuning                keep freed tensor memory in the process for the next step instead
 *                                of returning it to the kernel: CPU tensors of 1 MiB and more from
 *                                blocks kept by size while recent optimizer steps use them (LibTorch's
 *                                CPU allocator replaced; not in AddressSanitizer builds), smaller
 *                                ones from glibc with mmap threshold 32 MiB, trim threshold 64 MiB
 *                                (unless MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_ or
 *                                GLIBC_TUNABLES set them) (default true)
 *   shared_memory_allreduce      when all ranks share one machine, all-reduce fp32/fp64/int32/
 *                                int64 CPU tensors (gradients included) through shared memory
 *                                instead of TCP over loopback; falls back to TCP by itself when
 *                                /dev/shm cannot be used (default true)
 *   collective_transport         what carries CPU collectives that shared memory does not: tcp
 *                                (libaccel's own; every connection proves the job token) or gloo
 *                                (LibTorch's, whose listener authenticates nothing; kept for
 *                                comparison) (default tcp)
 *   split_batches, even_batches  defaults for this accelerator's dataloaders (false, true), as
 *                                Accelerate's DataLoaderConfiguration
 *   data_seed                    every dataloader's default `seed` (-1: none, the loader's own 0);
 *                                use_seedable_sampler is accepted (true; libaccel's shuffle is always
 *                                a function of (seed, epoch), Accelerate's seedable sampler)
 *   sync_each_batch              Accelerate's GradientAccumulationPlugin: reduce gradients on every
 *                                micro-step (less memory held), optimizers still step on sync
 *                                steps only (default false)
 *   sync_with_dataloader         the last batch of the dataloader in use is a sync step and restarts
 *                                the count (default true)
 *   adjust_scheduler             accepted (default true) and, as in Accelerate 1.15, without
 *                                effect: its GradientAccumulationPlugin.to_kwargs drops the
 *                                default and GradientState reads the missing value as false, so a
 *                                micro-step never counts towards a schedule's end there either
 *   device_placement             accel_prepare moves models to the device (default true)
 *   step_scheduler_with_optimizer  schedulers step only with real optimizer steps, N times on N
 *                                processes (default true); false: once per accel_scheduler_step
 *   project_dir, automatic_checkpoint_naming, total_limit   where accel_save_state(acc, NULL) goes
 *                                ("", false, 0 = keep all), as Accelerate's ProjectConfiguration
 *   save_on_each_node            ProjectConfiguration's: on several machines each machine's local
 *                                main process writes its own copy of every checkpoint (false)
 *   log_with, logging_dir        the trackers a run writes and where ("Trackers" below; none, and
 *                                project_dir)
 *
 * Precedence, highest first:
 *   1. accel_config_set            (an explicit setter in the program)
 *   2. environment variables       (ACCELERATE_MIXED_PRECISION, ACCELERATE_USE_CPU,
 *                                   ACCELERATE_GRADIENT_ACCUMULATION_STEPS, ACCELERATE_DEBUG_MODE,
 *                                   ACCEL_RENDEZVOUS_TIMEOUT, ACCEL_COLLECTIVE_TIMEOUT,
 *                                   ACCEL_NUM_THREADS, ACCEL_MALLOC_TUNING,
 *                                   ACCEL_SHARED_MEMORY_ALLREDUCE, ACCEL_SPLIT_BATCHES,
 *                                   ACCEL_EVEN_BATCHES, ACCEL_DATA_SEED, ACCEL_SYNC_EACH_BATCH,
 *                                   ACCEL_LOG_WITH, ACCEL_LOGGING_DIR, ...: ACCEL_ and the key)
 *   3. the YAML file               (accel_config_load_file, or the file named by ACCEL_CONFIG_FILE,
 *                                   which `accel launch` sets for its ranks)
 *   4. built-in defaults
 *
 * All three sources go through one validation: an unknown key or a bad value is ACCEL_ERR_CONFIG
 * with a message naming the key, where it came from (file:line, variable name, or setter) and the
 * allowed values. Accelerate keys libaccel knows but does not support (tpu_*, dynamo_config, ...)
 * are accepted when empty or neutral (as Accelerate writes them) and otherwise rejected with
 * ACCEL_ERR_UNSUPPORTED, never silently dropped. distributed_type FSDP or DEEPSPEED with
 * fsdp_config / deepspeed_config choose a ZeRO stage, 0 to 3 (docs/configuration.md); accel_init
 * checks every key inside them and refuses what this build lacks (hybrid sharding, offload) with
 * ACCEL_ERR_UNSUPPORTED naming the key. An ACCEL_* variable that
 * is one or two letters away from one listed above is taken for a typo and reported. Environment
 * variables are read when the configuration is resolved: by accel_init, accel_config_get and
 * accel_config_dump.
 * -------------------------------------------------------------------------------------------------
 */

/** A set of settings. Not shared with the accelerator: accel_init copies what it needs. */
typedef struct accel_config accel_config;

/** Creates an empty configuration (every key at its default). Free with accel_config_free. */
ACCEL_API accel_status accel_config_new(accel_config** out);

/** Frees a configuration. NULL is a no-op. Waits for nothing. */
ACCEL_API void accel_config_free(accel_config* config);

/**
 * Sets `key` to `value` (text, as it would appear in the YAML file: "bf16", "2", "true", "0.5").
 * Validated at once: an unknown key or a bad value fails and leaves the configuration unchanged.
 */
ACCEL_API accel_status accel_config_set(accel_config* config, const char* key, const char* value);

/**
 * Loads an Accelerate YAML (or JSON) configuration file into the file layer, replacing any file
 * loaded before. `path` NULL means Accelerate's default location:
 * $HF_HOME/accelerate/default_config.yaml, else
 * $XDG_CACHE_HOME/huggingface/accelerate/default_config.yaml, else
 * ~/.cache/huggingface/accelerate/default_config.yaml; when none of them exists, nothing is loaded
 * and the call succeeds. An unreadable file is ACCEL_ERR_IO; bad YAML, an unknown key or a bad
 * value is ACCEL_ERR_CONFIG naming file:line; on any failure the configuration is unchanged.
 */
ACCEL_API accel_status accel_config_load_file(accel_config* config, const char* path);

/**
 * Writes the resolved value of `key` (setter > environment > file > default) as text into `buf`
 * (the buffer convention at the top).
 */
ACCEL_API accel_status accel_config_get(const accel_config* config, const char* key, char* buf,
                                        size_t capacity, size_t* out_size);

/**
 * Writes the effective configuration as YAML into `buf`: every key with its resolved value and, as
 * a comment on the same line, the source it came from ("default", "env ACCELERATE_MIXED_PRECISION",
 * "file /path/config.yaml:7", "setter"). Buffer convention.
 */
ACCEL_API accel_status accel_config_dump(const accel_config* config, char* buf, size_t capacity,
                                         size_t* out_size);

/* ----------------------------------------------------------------------------------------------------
 * Tensors
 *
 * Tensors cross the interface by copy. Shapes are arrays of int64_t, row-major (C order). No
 * function of this interface changes a tensor after it is made.
 * -------------------------------------------------------------------------------------------------
 */

/** Element types: one of the ACCEL_DTYPE_* values. */
typedef int32_t accel_dtype;

/** Values are stable. */
enum accel_dtype_values {
  ACCEL_DTYPE_F32 = 1,
  ACCEL_DTYPE_F64 = 2,
  ACCEL_DTYPE_F16 = 3,
  ACCEL_DTYPE_BF16 = 4,
  ACCEL_DTYPE_I64 = 5,
  ACCEL_DTYPE_I32 = 6,
  ACCEL_DTYPE_I16 = 7,
  ACCEL_DTYPE_I8 = 8,
  ACCEL_DTYPE_U8 = 9,
  ACCEL_DTYPE_BOOL = 10
};

/** Maximum number of dimensions a tensor may have across this interface. */
#define ACCEL_MAX_DIMS 16

/** A tensor (a LibTorch tensor underneath). */
typedef struct accel_tensor accel_tensor;

/** Size in bytes of one element of `dtype`, or 0 when `dtype` is not an accel_dtype value. */
ACCEL_API size_t accel_dtype_size(accel_dtype dtype);

/**
 * Creates a CPU tensor of `dtype` and shape `shape[0..dim_count)` by copying `data`, which must
 * hold product(shape) * accel_dtype_size(dtype) bytes (exactly `size`, checked). `dim_count` 0
 * makes a scalar; `shape` may be NULL only then. `data` is not retained.
 */
ACCEL_API accel_status accel_tensor_from_data(const void* data, size_t size, accel_dtype dtype,
                                              const int64_t* shape, size_t dim_count,
                                              accel_tensor** out);

/**
 * Copies the tensor's elements (row-major, made contiguous, from any device) into `buf` of
 * `capacity` bytes; `*out_size` receives the tensor's size in bytes (accel_tensor_data_size).
 * Buffer convention: too small is ACCEL_ERR_BUFFER_TOO_SMALL, nothing written but `*out_size`.
 */
ACCEL_API accel_status accel_tensor_to_data(const accel_tensor* tensor, void* buf, size_t capacity,
                                            size_t* out_size);

/** Frees a tensor. NULL is a no-op. Waits for nothing. */
ACCEL_API void accel_tensor_free(accel_tensor* tensor);

/** Number of dimensions (0 for a scalar). */
ACCEL_API accel_status accel_tensor_dim_count(const accel_tensor* tensor, size_t* out);

/**
 * Copies the shape into `shape[0..capacity)`; `*out_count` receives the number of dimensions.
 * Buffer convention (capacity in elements).
 */
ACCEL_API accel_status accel_tensor_shape(const accel_tensor* tensor, int64_t* shape,
                                          size_t capacity, size_t* out_count);

/** Element type. A LibTorch dtype with no accel_dtype equivalent is ACCEL_ERR_DTYPE. */
ACCEL_API accel_status accel_tensor_dtype(const accel_tensor* tensor, accel_dtype* out);

/** Number of elements. */
ACCEL_API accel_status accel_tensor_element_count(const accel_tensor* tensor, int64_t* out);

/** Size of the elements in bytes (element count * element size). */
ACCEL_API accel_status accel_tensor_data_size(const accel_tensor* tensor, size_t* out);

/** The value of a one-element tensor as a double. More than one element is ACCEL_ERR_SHAPE. */
ACCEL_API accel_status accel_tensor_item_f64(const accel_tensor* tensor, double* out);

/** The value of a one-element integer or bool tensor as int64. Floating point is ACCEL_ERR_DTYPE.
 */
ACCEL_API accel_status accel_tensor_item_i64(const accel_tensor* tensor, int64_t* out);

/**
 * Interop, no copy: wraps an existing LibTorch tensor, given as a pointer to an `at::Tensor` (a
 * `torch::Tensor*`, as tch-rs and gotch hold them) from the very same LibTorch build libaccel
 * links. The new handle shares the tensor's storage (a reference is taken; the caller's at::Tensor
 * may be destroyed afterwards). Passing anything else is undefined behaviour: this is the one call
 * that trusts its argument.
 */
ACCEL_API accel_status accel_tensor_wrap_torch(void* torch_tensor, accel_tensor** out);

/**
 * Interop, no copy: the `at::Tensor*` inside `tensor`. Borrowed: valid until `tensor` is freed.
 * Changing the tensor through it is the caller's business (and outside the thread rules above).
 */
ACCEL_API accel_status accel_tensor_borrow_torch(const accel_tensor* tensor, void** out);

/**
 * Checks that a program which passes LibTorch objects across this interface
 * (accel_tensor_wrap_torch, accel_tensor_borrow_torch) uses the very LibTorch build libaccel runs
 * on. `version` is the program's LibTorch version as its headers say (TORCH_VERSION, "1.13.0");
 * `cxx11_abi` its _GLIBCXX_USE_CXX11_ABI (0 or 1; -1 when it cannot say); `cpu_allocator_fn` the
 * address of c10::GetCPUAllocator as the program sees it (NULL when it cannot take it): another
 * address means a second copy of libc10 is loaded. A mismatch is ACCEL_ERR_UNSUPPORTED naming both
 * builds (and the two library files where the addresses differ). accel.hpp calls it for C++.
 */
ACCEL_API accel_status accel_torch_check(const char* version, int32_t cxx11_abi,
                                         const void* cpu_allocator_fn);

/**
 * Sets whether autograd records operations on `tensor` (PyTorch's requires_grad_), so that a tensor
 * made from data can be lent to a model as a parameter (accel_model_add_parameter). Only on an
 * autograd leaf (otherwise ACCEL_ERR_INVALID_ARGUMENT) and, to require grad, a floating-point one
 * (otherwise ACCEL_ERR_DTYPE). It changes the tensor every handle of it shares: call it before the
 * tensor is shared with other threads.
 */
ACCEL_API accel_status accel_tensor_set_requires_grad(accel_tensor* tensor, bool requires_grad);

/** A list of tensors the library returns (the outputs of accel_model_call). */
typedef struct accel_tensor_list accel_tensor_list;

/** Number of tensors in the list. */
ACCEL_API accel_status accel_tensor_list_count(const accel_tensor_list* list, size_t* out);

/**
 * Entry `index` as a new tensor handle the caller frees (it shares the entry's storage and, for a
 * model output, its autograd history). The list keeps its own reference: getting an entry twice
 * gives two handles of the same tensor. An index out of range is ACCEL_ERR_INVALID_ARGUMENT.
 */
ACCEL_API accel_status accel_tensor_list_get(const accel_tensor_list* list, size_t index,
                                             accel_tensor** out);

/** Frees a list (the tensor handles taken from it stay valid). NULL is a no-op. Waits for nothing.
 */
ACCEL_API void accel_tensor_list_free(accel_tensor_list* list);

/* ----------------------------------------------------------------------------------------------------
 * The accelerator
 * -------------------------------------------------------------------------------------------------
 */

/** The runtime of one process: its place among the ranks, its device, its process group. */
typedef struct accel_accelerator accel_accelerator;

/** Accelerate's DistributedType, restricted to what libaccel runs: an ACCEL_DISTRIBUTED_* value. */
typedef int32_t accel_distribution;

/** Values are stable. */
enum accel_distribution_values {
  ACCEL_DISTRIBUTED_NO = 0,        /* one process */
  ACCEL_DISTRIBUTED_MULTI_CPU = 1, /* several processes on CPUs */
  ACCEL_DISTRIBUTED_MULTI_GPU = 2, /* several processes on CUDA devices */
  ACCEL_DISTRIBUTED_DEEPSPEED = 3, /* DeepSpeed's configuration chose the ZeRO stage */
  ACCEL_DISTRIBUTED_FSDP = 4       /* FSDP's configuration chose the ZeRO stage */
};

/** A mixed precision mode: an ACCEL_PRECISION_* value. */
typedef int32_t accel_precision;

/** Values are stable. */
enum accel_precision_values {
  ACCEL_PRECISION_NO = 0,
  ACCEL_PRECISION_FP16 = 1,
  ACCEL_PRECISION_BF16 = 2
};

/**
 * Creates the accelerator of this process. `config` may be NULL (defaults, environment variables
 * and ACCEL_CONFIG_FILE still apply); it is only read during the call.
 *
 * The process learns its place from the environment of the engine that started it, the innermost
 * first:
 *   - `accel launch`, torchrun, a Kubernetes PyTorchJob or variables set by hand: RANK,
 *     WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT. Under torchrun's agent
 *     store (TORCHELASTIC_USE_AGENT_STORE=True) every rank joins that store as a client;
 *     TORCHELASTIC_RESTART_COUNT keeps a restarted attempt apart from the keys of the one before.
 *   - Open MPI (OMPI_COMM_WORLD_*), MPICH/Intel MPI (PMI_RANK, PMI_SIZE, MPI_LOCALRANKID,
 *     MPI_LOCALNRANKS), MVAPICH (MV2_COMM_WORLD_*): the store is MASTER_ADDR:MASTER_PORT,
 *     defaulting to 127.0.0.1:29500 when every rank is on one host; ranks on several hosts
 *     without MASTER_ADDR are ACCEL_ERR_CONFIG.
 *   - SLURM's srun (SLURM_PROCID, SLURM_STEP_NUM_TASKS or SLURM_NTASKS, SLURM_LOCALID,
 *     SLURM_NODEID, SLURM_STEP_TASKS_PER_NODE, SLURM_STEP_NODELIST): the store is on the first
 *     host of the step, port MASTER_PORT or 15000 + the last four digits of SLURM_JOB_ID.
 * A variable that does not parse or is out of range, or two engines that disagree on the number
 * of processes, is ACCEL_ERR_CONFIG naming the variable and the engine. When the engine does not
 * say which ranks share a machine, the ranks find out from the host name and boot id they
 * exchange at start-up. Without any of these (or with a world of one) the process is alone and
 * opens no socket. Otherwise rank 0 serves libaccel's rendezvous store (on the socket `accel
 * launch` bound, else on 127.0.0.1 when every rank is on this machine, else on the address
 * MASTER_ADDR names; every interface only with ACCEL_LISTEN_ADDRESS=0.0.0.0), which answers only
 * ranks that prove the job token (ACCEL_JOB_TOKEN or the file ACCEL_JOB_TOKEN_FILE names; `accel
 * launch` makes one per one-machine job) and logs any other connection on stderr as refused;
 * ranks given different tokens fail with ACCEL_ERR_RENDEZVOUS saying so. Each rank then connects
 * to its two ring neighbours for collectives (on 127.0.0.1 when all are on this machine), each
 * connection proving the job token both ways; the listener that takes them closes once they are
 * in. One deadline, `rendezvous_timeout`, covers reaching the store and a census of every rank:
 * a rank whose store never listens fails with ACCEL_ERR_RENDEZVOUS saying how long it waited; if
 * some ranks never arrive, every rank that did fails naming the missing ranks.
 *
 * Two process-wide changes in a distributed run, both so that a failure is reported rather than
 * fatal or silent: when the environment shows a launching engine (accel launch, torchrun, Open
 * MPI, MPICH/Hydra, srun), the process asks to be killed when its parent dies (PR_SET_PDEATHSIG),
 * so that no rank outlives its job; and SIGPIPE, if its action is still the default, is ignored
 * (Gloo's and NCCL's writes to a peer that died would otherwise kill this rank before the failed
 * collective names the peer). A collective that fails names the rank that exited or stopped and its host.
 *
 * Intra-op threads (LibTorch and OpenBLAS) default to cores / ranks on this machine unless
 * OMP_NUM_THREADS or `num_threads` say otherwise. Only one accelerator may exist in a process at a
 * time (ACCEL_ERR_STATE otherwise).
 */
ACCEL_API accel_status accel_init(const accel_config* config, accel_accelerator** out);

/**
 * Frees the accelerator and leaves the process group. NULL is a no-op. Does not wait for other
 * ranks (call accel_wait_for_everyone first when they must all be done) and takes no lock: a call
 * on an object prepared with it that is running on another thread finishes first, with the
 * accelerator's resources, which are released when it returns. Objects prepared with it stay
 * valid handles; their calls that need the accelerator then fail with ACCEL_ERR_STATE. The
 * checkpoint callbacks are never called after this returns (their release functions are called
 * here, or at the end of such a running call).
 */
ACCEL_API void accel_accelerator_free(accel_accelerator* accelerator);

/** Global rank of this process, 0 <= rank < accel_num_processes. */
ACCEL_API accel_status accel_process_index(const accel_accelerator* accelerator, int32_t* out);

/** Rank of this process on its machine (LOCAL_RANK). */
ACCEL_API accel_status accel_local_process_index(const accel_accelerator* accelerator,
                                                 int32_t* out);

/** Number of processes in the job (WORLD_SIZE). */
ACCEL_API accel_status accel_num_processes(const accel_accelerator* accelerator, int32_t* out);

/** Whether this is the main process (global rank 0). */
ACCEL_API accel_status accel_is_main_process(const accel_accelerator* accelerator, bool* out);

/** Whether this is the main process of its machine (local rank 0). */
ACCEL_API accel_status accel_is_local_main_process(const accel_accelerator* accelerator, bool* out);

/** The device this process computes on, e.g. "cpu" or "cuda:1". Buffer convention. */
ACCEL_API accel_status accel_device(const accel_accelerator* accelerator, char* buf,
                                    size_t capacity, size_t* out_size);

/**
 * How the job is distributed (Accelerate's distributed_type): DEEPSPEED or FSDP when Accelerate's
 * DeepSpeed or FSDP configuration chose sharded data parallelism (on any number of processes,
 * CPUs or GPUs, as Accelerate reports it), else NO, MULTI_CPU or MULTI_GPU.
 */
ACCEL_API accel_status accel_distributed_type(const accel_accelerator* accelerator,
                                              accel_distribution* out);

/** The mixed precision mode in force. */
ACCEL_API accel_status accel_mixed_precision(const accel_accelerator* accelerator,
                                             accel_precision* out);

/**
 * The configuration this accelerator was created with, as accel_config_dump writes it (each
 * setting with its source). Buffer convention.
 */
ACCEL_API accel_status accel_effective_config(const accel_accelerator* accelerator, char* buf,
                                              size_t capacity, size_t* out_size);

/** Blocks until every rank has called it (a barrier). Bounded by the collective timeout. */
ACCEL_API accel_status accel_wait_for_everyone(accel_accelerator* accelerator);

/**
 * Interrupts (nonzero) or stops interrupting (0) the calls of this process that wait, from any
 * thread: a signal watcher's, or a language's cancellation (Go's context.Context). While set, a
 * call that waits on other processes or on threads returns ACCEL_ERR_CANCELLED within about 50 ms
 * instead of waiting on, and one that would start waiting returns it at once: every collective
 * (accel_gather and the other collectives, accel_wait_for_everyone, accel_backward's gradient
 * all-reduce, the collectives inside accel_save_state and accel_load_state), a dataloader's next
 * waiting for its workers, and the Trainer's training before each step. A collective it stops,
 * begun or not, leaves the process group unusable (the peers are inside it): later collectives
 * fail with ACCEL_ERR_STATE, as after a timeout, and the job should end. A dataloader's next
 * loses nothing: the batch it waited for is the next call's. Calls that do not wait are
 * unaffected, and a call that waits on a GPU's NCCL stream notices only when it starts. Freeing
 * the accelerator ends a collective still running on a CPU at once (under collective_transport
 * gloo it waits for one Gloo had begun: the peers arrive, or collective_timeout). The setting lasts until cleared or the accelerator is freed.
 */
ACCEL_API accel_status accel_set_interrupted(accel_accelerator* accelerator, int interrupted);

/**
 * Prints `message` and a newline to standard output on the local main process only (as Accelerate's
 * Accelerator.print: once per machine); other ranks print nothing. Not a collective.
 */
ACCEL_API accel_status accel_print(const accel_accelerator* accelerator, const char* message);

/**
 * Main process first, as a begin/end pair around a block (Accelerate's main_process_first): on
 * every rank but the main one, begin waits until the main process has reached end; the main process
 * passes begin at once and waits in end for the others. Both are collectives: every rank calls
 * both.
 */
ACCEL_API accel_status accel_main_process_first_begin(accel_accelerator* accelerator);
ACCEL_API accel_status accel_main_process_first_end(accel_accelerator* accelerator);

/**
 * Local main process first (Accelerate's local_main_process_first): as the pair above, with each
 * machine's local main process in the main process's place (it runs the block first, for its
 * machine: a download or a cache each machine makes once). Collectives: every rank calls both.
 */
ACCEL_API accel_status accel_local_main_process_first_begin(accel_accelerator* accelerator);
ACCEL_API accel_status accel_local_main_process_first_end(accel_accelerator* accelerator);

/**
 * Whether this is the last process (rank num_processes - 1; Accelerate's is_last_process, which
 * its on_last_process runs on). Accelerate's on_main_process, on_local_main_process and
 * on_process(i) are accel_is_main_process, accel_is_local_main_process and accel_process_index;
 * the bindings offer them as closures.
 */
ACCEL_API accel_status accel_is_last_process(const accel_accelerator* accelerator, bool* out);

/**
 * Seeds LibTorch's default CPU generator, every CUDA generator when CUDA is present, and libaccel's
 * own generators (data shuffling, ...). With `device_specific`, the process index is added to the
 * seed so that ranks draw different streams (do not use it for data shuffling, which must agree
 * across ranks).
 */
ACCEL_API accel_status accel_set_seed(accel_accelerator* accelerator, uint64_t seed,
                                      bool device_specific);

/* ----------------------------------------------------------------------------------------------------
 * Collectives
 *
 * Every rank must make the same collective calls in the same order. With one process each is the
 * identity (a copy). A call rejected on one rank for a local reason (a NULL argument, say) does not
 * take part, so the other ranks fail with ACCEL_ERR_TIMEOUT after collective_timeout. A failure in
 * one (a peer that died, a timeout) leaves the process group unusable: later collectives fail at
 * once with ACCEL_ERR_STATE and the original message.
 * -------------------------------------------------------------------------------------------------
 */

/** Reductions for accel_reduce: an ACCEL_REDUCE_* value. */
typedef int32_t accel_reduction;

/** Values are stable. */
enum accel_reduction_values {
  ACCEL_REDUCE_SUM = 0,
  ACCEL_REDUCE_MEAN = 1, /* sum / number of processes; floating point tensors only */
  ACCEL_REDUCE_MAX = 2,
  ACCEL_REDUCE_MIN = 3
};

/**
 * Accelerate's gather: every rank's tensor concatenated along dimension 0, in rank order, returned
 * on every rank. A scalar counts as a one-element vector. Shapes and dtypes must agree on every
 * rank: if they do not, every rank fails with ACCEL_ERR_SHAPE (or ACCEL_ERR_DTYPE) listing each
 * rank's shape, and the suggestion to use accel_pad_across_processes first.
 */
ACCEL_API accel_status accel_gather(accel_accelerator* accelerator, const accel_tensor* tensor,
                                    accel_tensor** out);

/**
 * Accelerate's pad_across_processes: pads `tensor` along `dim` (negative counts from the end) to
 * the largest size any rank has there, filling with `pad_value`, at the end or, with `pad_first`,
 * at the start. Ranks must agree on the number of dimensions and the dtype.
 */
ACCEL_API accel_status accel_pad_across_processes(accel_accelerator* accelerator,
                                                  const accel_tensor* tensor, int64_t dim,
                                                  double pad_value, bool pad_first,
                                                  accel_tensor** out);

/**
 * Accelerate's reduce: the element-wise reduction of every rank's tensor, returned on every rank.
 * Shapes and dtypes must agree (checked, as accel_gather). Bool tensors are not reducible.
 */
ACCEL_API accel_status accel_reduce(accel_accelerator* accelerator, const accel_tensor* tensor,
                                    accel_reduction reduction, accel_tensor** out);

/**
 * Broadcast from rank `from_process`: every rank receives a copy of that rank's tensor (shape and
 * dtype included, so the receivers need not know them). `tensor` is read on `from_process` only and
 * may be NULL on the others.
 */
ACCEL_API accel_status accel_broadcast(accel_accelerator* accelerator, const accel_tensor* tensor,
                                       int32_t from_process, accel_tensor** out);

/**
 * Accelerate's set_trigger: raises this process's stop flag (an early stop, a NaN loss) for the
 * next accel_check_trigger. Local: it communicates nothing and takes no lock, so any thread may
 * call it, also while this process is inside a collective.
 */
ACCEL_API accel_status accel_set_trigger(accel_accelerator* accelerator);

/**
 * Accelerate's check_trigger, a collective: `*out` is true on every rank when any rank raised its
 * flag since the last check, and every flag is lowered again. Call it at the same point of the
 * loop on every rank, so that all stop at the same step.
 */
ACCEL_API accel_status accel_check_trigger(accel_accelerator* accelerator, bool* out);

/**
 * Accelerate's join_uneven_inputs, as a begin/end pair around the training loop, for ranks whose
 * numbers of batches differ (even_batches false): a rank that runs out of batches calls end and
 * keeps answering the others' gradient synchronisation (with zero gradients: the average still
 * divides by the number of processes, as PyTorch's Join by default) until every rank has called
 * it; then every rank takes the parameters of the rank that made the most steps. `even_batches`
 * -1 leaves the prepared dataloaders as they are, 0 or 1 sets theirs (not a stream's) until end.
 * Join is on only with several processes and even_batches false (with even batches nothing is
 * uneven); otherwise both calls only set and restore the option. Only the gradient
 * synchronisation is answered: other collectives inside the loop (gather, reduce, check_trigger)
 * must not be called by one rank after another has ended. Several prepared models, or a model with
 * buffers (batch norm: every forward broadcasts them), are ACCEL_ERR_UNSUPPORTED with join on.
 * end is a collective.
 */
ACCEL_API accel_status accel_join_uneven_inputs_begin(accel_accelerator* accelerator,
                                                      int32_t even_batches);
ACCEL_API accel_status accel_join_uneven_inputs_end(accel_accelerator* accelerator);

/**
 * Accelerate's split_between_processes for a list of `count` items (prompts, file names): the
 * indexes of the items this process takes, in order, as Accelerate 1.15 splits them. Process r of
 * P takes a contiguous slice; the first count mod P processes take one item more, and a process
 * past the end takes none. With `apply_padding` (P > 1) the input's last item is repeated until
 * every process holds ceil(count / P) items (none added when P divides count). With one process:
 * every index, unpadded. An empty list gives every process nothing, padded or not (Accelerate
 * raises IndexError). Buffer convention (a NULL buffer fails with ACCEL_ERR_BUFFER_TOO_SMALL,
 * writing the number needed). Not a collective.
 */
ACCEL_API accel_status accel_split_between_processes(const accel_accelerator* accelerator,
                                                     int64_t count, bool apply_padding,
                                                     int64_t* indices, size_t capacity,
                                                     size_t* out_count);

/**
 * Accelerate's split_between_processes for a tensor: this process's rows of `tensor` (dimension 0)
 * split as accel_split_between_processes splits a list, padding included (the padding rows are
 * copies of the input's last row, as Accelerate's pad_across_processes makes them). A scalar is
 * ACCEL_ERR_SHAPE. Not a collective: every rank computes the split from the shape alone, so the
 * ranks' tensors must have the same number of rows.
 */
ACCEL_API accel_status accel_split_tensor_between_processes(const accel_accelerator* accelerator,
                                                            const accel_tensor* tensor,
                                                            bool apply_padding, accel_tensor** out);

/** A list of byte strings, one per rank, as returned by accel_gather_object. */
typedef struct accel_bytes_list accel_bytes_list;

/**
 * Accelerate's gather_object, for bytes: every rank contributes `size` bytes at `data` (any length,
 * may differ across ranks, 0 allowed with `data` NULL) and receives every rank's bytes in rank
 * order.
 */
ACCEL_API accel_status accel_gather_object(accel_accelerator* accelerator, const void* data,
                                           size_t size, accel_bytes_list** out);

/** Number of entries (the number of processes that contributed). */
ACCEL_API accel_status accel_bytes_list_count(const accel_bytes_list* list, size_t* out);

/**
 * Entry `index`: `*out_data` points at its bytes (borrowed, valid until the list is freed; not
 * NUL-terminated; never NULL, also for an empty entry), `*out_size` is its length.
 */
ACCEL_API accel_status accel_bytes_list_get(const accel_bytes_list* list, size_t index,
                                            const void** out_data, size_t* out_size);

/** Frees a list. NULL is a no-op. Waits for nothing. */
ACCEL_API void accel_bytes_list_free(accel_bytes_list* list);

/* ----------------------------------------------------------------------------------------------------
 * Datasets
 *
 * A dataset has a number of samples and one or more fields (images, labels, ...); a sample is one
 * row of every field. The dataloader stacks samples into batch tensors, one per field.
 * -------------------------------------------------------------------------------------------------
 */

typedef struct accel_dataset accel_dataset;

/**
 * A dataset over tensors already in memory: field i is tensors[i], samples along dimension 0 (every
 * tensor's first dimension must agree, else ACCEL_ERR_SHAPE). The dataset takes its own reference
 * to each tensor; the handles may be freed afterwards.
 */
ACCEL_API accel_status accel_dataset_from_tensors(const accel_tensor* const* tensors, size_t count,
                                                  accel_dataset** out);

/**
 * Fills the buffers of sample `index` (0 <= index < the dataset's sample count): `buffers[f]` has
 * room for exactly `sizes[f]` bytes of field f, in its dtype and per-sample shape, row-major.
 * Returns 0 on success; anything else ends the epoch, and the dataloader call that needed the
 * sample fails with ACCEL_ERR_CALLBACK (the next call starts the epoch again).
 *
 * Threads: with num_workers 0 it runs on the thread that calls accel_dataloader_next; otherwise on
 * the dataloader's worker threads, several at once for different indices, so it must be safe to
 * call concurrently. No libaccel lock is held while it runs. It may use tensors, datasets,
 * configurations and other dataloaders, and free any handle but its own dataloader. It must not
 * call functions of the dataloader it produces for, nor of a training family (an accelerator,
 * model, optimizer or scheduler; the accelerator's queries excepted): they may be waiting for this
 * very callback, so such a call fails with ACCEL_ERR_STATE.
 *
 * It is never entered after the dataset handle and every dataloader over the dataset have been
 * freed or closed (a dataloader stops its workers in accel_dataloader_free/close; see there).
 */
typedef int32_t (*accel_sample_fn)(int64_t index, void* const* buffers, const size_t* sizes,
                                   size_t count, void* user_data);

/**
 * A dataset of `sample_count` samples that a callback produces. `field_count` fields: field f has
 * dtype `dtypes[f]` and a per-sample shape of `dim_counts[f]` dimensions (0 for a scalar per
 * sample). `dims` holds every field's per-sample dimensions one after the other (field 0's, then
 * field 1's, ...: sum(dim_counts) entries; may be NULL when that sum is 0). Flat arrays, so that
 * bindings need not build arrays of pointers.
 *
 * `fn` is called with `user_data`; `release` (may be NULL) is called once with `user_data` after
 * the dataset handle and every dataloader over it have been freed or closed, on the thread of
 * whichever of those calls came last.
 */
ACCEL_API accel_status accel_dataset_from_callback(int64_t sample_count, size_t field_count,
                                                   const accel_dtype* dtypes,
                                                   const size_t* dim_counts, const int64_t* dims,
                                                   accel_sample_fn fn, void* user_data,
                                                   accel_release_fn release, accel_dataset** out);

/**
 * In accel_dataset_from_ragged_callback's `dims`, the first per-sample dimension of a ragged field:
 * a dimension that varies from sample to sample (the tokens of a sentence). Only the first
 * dimension of a field may be ragged; the others are fixed.
 */
#define ACCEL_RAGGED (-1)

/**
 * Writes the length of every ragged field of sample `index`: `lengths[f]` for each ragged field f
 * (`count` is the number of fields; entries of fixed fields are ignored). A length is at least 0
 * and at most 2^32. Returns 0 on success; anything else ends the epoch like a failing
 * accel_sample_fn (ACCEL_ERR_CALLBACK). Called before the sample callback for the same index, and,
 * when the dataloader groups by length, once for every sample before the first epoch. Same thread
 * rules as accel_sample_fn.
 */
typedef int32_t (*accel_sample_length_fn)(int64_t index, int64_t* lengths, size_t count,
                                          void* user_data);

/**
 * A dataset of `sample_count` samples whose fields may be ragged: as accel_dataset_from_callback,
 * where a field whose first entry in `dims` is ACCEL_RAGGED has a first dimension that `lengths`
 * reports per sample. `fn` then fills sample `index` with `sizes[f]` = its length x the bytes of
 * one row of field f (a length of 0 gives a size of 0); the buffers of fixed fields are as in
 * accel_dataset_from_callback.
 *
 * A batch pads each ragged field to its longest sample, and adds one field per ragged field after
 * the dataset's: an attention mask (int64 [batch, padded length]: 1 on a sample's rows, 0 on
 * padding), unless the dataloader's `mask` option says `lengths` (int64 [batch]) or `none`. The
 * dataloader's padding options (accel_dataloader_set, accel_dataloader_set_field) choose the pad
 * value, side, multiple and the maximum length. A field with no ragged dimension makes this the
 * same as accel_dataset_from_callback, and `lengths` may then be NULL; with a ragged field it is
 * required (ACCEL_ERR_INVALID_ARGUMENT).
 */
ACCEL_API accel_status accel_dataset_from_ragged_callback(
    int64_t sample_count, size_t field_count, const accel_dtype* dtypes, const size_t* dim_counts,
    const int64_t* dims, accel_sample_length_fn lengths, accel_sample_fn fn, void* user_data,
    accel_release_fn release, accel_dataset** out);

/** A sample being written by an accel_stream_fn; valid only during that call. */
typedef struct accel_sample accel_sample;

/**
 * Writes field `field` of the sample: `size` bytes at `data` (copied), in the field's dtype and
 * per-sample shape, row-major. A fixed field takes exactly one sample's bytes; a ragged field any
 * whole number of rows (its length; 0 allowed, `data` may then be NULL). A wrong size is
 * ACCEL_ERR_SHAPE naming the sample and field; a field out of range ACCEL_ERR_INVALID_ARGUMENT.
 * Writing a field again replaces it. A failed write that the callback does not make good (by
 * writing that field again) fails the sample even if the callback returns 0, with the write's
 * status and message.
 */
ACCEL_API accel_status accel_sample_set_field(accel_sample* sample, size_t field, const void* data,
                                              size_t size);

/**
 * Produces the next sample of a stream: sample `position` (0, 1, 2, ... in order) of epoch `epoch`.
 * Position 0 means the stream starts again from its beginning (each epoch does, and so does a
 * dataloader resuming at a saved position: it reads the samples before that position and drops
 * them). Writes every field with accel_sample_set_field and returns 0; returns 1 when the stream
 * has no more samples (nothing written); anything else is a failure: the dataloader call that
 * needed the sample fails with ACCEL_ERR_CALLBACK. (1 means the end here only: bindings whose
 * callbacks report failures as 1 elsewhere return another value from this one.)
 *
 * Threads: one dataloader never calls it on two threads at once, and always in order. With
 * num_workers 0 it runs on the thread that calls accel_dataloader_next; otherwise on the
 * dataloader's reading thread, which reads up to num_workers x prefetch_factor global batches
 * ahead. Each dataloader over the stream reads its own pass with the same `user_data`, so two
 * dataloaders over one stream may call it at once, each in its own order: keep per-pass state out
 * of `user_data`, or make one dataset per dataloader. With dispatch_batches it runs on the main
 * process only. What it may call is as for accel_sample_fn.
 */
typedef int32_t (*accel_stream_fn)(int64_t epoch, int64_t position, accel_sample* sample,
                                   void* user_data);

/**
 * A stream: a dataset with no known length, read in order (an IterableDataset). Fields as in
 * accel_dataset_from_ragged_callback (ACCEL_RAGGED marks a ragged field; the length is what
 * accel_sample_set_field is given). accel_dataset_sample_count reports -1.
 *
 * A dataloader shards a stream as Accelerate does (dataloader option dispatch_batches, default true
 * for a stream, as Accelerate's default): with dispatch_batches the main process reads P batches
 * of batch_size (one when split_batches) and sends every process its rows (every process then
 * calls accel_dataloader_next together: it is a collective); without it every process reads the
 * whole stream and takes its slice of each global batch (IterableDatasetShard). The last global
 * batch is dropped with drop_last, else completed from the epoch's first global batch (even_batches
 * does not apply; one process takes the short last batch as it is, as Accelerate does not shard a
 * world of one). batch_count is -1; remainder is known at the last batch. After a failure the
 * position stays at the samples of the batches already returned, and the next call reads the
 * stream again from its start up to there and goes on. group_by_length is not available
 * (ACCEL_ERR_UNSUPPORTED).
 */
ACCEL_API accel_status accel_dataset_from_stream(size_t field_count, const accel_dtype* dtypes,
                                                 const size_t* dim_counts, const int64_t* dims,
                                                 accel_stream_fn fn, void* user_data,
                                                 accel_release_fn release, accel_dataset** out);

/**
 * A stream of the lines of a text file, read lazily (again from the start each epoch): one sample
 * per line, a single ragged uint8 field holding the line's bytes without its newline (nor a
 * carriage return before it). An unreadable file is ACCEL_ERR_IO naming it.
 */
ACCEL_API accel_status accel_dataset_from_text_lines(const char* path, accel_dataset** out);

/**
 * A dataset from IDX files (the MNIST family: Debian's dataset-fashion-mnist installs them under
 * /usr/share/datasets/fashion-mnist/), plain or gzip-compressed, one field per file, each in the
 * file's own dtype and shape (Fashion-MNIST: images uint8 [N, 28, 28], labels uint8 [N]). A missing
 * file is ACCEL_ERR_IO; a wrong magic number, a truncated file or corrupt compressed data is
 * ACCEL_ERR_IO naming the file; files with different sample counts are ACCEL_ERR_SHAPE naming both.
 * A compressed file is decoded once per machine into a cache directory (ACCEL_DATASETS_CACHE, else
 * $XDG_CACHE_HOME/libaccel/datasets, else ~/.cache/libaccel/datasets; "off" for none) and read
 * from there by rows: every process shares that one copy (in the page cache, outside each
 * process's resident set), and later runs skip the decoding. A copy
 * is named after the file's path, size, mtime and inode (a changed file is decoded again, and its
 * older copy removed); without a usable cache directory the file is decoded into private memory.
 */
ACCEL_API accel_status accel_dataset_from_idx(const char* const* paths, size_t count,
                                              accel_dataset** out);

/** Number of samples; -1 for a stream. */
ACCEL_API accel_status accel_dataset_sample_count(const accel_dataset* dataset, int64_t* out);

/** Number of fields per sample. */
ACCEL_API accel_status accel_dataset_field_count(const accel_dataset* dataset, size_t* out);

/**
 * Frees the dataset handle. NULL is a no-op. Dataloaders made over it keep using it (and its
 * callback) until they are freed or closed. Waits for nothing.
 */
ACCEL_API void accel_dataset_free(accel_dataset* dataset);

/* ----------------------------------------------------------------------------------------------------
 * Dataloaders
 *
 * A dataloader gives this process its shard of every global batch, exactly as Accelerate's prepared
 * DataLoader: without split_batches, global batch i goes to rank i mod P (each rank's batch_size
 * samples); with split_batches each batch of batch_size is cut into P slices. With even_batches
 * (the default) the last round is completed with samples from the start of the epoch so every rank
 * gets the same number of full batches; with drop_last an incomplete round is dropped; with
 * even_batches false ranks may get fewer or shorter batches (then collectives inside the loop must
 * not assume every rank has a batch). With one process nothing is padded. The shuffle is a function
 * of (seed, epoch) alone: every rank draws the same permutation without communicating, and 1
 * process x 64 sees the same samples at every step as 2 x 32. Batches are prefetched by
 * `num_workers` threads and are already on the accelerator's device.
 *
 * Options (accel_dataloader_set, between epochs):
 *   batch_size (1), shuffle (false), seed (0), drop_last (false), num_workers (0),
 *   prefetch_factor (2, batches in flight per worker), split_batches and even_batches (the
 *   accelerator's configuration: false, true), device_placement (true), group_by_length (false),
 *   dispatch_batches (auto: true for a stream, which is the only kind libaccel dispatches;
 *   see accel_dataset_from_stream), shard (true; false: this process reads every batch itself,
 *   as an unprepared PyTorch DataLoader does, for data already divided with
 *   accel_split_between_processes; nothing is padded and no collective is involved).
 *
 * group_by_length (a dataset with a ragged field): the Hugging Face Trainer's length grouping. The
 * epoch's order (shuffled or not) is cut into megabatches of m global batches (m = samples /
 * (4 x global batch), at most 50, at least 1), each sorted by the first ragged field's length,
 * longest first, and the longest megabatch's first sample moved to the front so the largest batch
 * comes first. Sized by the global batch, it keeps the order world-size invariant: 1 x 64 and
 * 2 x 32 see the same global batches.
 *
 * Padding options of ragged fields (accel_dataloader_set sets them for every ragged field,
 * accel_dataloader_set_field for one): pad_value (0), padding_side (right, left),
 * pad_to_multiple_of (1: the padded length is rounded up to it), max_length (none, or a length),
 * truncation (false: a sample longer than max_length fails the batch with ACCEL_ERR_SHAPE naming
 * it; true: its first max_length rows are kept), mask (attention_mask, lengths, none: the field
 * added after the dataset's fields).
 * -------------------------------------------------------------------------------------------------
 */

typedef struct accel_dataloader accel_dataloader;

/** A dataloader over `dataset` for this accelerator's process. Keeps the dataset alive. */
ACCEL_API accel_status accel_dataloader_new(const accel_accelerator* accelerator,
                                            accel_dataset* dataset, accel_dataloader** out);

/**
 * Sets an option by key (see above); an iteration in progress is ended. An unknown key or bad value
 * is ACCEL_ERR_INVALID_ARGUMENT naming the key and the allowed values; batch_size 0, or
 * split_batches with a batch size that does not divide by the number of processes, is rejected
 * here.
 */
ACCEL_API accel_status accel_dataloader_set(accel_dataloader* loader, const char* key,
                                            const char* value);

/**
 * Sets a padding option (see above) of the ragged field `field` alone; an iteration in progress is
 * ended. A field out of range, or one that is not ragged, is ACCEL_ERR_INVALID_ARGUMENT.
 */
ACCEL_API accel_status accel_dataloader_set_field(accel_dataloader* loader, size_t field,
                                                  const char* key, const char* value);

/**
 * The next batch: `fields[0..capacity)` receive one new tensor per dataset field (the caller frees
 * them) and `*out_count` their number. At the end of an epoch `*out_count` is 0 and nothing is
 * written; the following call starts the next epoch. Buffer convention: with `capacity` below the
 * number of fields (accel_dataloader_field_count) the call fails with ACCEL_ERR_BUFFER_TOO_SMALL
 * and `*out_count` set to that number, before any batch is taken. A failing sample callback ends
 * the epoch with ACCEL_ERR_CALLBACK; the next call starts that epoch again.
 */
ACCEL_API accel_status accel_dataloader_next(accel_dataloader* loader, accel_tensor** fields,
                                             size_t capacity, size_t* out_count);

/** Number of fields per batch: the dataset's, then the masks its ragged fields add. */
ACCEL_API accel_status accel_dataloader_field_count(const accel_dataloader* loader, size_t* out);

/** Batches this process gets in a whole epoch; -1 for a stream (unknown). */
ACCEL_API accel_status accel_dataloader_batch_count(const accel_dataloader* loader, int64_t* out);

/** Sets the epoch the next iteration uses (its shuffle); ends an iteration in progress. */
ACCEL_API accel_status accel_dataloader_set_epoch(accel_dataloader* loader, int64_t epoch);

/** The current epoch (it advances after each complete pass). */
ACCEL_API accel_status accel_dataloader_epoch(const accel_dataloader* loader, int64_t* out);

/** True while the last batch of the epoch is in use (Accelerate's end_of_dataloader). */
ACCEL_API accel_status accel_dataloader_end_of_epoch(const accel_dataloader* loader, bool* out);

/**
 * Accelerate's remainder: how many samples of the last global step are real rather than padding.
 * A map-style dataset's is known from the start: its samples (from a resume's position) mod the
 * global batch size, -1 with drop_last. A stream's is -1 until its last global batch is in use,
 * then that batch's real samples (the whole global batch when it is full), as Accelerate sets it.
 */
ACCEL_API accel_status accel_dataloader_remainder(const accel_dataloader* loader, int64_t* out);

/** The next iteration skips this process's first `n` batches (n global steps): a mid-epoch resume.
 */
ACCEL_API accel_status accel_dataloader_skip_first_batches(accel_dataloader* loader, int64_t n);

/**
 * The global sample cursor: the epoch, and how many samples of it all processes together have
 * consumed. Save it to resume exactly, even with another number of processes.
 */
ACCEL_API accel_status accel_dataloader_position(const accel_dataloader* loader, int64_t* out_epoch,
                                                 int64_t* out_samples);

/** Continues at a saved cursor: the next iteration starts `samples` into `epoch`. */
ACCEL_API accel_status accel_dataloader_set_position(accel_dataloader* loader, int64_t epoch,
                                                     int64_t samples);

/**
 * Stops the worker threads and releases the dataset; every later call on the dataloader but
 * accel_dataloader_free fails with ACCEL_ERR_STATE. Idempotent.
 *
 * What it waits for: the sample callbacks already running on the worker threads (at most one per
 * worker; workers stop between samples), never other ranks. When it returns, the dataset's
 * callback is never entered again on behalf of this dataloader. A prepared dataloader stays in the
 * accelerator's checkpoints with its cursor as it was at close, so checkpoint contents do not
 * shift. Calling it from a sample callback producing for this dataloader fails with
 * ACCEL_ERR_STATE.
 */
ACCEL_API accel_status accel_dataloader_close(accel_dataloader* loader);

/**
 * Closes (see accel_dataloader_close: it waits for the sample callbacks already running, at most
 * one per worker, never for other ranks) and frees a dataloader, prepared or not. NULL is a no-op.
 * Called from a sample callback producing for this very dataloader it does nothing but record
 * ACCEL_ERR_STATE (it would wait for itself).
 */
ACCEL_API void accel_dataloader_free(accel_dataloader* loader);

/**
 * Accelerate's gather_for_metrics: gathers like accel_gather (ranks may hold different numbers of
 * rows) and, while a dataloader is on its last batch, drops the samples that were duplicated to
 * even it out, so a metric over the results counts every sample of the dataset exactly once.
 */
ACCEL_API accel_status accel_gather_for_metrics(accel_accelerator* accelerator,
                                                const accel_tensor* tensor, accel_tensor** out);

/* ----------------------------------------------------------------------------------------------------
 * Models
 *
 * A model is a TorchScript module: loaded from an archive (torch.jit.save in Python, tch-rs, or
 * accel_model_save_torchscript), built here from a catalogue of layers, each initialised exactly
 * as the matching torch.nn layer, plus methods written in TorchScript source. TorchScript compiled
 * here has no Python helpers: use aten ops (torch.relu, torch.linear, torch.conv2d,
 * torch.max_pool2d, torch.dropout(x, p, self.training), torch.cross_entropy_loss, ...) and call a
 * layer as self.fc1.forward(x). Or a model is the host's own tensors, lent by name, with the
 * forward in the host's code ("Models of the host's own tensors" below).
 * -------------------------------------------------------------------------------------------------
 */

typedef struct accel_model accel_model;

/** An empty model (train mode) to add layers and methods to. */
ACCEL_API accel_status accel_model_new(accel_model** out);

/**
 * An empty model (train mode) whose layers are built without their weights, as Accelerate's
 * init_empty_weights: accel_model_add_layer gives each parameter a shape and a dtype on LibTorch's
 * meta device and allocates nothing (1000 x linear 10000 x 10000, 100 billion parameters, takes a
 * few megabytes); buffers (batch-norm statistics) are made on the CPU as usual unless
 * `include_buffers`. accel_load_pretrained and accel_load_checkpoint_in_model then fill the model
 * tensor by tensor, each allocated once and read straight into place, so a load never holds the
 * model twice; a tensor the checkpoint lacks (a not-strict load: a new head) gets its layer's own
 * initialisation at the end of the load, as transformers initialises the weights missing after a
 * low_cpu_mem_usage load. Until a tensor is filled, whatever needs its values is ACCEL_ERR_STATE
 * naming it and saying how to fill it: accel_model_call, accel_model_tensor, accel_prepare,
 * accel_optimizer_step, accel_save_model, accel_model_save_torchscript. Under ZeRO stage 3 on
 * several processes accel_prepare accepts the model empty instead: each rank allocates only its
 * share, still empty until the load after accel_prepare reads this rank's bytes into it, so no rank
 * ever holds the whole model (see accel_prepare). The other functions
 * (accel_model_define, accel_model_tensor_count/_name, accel_model_parameter_element_count) work
 * as for any model. TorchScript archives have no empty load: LibTorch's torch::jit::load reads every
 * tensor of the archive even with the meta device as its map location (docs/checkpoints.md).
 */
ACCEL_API accel_status accel_model_new_empty(bool include_buffers, accel_model** out);

/** Loads a TorchScript archive. An unreadable or invalid file is ACCEL_ERR_IO naming it. */
ACCEL_API accel_status accel_model_load_torchscript(const char* path, accel_model** out);

/**
 * Adds layer `name` of kind `kind` with options `spec` ("key=value" pairs separated by spaces or
 * commas). Kinds and options:
 *   linear        in_features, out_features, bias (true)
 *   conv2d        in_channels, out_channels, kernel_size, stride (1), padding (0), dilation (1),
 *                 groups (1), bias (true)
 *   batch_norm2d  num_features, eps (1e-5), momentum (0.1)   (running statistics are buffers)
 *   layer_norm    normalized_shape (the last dimension), eps (1e-5)
 *   embedding     num_embeddings, embedding_dim
 * Add layers before defining methods that use them. An unknown kind or option is
 * ACCEL_ERR_INVALID_ARGUMENT naming it; a prepared model takes no new layers (ACCEL_ERR_STATE).
 */
ACCEL_API accel_status accel_model_add_layer(accel_model* model, const char* name, const char* kind,
                                             const char* spec);

/**
 * Compiles TorchScript source defining methods of the model (forward, a training_step returning the
 * loss, ...). Source that does not compile is ACCEL_ERR_INVALID_ARGUMENT with TorchScript's
 * message, and then none of its methods is defined (all or nothing, whichever method failed).
 */
ACCEL_API accel_status accel_model_define(accel_model* model, const char* source);

/**
 * Calls `method` once with `inputs[0..input_count)`. Its results (a tensor, or a tuple or list of
 * tensors) come back in `*out`, a list the caller frees (accel_tensor_list_count/get/free): the
 * method never has to run twice to learn how many there are. Results keep their autograd history,
 * so a loss can go to accel_backward. For a prepared model the call runs under the accelerator's
 * mixed precision (floating results come back as fp32), takes inputs made on the host to the
 * device accel_prepare placed the model on (as DistributedDataParallel's forward does; the
 * caller's tensors stay where they are) and, with several processes, first copies
 * rank 0's buffers (batch-norm statistics) to every rank: for a model with buffers every call is
 * then a collective, to be made on all ranks alike. Inputs of the wrong shape are ACCEL_ERR_SHAPE,
 * of the wrong dtype ACCEL_ERR_DTYPE, an unknown method ACCEL_ERR_INVALID_ARGUMENT, each with
 * TorchScript's message.
 */
ACCEL_API accel_status accel_model_call(accel_model* model, const char* method,
                                        const accel_tensor* const* inputs, size_t input_count,
                                        accel_tensor_list** out);

/** Train mode (dropout active, batch-norm statistics updated) or eval mode. */
ACCEL_API accel_status accel_model_train(accel_model* model, bool training);

/** Total number of parameter elements (Hugging Face's num_parameters()). */
ACCEL_API accel_status accel_model_parameter_element_count(const accel_model* model, int64_t* out);

/** Number of named parameters and buffers (accel_model_tensor_name indexes them). */
ACCEL_API accel_status accel_model_tensor_count(const accel_model* model, size_t* out);

/**
 * Name of parameter or buffer `index` ("conv1.weight", "bn.running_mean"), parameters first, in
 * registration order. Buffer convention.
 */
ACCEL_API accel_status accel_model_tensor_name(const accel_model* model, size_t index, char* buf,
                                               size_t capacity, size_t* out_size);

/**
 * A copy of parameter or buffer `name` (detached from autograd; later training does not change the
 * copy). An unknown name is ACCEL_ERR_INVALID_ARGUMENT. Under ZeRO stage 3 a parameter another
 * rank owns is not on this rank between steps: ACCEL_ERR_STATE naming it (accel_save_model, which
 * every rank calls, gathers the whole model).
 */
ACCEL_API accel_status accel_model_tensor(const accel_model* model, const char* name,
                                          accel_tensor** out);

/**
 * Saves the model as a TorchScript archive (for torch.jit.load and accel_model_load_torchscript).
 * A model with host-owned tensors has no TorchScript code of its own: ACCEL_ERR_STATE (save its
 * weights with accel_save_model).
 */
ACCEL_API accel_status accel_model_save_torchscript(const accel_model* model, const char* path);

/**
 * Frees the model handle. NULL is a no-op. Optimizers over it, and the accelerator once it is
 * prepared, keep the model itself alive. Waits for nothing.
 */
ACCEL_API void accel_model_free(accel_model* model);

/* ----------------------------------------------------------------------------------------------------
 * Models of the host's own tensors
 *
 * Bring your own model: a torch::nn::Module, a tch-rs VarStore, any set of LibTorch tensors. The
 * host lends its parameters and buffers by name to a model made with accel_model_new and computes
 * the forward itself; accel_prepare gives the model everything a layer model gets: rank 0's values
 * copied into the host's tensors, gradients averaged across processes in buckets while backward
 * runs (hooks on the host's leaves), optimizers stepping the host's tensors in place, clipping,
 * accumulation, accel_save_model / accel_load_checkpoint_in_model by name, accel_save_state /
 * accel_load_state.
 *
 * Ownership: the model takes its own reference to each tensor (no copy). The host may free its
 * handle, or drop its at::Tensor, at any time; the storage lives until the model is freed (and
 * every optimizer over it). The tensors stay the host's to read and to use in its forward. While
 * the model is prepared the host must not resize them or replace their storage (resize_, set_,
 * assigning .data): the optimizer's state and the gradient buckets point into them, and the next
 * accel_backward, accel_optimizer_step or accel_model_forward_begin fails with ACCEL_ERR_STATE
 * naming the tensor. Values the host writes into them after accel_prepare are its own business
 * (they are not copied to the other ranks again). Device placement moves the tensors in place, as
 * torch.nn.Module.to does: the same tensor objects, their storage on the accelerator's device.
 *
 * Mixed precision: the host's forward runs between accel_model_forward_begin and
 * accel_model_forward_end, which do for it what accel_model_call does for a method: rank 0's
 * buffers are first copied to every rank (a collective when the model has buffers: every rank
 * calls it alike), and the accelerator's autocast (bf16 or fp16, Accelerate's
 * accelerator.autocast()) is on for the calling thread until the end. Outputs computed under
 * autocast may be bf16/fp16; fp16 loss scaling happens in accel_backward as for every model. A
 * forward that skips the pair runs in the host's own precision and without the buffer copy.
 * -------------------------------------------------------------------------------------------------
 */

/**
 * Lends the host's `tensor` to `model` as parameter `name`: dot-separated segments of letters,
 * digits and '_' ("fc1.weight", "layers.0.bias"), the names torch.nn gives, used as they are in
 * checkpoints. The tensor must be a floating-point autograd leaf that requires grad
 * (accel_tensor_set_requires_grad, or requires_grad_() in LibTorch), dense, on the same device as
 * the model's other tensors (an empty tensor, on LibTorch's meta device, goes with any: a load
 * fills it in place, the host's own tensor object, as accel_model_new_empty's), and share storage with no other tensor of this model nor with any
 * tensor lent to another model (tied weights, views, the same tensor twice): each is
 * ACCEL_ERR_INVALID_ARGUMENT naming the tensor, as is a name the model has already. A prepared
 * model takes no new tensors (ACCEL_ERR_STATE), nor does a model loaded from a TorchScript archive
 * (ACCEL_ERR_INVALID_ARGUMENT). Tensors are listed (accel_model_tensor_name, the optimizer's state)
 * depth-first by submodule as torch.nn lists them: a submodule's tensors together, in the order the
 * first of them was added; lending a torch.nn module's tensors in its own order keeps its order.
 */
ACCEL_API accel_status accel_model_add_parameter(accel_model* model, const char* name,
                                                 const accel_tensor* tensor);

/**
 * Lends the host's `tensor` to `model` as buffer `name` (state that is saved and copied from rank
 * 0 but not trained: batch-norm statistics, step counters). Rules as accel_model_add_parameter,
 * but it must not require grad and may have any dtype.
 */
ACCEL_API accel_status accel_model_add_buffer(accel_model* model, const char* name,
                                              const accel_tensor* tensor);

/**
 * Opens the host's forward of a prepared `model` on the calling thread (see above): rank 0's
 * buffers copied to every rank, then the accelerator's autocast entered. For a model that is not
 * prepared it only opens the pair. Every begin is closed by accel_model_forward_end on the same
 * thread.
 */
ACCEL_API accel_status accel_model_forward_begin(accel_model* model);

/**
 * Closes the forward accel_model_forward_begin opened: the autocast state of the calling thread is
 * back to what it was, also when the accelerator was freed in between. An end with no open begin
 * of `model` on this thread (or not the innermost one) is ACCEL_ERR_STATE, and nothing is closed.
 */
ACCEL_API accel_status accel_model_forward_end(accel_model* model);

/* ----------------------------------------------------------------------------------------------------
 * Optimizers and learning-rate schedulers
 * -------------------------------------------------------------------------------------------------
 */

typedef struct accel_optimizer accel_optimizer;

/**
 * An optimizer over `model`'s parameters: "sgd", "adam", "adamw", "rmsprop" or "adagrad", with
 * PyTorch's defaults. Options (accel_optimizer_set): lr; sgd: momentum, dampening, weight_decay,
 * nesterov; adam/adamw: beta1, beta2, eps, weight_decay, amsgrad; rmsprop: alpha, eps,
 * weight_decay, momentum, centered; adagrad: lr_decay, weight_decay, initial_accumulator_value,
 * eps. It joins the model's training family (see Threads at the top).
 */
ACCEL_API accel_status accel_optimizer_new(accel_model* model, const char* kind,
                                           accel_optimizer** out);

/**
 * The program's own LibTorch optimizer over `model`: `torch_optimizer` points to a
 * std::shared_ptr<torch::optim::Optimizer> of the LibTorch libaccel runs on (accel.hpp's
 * accel::Optimizer(model, std::shared_ptr<torch::optim::...>) makes this call after checking that
 * LibTorch is the same; libaccel keeps its own reference). The optimizer must step exactly the
 * model's trainable parameters, the very tensors lent to it (accel_model_add_parameter,
 * accel::Model::from_module); accel_prepare checks that (ACCEL_ERR_INVALID_ARGUMENT naming the
 * first that differs). It is stepped as it is, with its own options and parameter groups;
 * accel_optimizer_set takes "lr" alone (group 0's and, for a scheduler, every group's through
 * LibTorch's get_lr/set_lr), accel_optimizer_add_group is ACCEL_ERR_STATE. Everything else is as
 * for libaccel's optimizers: steps and zero_grad on accumulation micro-steps, gradient
 * synchronisation, fp16 loss scaling, clipping, schedulers. accel_save_state saves its state when
 * its class is LibTorch's SGD, Adam, AdamW, RMSprop or Adagrad (the files of libaccel's optimizer
 * of that kind); another class's state is ACCEL_ERR_UNSUPPORTED at the save. Under ZeRO (stage 1
 * or more, several processes) accel_prepare refuses it with ACCEL_ERR_UNSUPPORTED saying why:
 * sharding its state needs libaccel's own optimizer.
 */
ACCEL_API accel_status accel_optimizer_from_torch(accel_model* model, void* torch_optimizer,
                                                  accel_optimizer** out);

/**
 * Sets an option by key ("lr", "0.01"); takes effect at the next step. It sets parameter group 0's
 * option and the optimizer's default, which groups made later start from (groups made already
 * keep theirs: accel_optimizer_set_group).
 */
ACCEL_API accel_status accel_optimizer_set(accel_optimizer* optimizer, const char* key,
                                           const char* value);

/**
 * One optimizer step. Once prepared, it does nothing on accumulation micro-steps (when
 * accel_sync_gradients is false), and under fp16 it unscales the gradients and skips the step when
 * any is inf/nan (see accel_optimizer_step_was_skipped).
 */
ACCEL_API accel_status accel_optimizer_step(accel_optimizer* optimizer);

/**
 * Sets the gradients to none (Accelerate's default); once prepared, only on sync steps. In a job of
 * several processes a prepared model's gradients live inside the communication buckets (PyTorch
 * DDP's gradient_as_bucket_view): those are zeroed in place instead, so the next backward adds
 * into them and nothing is copied. The one difference a program can see: a parameter that got a
 * gradient once and none in a later step is stepped with a zero gradient (AdamW's moments decay and
 * its weight decay applies), as in DDP with gradient_as_bucket_view and torch 1.13's zero_grad.
 */
ACCEL_API accel_status accel_optimizer_zero_grad(accel_optimizer* optimizer);

/** The current learning rate (of parameter group 0: accel_optimizer_group_lr for the others). */
ACCEL_API accel_status accel_optimizer_lr(const accel_optimizer* optimizer, double* out);

/**
 * Sets the learning rate: a finite, non-negative number (otherwise ACCEL_ERR_INVALID_ARGUMENT, as
 * for accel_optimizer_set(optimizer, "lr", ...), which it is: group 0's and the default).
 */
ACCEL_API accel_status accel_optimizer_set_lr(accel_optimizer* optimizer, double lr);

/** Whether the last prepared step was skipped because an fp16 gradient was inf/nan. */
ACCEL_API accel_status accel_optimizer_step_was_skipped(const accel_optimizer* optimizer,
                                                        bool* out);

/**
 * Parameter groups, as PyTorch's optimizers have them (param_groups): the classic is no weight
 * decay on biases and LayerNorm weights, or another learning rate for a head. Group 0 holds every
 * parameter no other group names, with the options accel_optimizer_set sets. This makes a new
 * group of the `count` parameters `names` (as accel_model_tensor_name lists them; the strings are
 * borrowed for the call), starting from the optimizer's defaults of this moment (what
 * accel_optimizer_set set), and writes its index (1, 2, ...) to `out_group`. Its options are then
 * set with accel_optimizer_set_group; each parameter steps with its group's options, also under
 * ZeRO. ACCEL_ERR_INVALID_ARGUMENT, naming the parameter, for a name that is not one of the
 * model's parameters (a buffer's, say), a name given twice, or one in another group already; also
 * for `count` 0. ACCEL_ERR_STATE once the optimizer is prepared, has stepped, or a scheduler was
 * made over it (make the groups first: the scheduler takes each group's base learning rate). A
 * checkpoint keeps each group's options and base rate; load_state needs the same groups (the same
 * number, each with as many parameters), as PyTorch's load_state_dict, else ACCEL_ERR_STATE.
 */
ACCEL_API accel_status accel_optimizer_add_group(accel_optimizer* optimizer,
                                                 const char* const* names, size_t count,
                                                 size_t* out_group);

/** The number of parameter groups: 1 (group 0) plus one per accel_optimizer_add_group. */
ACCEL_API accel_status accel_optimizer_group_count(const accel_optimizer* optimizer, size_t* out);

/**
 * Sets an option of parameter group `group` by key, with the keys and values of
 * accel_optimizer_set (lr, weight_decay, momentum, beta1, ...); takes effect at the next step.
 * Group 0's here leaves the defaults alone. A group that does not exist is
 * ACCEL_ERR_INVALID_ARGUMENT. Adagrad's initial_accumulator_value is the optimizer's own for every
 * group, as in PyTorch.
 */
ACCEL_API accel_status accel_optimizer_set_group(accel_optimizer* optimizer, size_t group,
                                                 const char* key, const char* value);

/** The current learning rate of parameter group `group` (a scheduler sets every group's). */
ACCEL_API accel_status accel_optimizer_group_lr(const accel_optimizer* optimizer, size_t group,
                                                double* out);

/** Frees the optimizer handle. NULL is a no-op. Schedulers over it, and the accelerator once it is
 * prepared, keep the optimizer itself alive. Waits for nothing. */
ACCEL_API void accel_optimizer_free(accel_optimizer* optimizer);

typedef struct accel_scheduler accel_scheduler;

/**
 * A learning-rate schedule driving `optimizer`, with PyTorch's and Hugging Face's formulas:
 *   constant; constant_with_warmup (warmup_steps); linear (warmup_steps, total_steps);
 *   cosine (warmup_steps, total_steps, num_cycles 0.5); cosine_with_restarts (warmup_steps,
 *   total_steps, num_cycles 1); polynomial (warmup_steps, total_steps, lr_end 1e-7, power 1);
 *   step (step_size, gamma 0.1); exponential (gamma); one_cycle (max_lr, total_steps, pct_start
 *   0.3, anneal_strategy cos|linear, div_factor 25, final_div_factor 1e4, base_momentum 0.85,
 *   max_momentum 0.95, cycle_momentum true).
 * The schedule's base rate is the optimizer's rate when the scheduler is made (set lr first); the
 * optimizer's rate is set to the schedule's value at step 0 as soon as the options are complete.
 * With parameter groups (accel_optimizer_add_group: make them first) each group has its own base
 * rate, its rate when the scheduler is made, and every kind but one_cycle sets each group's rate
 * to its base rate times the schedule's factor, as PyTorch's schedulers with per-group base_lrs
 * (polynomial's factor is group 0's, as transformers' is the optimizer's lr's); one_cycle's single
 * max_lr sets every group to the same rate, as PyTorch's OneCycleLR with one max_lr, and cycles
 * every group's momentum.
 *
 * How a prepared scheduler steps, as Accelerate (its most surprising rule): accel_scheduler_step
 * does nothing on accumulation micro-steps and after an fp16-skipped optimizer step, and otherwise
 * advances the schedule num_processes times, because a schedule is written in single-process steps
 * and N processes take N times fewer steps over the same data ("the learning rate will be stepped
 * twice as often on 2 GPUs"). With split_batches every process sees the global batch, so it
 * advances once. With step_scheduler_with_optimizer false it advances once per call, always.
 */
ACCEL_API accel_status accel_scheduler_new(accel_optimizer* optimizer, const char* kind,
                                           accel_scheduler** out);

/** Sets an option by key (before the first step). */
ACCEL_API accel_status accel_scheduler_set(accel_scheduler* scheduler, const char* key,
                                           const char* value);

/** Steps the schedule (see the rules above). */
ACCEL_API accel_status accel_scheduler_step(accel_scheduler* scheduler);

/** The learning rate the schedule has set (group 0's: accel_optimizer_group_lr for the others). */
ACCEL_API accel_status accel_scheduler_lr(const accel_scheduler* scheduler, double* out);

/** Frees the scheduler handle. NULL is a no-op. Waits for nothing. */
ACCEL_API void accel_scheduler_free(accel_scheduler* scheduler);

/* ----------------------------------------------------------------------------------------------------
 * Training: prepare, accumulate, backward, clip
 * -------------------------------------------------------------------------------------------------
 */

/**
 * Accelerate's prepare(*objects): `objects[0..count)` are handles of any kind among accel_model,
 * accel_optimizer, accel_scheduler and accel_dataloader, in any order. Models go to the device
 * (unless device_placement is off) and, with several processes, get rank 0's parameters and buffers
 * and data-parallel gradient synchronisation; optimizers are bound to the placed parameters (their
 * model must be prepared in the same call or before); schedulers get Accelerate's stepping rules;
 * dataloaders are sharded already and join the accelerator's checkpoints. Models, optimizers and
 * schedulers join the accelerator's training family. Preparing an object twice is a no-op. Every
 * argument is checked before anything is prepared. A model built empty (accel_model_new_empty, not
 * loaded yet) is prepared only under ZeRO stage 3 on several processes, each rank allocating only
 * its share for the collective load after accel_prepare (a host's model, or any other
 * configuration, is ACCEL_ERR_STATE: load it first); until loaded it is refused on every rank
 * alike.
 */
ACCEL_API accel_status accel_prepare(accel_accelerator* accelerator, void* const* objects,
                                     size_t count);

/**
 * Opens a micro-step (Accelerate's accumulate()): with gradient_accumulation_steps K, gradients are
 * synchronised and optimizers/schedulers step on every K-th call and on the last batch of the
 * dataloader in use (which also restarts the count). Call it once per batch, before the forward.
 */
ACCEL_API accel_status accel_accumulate(accel_accelerator* accelerator);

/** Whether the current micro-step synchronises gradients (true without accumulation). */
ACCEL_API accel_status accel_sync_gradients(const accel_accelerator* accelerator, bool* out);

/**
 * Backward of a one-element loss: divided by gradient_accumulation_steps (always, as Accelerate),
 * multiplied by the loss scale under fp16; with several processes the gradients of prepared models
 * are averaged across processes in buckets while backward runs (skipped on micro-steps that do not
 * sync). A parameter that gets no gradient on a rank counts as zero there; one no rank used keeps
 * its gradient. It runs in the accelerator's training family: for a loss computed by a model that
 * is not prepared, do not call into that model's family from another thread meanwhile (backward
 * writes its gradients).
 */
ACCEL_API accel_status accel_backward(accel_accelerator* accelerator, const accel_tensor* loss);

/**
 * Clips the gradient norm of `model`'s parameters to `max_norm` (norm_type 2 for the Euclidean
 * norm), unscaling them first under fp16; the total norm before clipping goes to `*out_norm`
 * (may be NULL).
 */
ACCEL_API accel_status accel_clip_grad_norm(accel_accelerator* accelerator, accel_model* model,
                                            double max_norm, double norm_type, double* out_norm);

/** Clamps every gradient element of `model` to [-clip_value, clip_value] (unscaled first). */
ACCEL_API accel_status accel_clip_grad_value(accel_accelerator* accelerator, accel_model* model,
                                             double clip_value);

/**
 * Accelerate's no_sync(model), as a begin/end pair: between them, accel_backward keeps `model`'s
 * gradients on this rank (they add up across backwards) and the first backward after the end
 * reduces them all (PyTorch DDP's no_sync). Optimizers still step when called. Pairs nest; an end
 * without its begin is ACCEL_ERR_STATE. With one process, or a model that is not prepared, there
 * is nothing to hold back and the pair only counts. Not a collective.
 */
ACCEL_API accel_status accel_no_sync_begin(accel_accelerator* accelerator, accel_model* model);
ACCEL_API accel_status accel_no_sync_end(accel_accelerator* accelerator, accel_model* model);

/* ----------------------------------------------------------------------------------------------------
 * Finding a batch size that fits
 * -------------------------------------------------------------------------------------------------
 */

/**
 * One try at `batch_size`: return ACCEL_OK when it ran, ACCEL_ERR_OUT_OF_MEMORY (what libaccel's
 * calls return when LibTorch or the system ran out of memory) to be tried again smaller, any other
 * status to stop the search with it.
 */
typedef accel_status (*accel_batch_size_fn)(void* user_data, int64_t batch_size);

/**
 * Accelerate's find_executable_batch_size: calls `fn(user_data, size)` on the calling thread from
 * `starting_batch_size` down, and after a try that ran out of memory again at int(size * 0.9)
 * (128, 115, 103, ... 9, 8, 7, ...); the size whose try ran goes to `*out_batch_size`. When no
 * size down to 1 runs: ACCEL_ERR_OUT_OF_MEMORY "No executable batch size found, reached zero."
 * (also for a start of 0). Any other failure of a try ends the search with that status and message.
 *
 * Beyond Accelerate, in a job of several processes every rank learns every rank's outcome in one
 * collective after each try, so that all ranks go on with the same size (a rank that ran out of
 * memory makes every rank retry smaller) or stop together (ACCEL_ERR_PEER_FAILED on the others):
 * every rank calls it with the same start. A try that must be retried leaves things as they were
 * before it: LibTorch's default generator and libaccel's, the gradients of the prepared models,
 * the positions of the prepared dataloaders and the accumulation counters are put back, and
 * libaccel's cached free memory is released (parameters and optimizer state are the try's own
 * business: make them inside it, as Accelerate's examples do). Collectives inside a try must not
 * depend on one rank's memory: a rank that runs out of memory mid-collective leaves the others
 * waiting until the collective timeout.
 */
ACCEL_API accel_status accel_find_executable_batch_size(accel_accelerator* accelerator,
                                                        int64_t starting_batch_size,
                                                        accel_batch_size_fn fn, void* user_data,
                                                        int64_t* out_batch_size);

/* ----------------------------------------------------------------------------------------------------
 * Local SGD
 * -------------------------------------------------------------------------------------------------
 */

typedef struct accel_local_sgd accel_local_sgd;

/**
 * Accelerate's LocalSGD(accelerator, model, local_sgd_steps): from here until accel_local_sgd_end,
 * `model`'s gradients are not synchronised (accel_no_sync_begin), and every `local_sgd_steps`-th
 * accel_local_sgd_step (call it after each optimizer step) averages the model's parameters across
 * the ranks, in one all-reduce per dtype; buffers and optimizer state stay each rank's own. The
 * model must be prepared in a job of several processes (ACCEL_ERR_STATE); under ZeRO (any stage)
 * it is ACCEL_ERR_UNSUPPORTED, as Accelerate refuses DeepSpeed and FSDP; local_sgd_steps < 1 is
 * ACCEL_ERR_INVALID_ARGUMENT. With one process it only counts steps.
 *
 * Options (accel_local_sgd_set, before the first step), beyond Accelerate: outer_optimizer
 * (none: Accelerate's plain average; nesterov: DiLoCo's outer step: the change of the averaged
 * parameters since the last average is a gradient for an SGD with Nesterov momentum, outer_lr
 * 0.7, outer_momentum 0.9, from the parameters as they are when it is set).
 */
ACCEL_API accel_status accel_local_sgd_begin(accel_accelerator* accelerator, accel_model* model,
                                             int64_t local_sgd_steps, accel_local_sgd** out);

/** Sets an option by key (see above). */
ACCEL_API accel_status accel_local_sgd_set(accel_local_sgd* local_sgd, const char* key,
                                           const char* value);

/** Counts an optimizer step; every local_sgd_steps-th averages (a collective: every rank calls it
 * alike). */
ACCEL_API accel_status accel_local_sgd_step(accel_local_sgd* local_sgd);

/**
 * Averages once more unless the last step just did (so n steps average ceil(n / local_sgd_steps)
 * times; Accelerate always averages here), and ends no_sync. A collective when it averages. A
 * second end does nothing.
 */
ACCEL_API accel_status accel_local_sgd_end(accel_local_sgd* local_sgd);

/** How many times the parameters were averaged so far. */
ACCEL_API accel_status accel_local_sgd_average_count(const accel_local_sgd* local_sgd,
                                                     int64_t* out);

/** Frees the handle; one not ended ends no_sync without averaging (no collective). NULL is a
 * no-op. */
ACCEL_API void accel_local_sgd_free(accel_local_sgd* local_sgd);

/* ----------------------------------------------------------------------------------------------------
 * Profiling
 * -------------------------------------------------------------------------------------------------
 */

typedef struct accel_profiler accel_profiler;

/** Called when a recorded window is complete (Accelerate's on_trace_ready); it may read the window
 * (accel_profiler_table, accel_profiler_export_chrome_trace). A status other than ACCEL_OK makes
 * the step (or stop) that completed the window fail with ACCEL_ERR_CALLBACK; the next window is
 * recorded all the same. */
typedef accel_status (*accel_trace_ready_fn)(void* user_data, accel_profiler* profiler);

/**
 * Accelerate's accelerator.profile(ProfileKwargs(...)) on LibTorch's profiler. Options
 * (accel_profiler_set, before start): activities ("cpu", "cuda" or "cpu,cuda"; default cpu),
 * torch.profiler's schedule (wait, warmup, active, repeat, skip_first: setting any gives a
 * schedule, with wait 0, warmup 0, active 1, repeat 0, skip_first 0 for the others; without one,
 * the whole block is one window), record_shapes, profile_memory, with_stack, with_flops,
 * with_modules (false), output_trace_dir (none).
 *
 * Between accel_profiler_start and accel_profiler_stop, LibTorch records the operators of the
 * calling thread (and of the intra-op threads it hands work to): call start, step and stop from
 * one thread (ACCEL_ERR_STATE otherwise), and accel_profiler_step at the start of each step (as
 * prof.step()). At stop, with output_trace_dir, every rank writes `profile_<rank>.json` there: the
 * last complete window as Chrome-trace JSON (chrome://tracing, Perfetto), made atomically; the
 * ranks then wait for each other (a collective), and the main process logs the window's summary
 * table at info level. Without a profiler nothing is recorded or written.
 */
ACCEL_API accel_status accel_profiler_new(accel_accelerator* accelerator, accel_profiler** out);

/** Sets an option by key (see above). */
ACCEL_API accel_status accel_profiler_set(accel_profiler* profiler, const char* key,
                                          const char* value);

/** The trace-ready callback (NULL: none). `user_data` is passed back as it is. */
ACCEL_API accel_status accel_profiler_set_on_trace_ready(accel_profiler* profiler,
                                                         accel_trace_ready_fn fn, void* user_data);

/** Starts: step 0 of the schedule. ACCEL_ERR_STATE when started before, or when LibTorch's profiler
 * is already on in this thread. */
ACCEL_API accel_status accel_profiler_start(accel_profiler* profiler);

/** The next step begins (torch.profiler's prof.step()). */
ACCEL_API accel_status accel_profiler_step(accel_profiler* profiler);

/** The end of the profiled block (see above). A collective with an output_trace_dir. */
ACCEL_API accel_status accel_profiler_stop(accel_profiler* profiler);

/**
 * The summary table of the last complete window (torch's key_averages().table()): a row per
 * operator with self and total CPU time and calls, sorted by `sort_by` (cpu_time_total,
 * self_cpu_time_total, count, name; NULL: cpu_time_total), at most `row_limit` rows (-1: all),
 * ending with "Self CPU time total: ...". Buffer convention.
 */
ACCEL_API accel_status accel_profiler_table(const accel_profiler* profiler, const char* sort_by,
                                            int64_t row_limit, char* buf, size_t capacity,
                                            size_t* out_size);

/** Writes the last complete window to `path` as Chrome-trace JSON (made atomically). */
ACCEL_API accel_status accel_profiler_export_chrome_trace(const accel_profiler* profiler,
                                                          const char* path);

/** How many windows were complete (on_trace_ready calls) so far. */
ACCEL_API accel_status accel_profiler_window_count(const accel_profiler* profiler, int64_t* out);

/** Frees the profiler; one still running is stopped without writing anything, when freed on the
 * thread that started it. NULL is a no-op. */
ACCEL_API void accel_profiler_free(accel_profiler* profiler);

/* ----------------------------------------------------------------------------------------------------
 * Checkpoints
 * -------------------------------------------------------------------------------------------------
 */

/**
 * Accelerate's save_model: writes `model`'s parameters and buffers (plain names, no wrapper
 * prefixes) as safetensors into directory `dir` (created if missing): model.safetensors, or, above
 * `max_shard_size` ("10GB" when NULL; decimal units as Accelerate, "500MB", and binary "1GiB"), the
 * shards model-00001-of-0000N.safetensors filled greedily in parameter order plus
 * model.safetensors.index.json. Each file is written aside and renamed into place. Only the main
 * process writes (with save_on_each_node on several machines, each machine's local main process);
 * every process returns once it is written, with the main process's status (its class and
 * message).
 */
ACCEL_API accel_status accel_save_model(accel_accelerator* accelerator, const accel_model* model,
                                        const char* dir, const char* max_shard_size);

/**
 * Accelerate's load_checkpoint_in_model: loads weights into `model` from a safetensors file, a
 * model.safetensors.index.json, or a directory holding either. Names, shapes and dtypes must
 * match: otherwise ACCEL_ERR_SHAPE lists the missing, unexpected and mismatched tensors and the
 * model is unchanged. A corrupt or truncated file is ACCEL_ERR_IO naming it and what is wrong.
 * Each tensor is read straight into place after every file's header is checked; a read failing
 * midway is ACCEL_ERR_IO saying the model is partly loaded. On a model prepared under ZeRO stage 3
 * every rank calls it (fsdp_cpu_ram_efficient_loading: each rank reads only what it owns).
 */
ACCEL_API accel_status accel_load_checkpoint_in_model(accel_model* model, const char* path);

/** What accel_load_pretrained found and did. */
typedef struct accel_load_report accel_load_report;

/**
 * Loads a pretrained checkpoint into `model` as Hugging Face transformers' from_pretrained does
 * (4.4x): from a safetensors file, an index or a directory, as accel_load_checkpoint_in_model.
 * `options` (NULL: none) is "key=value" pairs as accel_model_add_layer's spec:
 *   strict (false)               anything missing, unexpected or mismatched is an error
 *                                (ACCEL_ERR_INVALID_ARGUMENT, or ACCEL_ERR_SHAPE for shapes);
 *                                otherwise missing tensors keep their initialisation and checkpoint
 *                                tensors the model lacks are left (the fine-tune of a new head)
 *   base_model_prefix (none)     transformers' rule, decided once per load: a checkpoint of the base
 *                                model ("encoder.x") loads into a model holding it under the prefix
 *                                ("bert.encoder.x"), and a task checkpoint ("bert.x") into the base
 *                                model ("x")
 *   ignore_mismatched_sizes (false)  not strict: a tensor of another shape keeps the model's and is
 *                                reported; otherwise any shape mismatch is ACCEL_ERR_SHAPE
 *   model_name ("the model"), architecture_matches (false)  for the report's words: unexpected
 *                                tensors are a warning when the checkpoint was made for this very
 *                                architecture (transformers' config.architectures), otherwise info
 * Floating checkpoint tensors are cast to the model's dtype (fp16 and bf16 into fp32 and back); a
 * floating tensor for an integer one, or the other way, is ACCEL_ERR_DTYPE. Tensors of the model
 * that share storage (tied weights) count as loaded when one of them is. On any error found
 * before the tensors' bytes are read (files, headers, dtypes, the plan) the model is unchanged; a
 * read failing midway is ACCEL_ERR_IO saying it is partly loaded. Under ZeRO stage 3, as
 * accel_load_checkpoint_in_model. `*out_report` (may be NULL) receives the report, which
 * accel_load_report_keys and accel_load_report_text read.
 */
ACCEL_API accel_status accel_load_pretrained(accel_model* model, const char* path,
                                             const char* options, accel_load_report** out_report);

/**
 * The program's name for checkpoint tensors (accel_load_pretrained_mapped): writes the model's
 * name for the checkpoint tensor `checkpoint_name` into `out`, NUL-terminated, at most `capacity`
 * bytes with the NUL (`capacity` is 4096), and returns 0; an empty name ("") leaves that
 * checkpoint tensor unused (it is reported as unexpected, under `checkpoint_name`). Any other
 * return stops the load with ACCEL_ERR_CALLBACK, as does a name that does not fit (no NUL within
 * `capacity` bytes), the message naming the checkpoint tensor; the model is then unchanged.
 * `checkpoint_name` is borrowed for the call. Called on the thread that called the load, once per
 * checkpoint tensor, in the order of the names (byte order), before any tensor's bytes are read,
 * while the model's functions wait for the load: a call it makes to functions of an accelerator,
 * model, optimizer or scheduler fails with ACCEL_ERR_STATE.
 */
typedef int32_t (*accel_name_map_fn)(const char* checkpoint_name, char* out, size_t capacity,
                                     void* user_data);

/**
 * accel_load_pretrained with the checkpoint's names mapped by the program first, as transformers'
 * from_pretrained(key_mapping=...) (5.x, core_model_loading's rename_source_key): `map` renames
 * each checkpoint tensor, and every rule of accel_load_pretrained then applies to the new names
 * as if the checkpoint held them: base_model_prefix (decided from the new names), strict, shapes,
 * dtype casts, tied weights, ZeRO stage 3 (each rank reads only the bytes it owns). The report
 * uses the new names, as transformers reports the renamed keys (missing: the model's tensors in
 * the naming accel_load_pretrained reports; unexpected and mismatched: the mapped names), and the
 * checkpoint's own names for the tensors the map left unused. Two checkpoint tensors mapped to one
 * name is ACCEL_ERR_INVALID_ARGUMENT naming both. Every failure of the map or of its names comes
 * before any byte is read: the model is unchanged. `map` NULL is accel_load_pretrained;
 * `user_data` is passed back as it is, and neither is kept after the call. Under ZeRO stage 3
 * every rank calls it, so every rank's map is called and must map alike.
 */
ACCEL_API accel_status accel_load_pretrained_mapped(accel_model* model, const char* path,
                                                    const char* options, accel_name_map_fn map,
                                                    void* user_data,
                                                    accel_load_report** out_report);

/**
 * The names of one kind in a report, sorted, in the checkpoint's naming (transformers' keys;
 * with accel_load_pretrained_mapped, the mapped names):
 * `kind` "missing" (the model's tensors no checkpoint tensor filled), "unexpected" (checkpoint
 * tensors not used) or "mismatched" (ignored for their shape).
 */
ACCEL_API accel_status accel_load_report_keys(const accel_load_report* report, const char* kind,
                                              accel_bytes_list** out);

/**
 * transformers' messages about the load, in its order and words, one per line block, each
 * starting with "WARNING: " or "INFO: " (its logger's levels); `warnings_only` leaves out the
 * INFO ones (transformers' default verbosity). Buffer convention.
 */
ACCEL_API accel_status accel_load_report_text(const accel_load_report* report, bool warnings_only,
                                              char* buf, size_t capacity, size_t* out_size);

/** Frees a report. NULL is a no-op. */
ACCEL_API void accel_load_report_free(accel_load_report* report);

/**
 * Accelerate's save_state, language-neutral: writes into directory `dir` every prepared model
 * (safetensors), each optimizer's state tensors (safetensors) and options (JSON), each scheduler's
 * step count, the loss scaler, each prepared dataloader's cursor, the accumulation counter, the
 * configuration, one random-state file per process, the program's registered objects, and
 * manifest.json listing every file with its size and CRC-32. The directory is written as
 * `dir`.partial and renamed into place only when complete, so an interrupted save never harms a
 * previous checkpoint at `dir`. A collective: every process calls it. With save_on_each_node true
 * on a job of several machines, each machine's local main process writes its own complete copy of
 * `dir` (holding only that machine's processes' random-state files), so that machines need no
 * shared directory; accel_load_state then reads on each machine the copy there (and refuses
 * copies of different saves). Without it, `dir` must be one directory every machine sees.
 *
 * With `dir` NULL, the configuration's project settings decide (Accelerate's ProjectConfiguration):
 * automatic_checkpoint_naming true saves to project_dir/checkpoints/checkpoint_<n>, n counting up
 * from 0 (or from one past the newest checkpoint there), and total_limit > 0 keeps only the newest
 * total_limit of them; accel_load_state(acc, NULL) loads the newest and continues the numbering
 * after it.
 */
ACCEL_API accel_status accel_save_state(accel_accelerator* accelerator, const char* dir);

/**
 * Restores a save_state directory into the prepared objects (the same numbers and kinds, prepared
 * in the same order). All or nothing: the manifest's sizes and checksums are verified, then every
 * file is read and every key, type, tensor name, shape and dtype is checked against the prepared
 * objects, on every process, before anything changes. A failure on any process fails the call on
 * every process, names the file (and the key or tensor), and leaves every model, optimizer,
 * scheduler, dataloader cursor, loss scaler and random state exactly as it was: an incomplete or
 * corrupt checkpoint is ACCEL_ERR_IO; another optimizer kind, schedule or number of prepared
 * objects is ACCEL_ERR_STATE; tensors of another model are ACCEL_ERR_SHAPE. The one exception: the
 * load callbacks of accel_register_for_checkpointing run after every check has passed and before
 * the rest is applied; when one fails the call fails and the rest is not applied, but the objects
 * whose callbacks already ran keep what they loaded. May run with another number of processes than
 * the save: the dataloaders continue from the saved global sample cursor, and a process that did
 * not exist then derives its random states from process 0's. A collective: every process calls it.
 */
ACCEL_API accel_status accel_load_state(accel_accelerator* accelerator, const char* dir);

/** Where a checkpoint save callback writes its bytes (see accel_register_for_checkpointing). */
typedef struct accel_state_writer accel_state_writer;

/**
 * Appends `size` bytes at `data` to the object being saved. Valid only inside the save callback
 * that received `writer`, on its thread.
 */
ACCEL_API accel_status accel_state_writer_write(accel_state_writer* writer, const void* data,
                                                size_t size);

/** Writes the object's state: any number of accel_state_writer_write calls, then return 0. */
typedef int32_t (*accel_state_save_fn)(accel_state_writer* writer, void* user_data);
/** Restores the object's state from the `size` bytes at `data` (borrowed for the call). */
typedef int32_t (*accel_state_load_fn)(const void* data, size_t size, void* user_data);

/**
 * Saves the program's own state with every checkpoint (Accelerate's register_for_checkpointing):
 * `save` is called once on the main process during accel_save_state, `load` on every process during
 * accel_load_state with the saved bytes. A nonzero return fails the save or load with
 * ACCEL_ERR_CALLBACK. Both run on the thread that called save/load_state, inside the accelerator's
 * training family: they may call functions of the family (accel_model_tensor, say) but not
 * accel_save_state or accel_load_state (ACCEL_ERR_STATE). Registration order is the checkpoint's
 * order: register the same objects in the same order before loading. `release` (may be NULL) is
 * called once with `user_data` when the accelerator is freed.
 */
ACCEL_API accel_status accel_register_for_checkpointing(accel_accelerator* accelerator,
                                                        accel_state_save_fn save,
                                                        accel_state_load_fn load, void* user_data,
                                                        accel_release_fn release);

/* ----------------------------------------------------------------------------------------------------
 * Big-model inference
 *
 * Accelerate's big-model inference on the CPU: a device map from byte budgets
 * (infer_auto_device_map), then the model dispatched (dispatch_model with disk offload).
 * -------------------------------------------------------------------------------------------------
 */

/**
 * Accelerate's infer_auto_device_map (1.15) for `model`: where each module's weights go, "cpu" or
 * "disk", greedily in module order, keeping room on the cpu for the largest layer, never splitting
 * a module of a no-split class, keeping tied parameters (tensors sharing storage) together. Module
 * sizes are those of the model's parameters and buffers (an empty model's as they will be loaded);
 * a class is a catalogue layer's ("Linear", "LayerNorm", ...) or a TorchScript class's unqualified
 * name. `options`: key=value pairs separated by spaces or ';', lists inside a value by ',':
 *   max_memory (required)        "cpu:SIZE" (SIZE: "200MB", "1GiB", a byte count) and "disk" (modules
 *                                may be offloaded), e.g. max_memory=cpu:200MB,disk
 *   no_split_module_classes      class names, e.g. no_split_module_classes=Block,Attention
 *   fallback_allocation (false)  Accelerate's fallback_allocation
 * `*out` receives "module.path=cpu" / "=disk" lines in Accelerate's order, the root named "" (a
 * model that fits whole is one line, "=cpu"). A map that needs disk when max_memory names none is
 * ACCEL_ERR_OUT_OF_MEMORY naming the bytes the model needs, the cpu budget, and what would have
 * gone to disk; a malformed option is ACCEL_ERR_INVALID_ARGUMENT.
 */
ACCEL_API accel_status accel_infer_device_map(const accel_model* model, const char* options,
                                              accel_bytes_list** out);

/**
 * Accelerate's dispatch_model with disk offload, on the CPU (load_checkpoint_and_dispatch): loads
 * `model`'s tensors from `checkpoint` (a safetensors file, a sharded index or a directory, as
 * accel_load_checkpoint_in_model), those mapped to "cpu" once; those mapped to "disk" keep no
 * storage, and just before each forward of their module (Accelerate's AlignDevicesHook
 * pre_forward) are read from the checkpoint's file (pread, no copy to .dat files) into one buffer
 * every offloaded module reuses in turn, then dropped after it (post_forward). The memory of a
 * forward is then the cpu tensors, the largest offloaded module, and the activations.
 * `device_map_or_options`: "module=cpu|disk" lines (accel_infer_device_map's, separated by newlines,
 * spaces or ';'; every tensor placed by its longest entry), or accel_infer_device_map's options
 * (they name max_memory), from which the map is computed. An offloaded module is one called from a
 * method of its parent and returning one tensor (as ZeRO stage 3's units); a tensor of the root
 * itself stays loaded. For catalogue models (also built empty) and TorchScript models.
 * Inference only: every parameter stops requiring grad, a forward whose offloaded module's output
 * requires grad is ACCEL_ERR_UNSUPPORTED, and accel_optimizer_new and accel_prepare refuse the
 * model (ACCEL_ERR_STATE); accel_model_tensor refuses an offloaded tensor naming it, and the loads
 * and saves that need every weight (accel_load_checkpoint_in_model, accel_load_pretrained,
 * accel_save_model, accel_model_save_torchscript) refuse the model (ACCEL_ERR_STATE). Errors found before anything is read leave the model unchanged: a missing
 * file (ACCEL_ERR_IO), a tensor the map does not place or the checkpoint lacks
 * (ACCEL_ERR_INVALID_ARGUMENT), a shape (ACCEL_ERR_SHAPE) or kind of dtype (ACCEL_ERR_DTYPE) that
 * differs, a module that cannot be followed or a tied tensor mapped to disk
 * (ACCEL_ERR_UNSUPPORTED), a model prepared or dispatched already (ACCEL_ERR_STATE), a host
 * module (ACCEL_ERR_UNSUPPORTED); a read failing midway leaves the cpu tensors partly loaded and
 * says so.
 */
ACCEL_API accel_status accel_dispatch_model(accel_model* model, const char* checkpoint,
                                            const char* device_map_or_options);

/* ----------------------------------------------------------------------------------------------------
 * Tokenizers
 *
 * Hugging Face's BERT WordPiece tokenizer, with the ids its `tokenizers` library (0.19.1) gives:
 * the special tokens of tokenizer.json's added_tokens matched in the raw text first; between them
 * BertNormalizer (clean_text, handle_chinese_chars, strip_accents, lowercase), BertPreTokenizer
 * and WordPiece (greedy longest match, "##" continuations, [UNK] for a word of more than
 * max_input_chars_per_word characters or with no match); then the post-processor's template,
 * [CLS] text [SEP]. tokenizer.json's own truncation and padding settings are ignored (as
 * sentence-transformers ignores them): the calls say their max_length, and a batch is padded to its
 * longest row. A tokenizer is immutable once loaded: any calls on it may run at once from any
 * threads.
 * -------------------------------------------------------------------------------------------------
 */

/** A loaded tokenizer. */
typedef struct accel_tokenizer accel_tokenizer;

/**
 * Loads a tokenizer from `path`: a tokenizer.json file, a vocab.txt file (read as transformers'
 * BertTokenizerFast reads it, with tokenizer_config.json beside it when there is one:
 * do_lower_case, tokenize_chinese_chars, strip_accents, the special tokens' names), or a directory
 * holding either (tokenizer.json preferred), such as a sentence-transformers model folder. A
 * missing or unreadable file or corrupt JSON is ACCEL_ERR_IO; a tokenizer of another kind (a BPE,
 * Unigram or WordLevel model, a normalizer or pre-tokenizer other than BERT's, a post-processor
 * other than TemplateProcessing or BertProcessing, an added token with normalized, lstrip, rstrip
 * or single_word set) is ACCEL_ERR_INVALID_ARGUMENT naming what is not supported.
 */
ACCEL_API accel_status accel_tokenizer_load(const char* path, accel_tokenizer** out);

/**
 * The token ids of `text` (UTF-8; invalid UTF-8 is ACCEL_ERR_INVALID_ARGUMENT naming the byte
 * offset, where Python's tokenizers, which takes str, never sees such bytes), with [CLS] first and
 * [SEP] last. `max_length` counts them: 0 is no truncation; otherwise the text's tokens are cut at
 * the end so that at most `max_length` ids come back (sentence-transformers' MiniLM uses 256); a
 * max_length below the number of special tokens (2) is ACCEL_ERR_INVALID_ARGUMENT. Buffer
 * convention (capacity in elements): `*out_count` receives the number of ids.
 */
ACCEL_API accel_status accel_tokenizer_encode(const accel_tokenizer* tok, const char* text,
                                              size_t max_length, int64_t* ids, size_t capacity,
                                              size_t* out_count);

/**
 * Encodes `count` texts (count >= 1) as accel_tokenizer_encode does and returns them as
 * sentence-transformers feeds a model: `*input_ids` an int64 tensor [count, longest], each row
 * padded on the right with the [PAD] token's id (tokenizer.json's padding pad_token, else "[PAD]";
 * a tokenizer without one is ACCEL_ERR_INVALID_ARGUMENT), and `*attention_mask` an int64 tensor of
 * the same shape, 1 for a token and 0 for padding. Both are new CPU tensors the caller frees.
 * Any text's error fails the call naming the text's index; nothing is returned then.
 */
ACCEL_API accel_status accel_tokenizer_encode_batch(const accel_tokenizer* tok,
                                                    const char* const* texts, size_t count,
                                                    size_t max_length, accel_tensor** input_ids,
                                                    accel_tensor** attention_mask);

/** The id of `token` (an added token or a vocabulary entry, e.g. "[CLS]"); none is
 * ACCEL_ERR_INVALID_ARGUMENT. */
ACCEL_API accel_status accel_tokenizer_token_id(const accel_tokenizer* tok, const char* token,
                                                int64_t* out);

/** The number of distinct tokens, vocabulary and added tokens together (tokenizers'
 * get_vocab_size()): 30522 for MiniLM. */
ACCEL_API accel_status accel_tokenizer_vocab_size(const accel_tokenizer* tok, size_t* out);

/** Frees a tokenizer. NULL is a no-op. Waits for nothing. */
ACCEL_API void accel_tokenizer_free(accel_tokenizer* tok);

/* ----------------------------------------------------------------------------------------------------
 * Trackers
 *
 * Accelerate's experiment tracking (log_with, init_trackers, log, end_training). The trackers a
 * run writes are named by the configuration key `log_with` (ACCEL_LOG_WITH): "tensorboard",
 * "jsonl", "csv", "all" (the three), or a comma-separated list; default none. They write under
 * logging_dir/project_name, `logging_dir` (ACCEL_LOGGING_DIR) defaulting to `project_dir`, as
 * Accelerate's ProjectConfiguration:
 *   tensorboard  events.out.tfevents.<time>.<host>.<pid>.<n>, written by libaccel itself (no
 *                Python, no TensorFlow): numbers as scalars (TensorBoard keeps them as 32-bit
 *                floats), texts as PyTorch's add_text writes them (tag "<key>/text_summary"); the
 *                configuration as a text summary "hparams" (a Markdown table, not the hparams
 *                plugin) and as hparams.yml
 *   jsonl        metrics.jsonl, one line a call: {"step": 5, "wall_time": <seconds since the
 *                epoch>, "values": {"loss": 0.31, "note": "..."}} ("step": null without one; NaN
 *                and infinities as NaN, Infinity, -Infinity, as Python's json reads them);
 *                hparams.json
 *   csv          metrics.csv, one row a value: wall_time,step,tag,value (nan, inf, -inf);
 *                hparams.csv (key,value)
 * jsonl and csv append to an earlier run's files in the same directory; TensorBoard starts a new
 * event file. Every accel_log reaches the files in one write per file before it returns: a
 * process killed afterwards loses none of it. A program adds trackers of its own (a W&B, MLflow
 * or database client in its language) with accel_add_tracker.
 *
 * Only the main process (process index 0) writes and calls custom trackers; on the others these
 * calls check their arguments and state and return ACCEL_OK, so one program runs unchanged on any
 * number of processes. None is a collective.
 * -------------------------------------------------------------------------------------------------
 */

/** Named values to log: numbers (double, NaN and infinities included) and texts, in the order
 * first set. Not thread-safe: one thread at a time per object. */
typedef struct accel_values accel_values;

/** Creates an empty set of values. Free with accel_values_free. */
ACCEL_API accel_status accel_values_new(accel_values** out);

/** Frees a set of values. NULL is a no-op. */
ACCEL_API void accel_values_free(accel_values* values);

/** Sets `key` (non-empty UTF-8) to a number, replacing a value it had and keeping its place. */
ACCEL_API accel_status accel_values_set_number(accel_values* values, const char* key,
                                               double number);

/** Sets `key` (non-empty UTF-8) to a copy of `text`, replacing a value it had and keeping its
 * place. */
ACCEL_API accel_status accel_values_set_text(accel_values* values, const char* key,
                                             const char* text);

/** Number of keys set. */
ACCEL_API accel_status accel_values_count(const accel_values* values, size_t* out);

/**
 * The value at `index` (0 <= index < count, in the order first set): its key, whether it is a
 * text, and the number (0 for a text) or the text (NULL for a number). Any output may be NULL.
 * The strings are the object's, valid until it changes or is freed.
 */
ACCEL_API accel_status accel_values_get(const accel_values* values, size_t index,
                                        const char** key, int32_t* is_text, double* number,
                                        const char** text);

/**
 * Starts the run's trackers (Accelerate's init_trackers): makes logging_dir/project_name, opens
 * the files of `log_with` and records `config` (the run's hyperparameters; may be NULL) in each,
 * then calls every custom tracker's start. `project_name` is one path component (no '/', not "."
 * or ".."). Nothing is half-started: when a tracker fails, those already started are finished and
 * the call fails: a directory that cannot be made or written is ACCEL_ERR_IO naming it (before
 * training, not at the first log); log_with without logging_dir or project_dir is
 * ACCEL_ERR_CONFIG; a custom start callback's failure is ACCEL_ERR_CALLBACK naming the tracker.
 * Once per run: a second call before accel_end_training is ACCEL_ERR_STATE.
 */
ACCEL_API accel_status accel_init_trackers(accel_accelerator* accelerator, const char* project_name,
                                           const accel_values* config);

/**
 * Logs `values` at `step` (>= 0; -1: none, Accelerate's step=None) to every tracker (Accelerate's
 * log). Before accel_init_trackers, or after accel_end_training, it is ACCEL_ERR_STATE. A tracker
 * that fails does not keep the others from writing: every tracker gets the values, then the call
 * reports the first failure (ACCEL_ERR_IO naming the file, ACCEL_ERR_CALLBACK naming a custom
 * tracker).
 */
ACCEL_API accel_status accel_log(accel_accelerator* accelerator, const accel_values* values,
                                 int64_t step);

/**
 * Finishes every tracker (Accelerate's end_training): files closed, custom finish callbacks
 * called. Without a started run it does nothing. accel_accelerator_free ends a started run too.
 * Trackers may be started again afterwards (a new run).
 */
ACCEL_API accel_status accel_end_training(accel_accelerator* accelerator);

/** A custom tracker's start: the project name and the configuration (empty when
 * accel_init_trackers got none). */
typedef int32_t (*accel_tracker_start_fn)(const char* project_name, const accel_values* config,
                                          void* user_data);
/** A custom tracker's log: the values (borrowed for the call) at `step` (-1: none). */
typedef int32_t (*accel_tracker_log_fn)(const accel_values* values, int64_t step,
                                        void* user_data);
/** A custom tracker's finish. */
typedef int32_t (*accel_tracker_finish_fn)(void* user_data);

/**
 * Adds a tracker of the program's own, named `name` (non-empty; not one of log_with's names), to
 * the accelerator's runs; before accel_init_trackers (ACCEL_ERR_STATE after, until
 * accel_end_training). `log` is required, `start` and `finish` may be NULL. They run on the main
 * process only, on the thread that called accel_init_trackers, accel_log, accel_end_training or
 * accel_accelerator_free; one that calls accel_init_trackers, accel_log, accel_end_training or
 * accel_add_tracker gets ACCEL_ERR_STATE. A nonzero return is ACCEL_ERR_CALLBACK
 * naming the tracker. `release` (may be NULL) is called once with `user_data` when the
 * accelerator is freed, on every process.
 */
ACCEL_API accel_status accel_add_tracker(accel_accelerator* accelerator, const char* name,
                                         accel_tracker_start_fn start, accel_tracker_log_fn log,
                                         accel_tracker_finish_fn finish, void* user_data,
                                         accel_release_fn release);

/* ----------------------------------------------------------------------------------------------------
 * Logging
 *
 * Accelerate's get_logger: messages with a level, written by the main process only (the default)
 * or by every process, and then optionally in rank order. The accelerator's level comes from the
 * configuration key `log_level` (ACCELERATE_LOG_LEVEL, ACCEL_LOG_LEVEL): notset, debug, info,
 * warning, error or critical, any case; default info. A message below the level is dropped before
 * anything else happens, on every rank alike.
 *
 * A message that passes goes to the accelerator's sink: by default one line on standard error,
 * "INFO: message" from the main process, "INFO [rank 1/2]: message" for a message of every process
 * in a job of more than one. A program routes messages to its language's logging with
 * accel_set_log_sink (the Rust, Go and Julia bindings install one: the `log` facade, log/slog,
 * Logging).
 * -------------------------------------------------------------------------------------------------
 */

/** A message's level: an ACCEL_LOG_* value or any number from 0 to 1000. */
typedef int32_t accel_log_level;

/** The numbers of Python's logging (Accelerate's logger is a logging.Logger). */
enum accel_log_level_values {
  ACCEL_LOG_NOTSET = 0,
  ACCEL_LOG_DEBUG = 10,
  ACCEL_LOG_INFO = 20,
  ACCEL_LOG_WARNING = 30,
  ACCEL_LOG_ERROR = 40,
  ACCEL_LOG_CRITICAL = 50
};

/** Flags of accel_log_message, ORed. Without ACCEL_LOG_ALL_PROCESSES only the main process
 * (process index 0) writes, as Accelerate's main_process_only=True. */
typedef uint32_t accel_log_flags;

/** Values are stable. */
enum accel_log_flags_values {
  ACCEL_LOG_ALL_PROCESSES = 1, /* every process writes (main_process_only=False) */
  ACCEL_LOG_IN_ORDER = 2 /* with ALL_PROCESSES: in rank order, a collective (in_order=True) */
};

/**
 * Receives a message that passed the level: its level (any number, usually an accel_log_level),
 * the process index of the rank writing it, the flags it was logged with and the message (UTF-8,
 * borrowed for the call). Runs on the thread that called accel_log_message, or, for the library's
 * own warnings (a tracker's file repaired, ZeRO stage 3's notes), on the thread of the call that
 * raised them (accel_init_trackers, accel_prepare); never on a thread of the library's; one call
 * at a time per accelerator. It may call the accelerator's queries and nothing else of its
 * training family (in rank order, and during accel_prepare, it runs under the family's lock: a
 * training call would wait forever); a call of accel_log_message or accel_set_log_sink from inside
 * it is ACCEL_ERR_STATE. A nonzero return makes accel_log_message return ACCEL_ERR_CALLBACK; on a
 * message of the library's own, the line goes to standard error with the failure instead.
 */
typedef int32_t (*accel_log_sink_fn)(accel_log_level level, int32_t rank, accel_log_flags flags,
                                     const char* message, void* user_data);

/**
 * Sets where the accelerator's messages go: `sink` with `user_data`, or standard error again with
 * NULL. The sink replaced is released: its `release` (may be NULL) is called once with its
 * `user_data`, as it is when the accelerator is freed.
 */
ACCEL_API accel_status accel_set_log_sink(accel_accelerator* accelerator, accel_log_sink_fn sink,
                                          void* user_data, accel_release_fn release);

/** The accelerator's level: messages below it are dropped. */
ACCEL_API accel_status accel_get_log_level(const accel_accelerator* accelerator,
                                           accel_log_level* out);

/** Sets the accelerator's level. */
ACCEL_API accel_status accel_set_log_level(accel_accelerator* accelerator, accel_log_level level);

/**
 * Logs `message` (UTF-8) at `level` with `flags` (0: the main process only): Accelerate's logger.log(level, message, main_process_only=..., in_order=...). On a process
 * that does not write, it checks its arguments and returns ACCEL_OK. With ACCEL_LOG_ALL_PROCESSES
 * and ACCEL_LOG_IN_ORDER it is a collective bounded by the collective timeout; a sink's failure
 * there still takes part in every barrier, then is reported.
 */
ACCEL_API accel_status accel_log_message(accel_accelerator* accelerator, accel_log_level level,
                                         accel_log_flags flags, const char* message);

/* ----------------------------------------------------------------------------------------------------
 * Trainer
 *
 * Hugging Face transformers' Trainer over the accelerator: the training loop a program would
 * otherwise write (accumulation, clipping, optimizer and scheduler steps), logging, evaluation,
 * prediction, checkpoints with rotation and the best model, early stopping and exact resume, with
 * transformers' callback events. Settings are TrainingArguments' names as "key=value" text
 * (accel_model_add_layer's spec format): max_steps, num_train_epochs, logging_strategy,
 * logging_steps, logging_first_step, eval_strategy, eval_steps, eval_delay, save_strategy (no,
 * steps, epoch, best), save_steps, save_total_limit, load_best_model_at_end,
 * metric_for_best_model, greater_is_better, early_stopping_patience, early_stopping_threshold,
 * gradient_accumulation_steps, max_grad_norm (default 1.0; 0: no clipping), auto_find_batch_size
 * (below), resume_from_checkpoint ("latest" or a directory), output_dir (default "trainer_output"), and
 * libaccel's speed_metrics (default true: the runtime and rate figures transformers adds to the
 * train and evaluation logs; false makes log_history the same from run to run), progress_bar
 * (default: on when standard error is a terminal), and num_items_in_batch (transformers': each
 * accumulation window's batches are fetched first and their label tokens, those of field
 * labels_field (default -1, the last) other than -100, counted over the window and every
 * process; the step gets the count as one more field, an int64 scalar, and returns its loss
 * summed over tokens divided by it, so the process count and the accumulation do not change the
 * result).
 * Values are checked as TrainingArguments checks them, with its messages; an unknown key is
 * ACCEL_ERR_INVALID_ARGUMENT listing the known ones. Mixed precision and ZeRO come from the
 * accelerator's configuration; so does the accumulation: gradient_accumulation_steps defaults to
 * the accelerator's and may not differ from it.
 *
 * A training step is exactly the loop a program writes with the functions above: for each batch
 * accel_accumulate, the training step, accel_backward; when gradients synchronise,
 * accel_clip_grad_norm (max_grad_norm > 0), accel_optimizer_step, accel_scheduler_step (unless the
 * step was skipped), accel_optimizer_zero_grad; so a Trainer's parameters are bitwise those of
 * that loop with the same seed. Every epoch starts with accel_dataloader_set_epoch of its number.
 *
 * auto_find_batch_size=true runs the training as accel_find_executable_batch_size's try, from the
 * train dataloader's batch size (when resuming, the checkpoint's train_batch_size) down: a try in
 * which a step runs out of memory (libaccel's ACCEL_ERR_OUT_OF_MEMORY, or a callback returning
 * it) is dropped and the training starts again at the next size. Beyond transformers, the next
 * try starts from exactly what train started from: the parameters, optimizer, schedule, random
 * and data states come back from an accel_save_state of them made at the start in
 * output_dir/.auto_find_batch_size_start (removed at the end; when resuming, the checkpoint is
 * loaded again), and the failed try's checkpoints and tracker records are removed, so the run at
 * the size found equals the run started at that size. That save costs one checkpoint's writing
 * per train. The dataloader keeps the size found; trainer_state.json records it. As for
 * accel_find_executable_batch_size, every process must run out of memory in the same step (a
 * process alone out of memory mid-collective leaves the others waiting for the timeout).
 *
 * Checkpoints are accel_save_state directories output_dir/checkpoint-<global_step>, each holding
 * transformers' trainer_state.json (written byte for byte as transformers writes it) and
 * trainer_loop.json (where in the epoch the save fell, the open loss window of every rank, the
 * early-stopping counter), so that a resumed run continues bit for bit where it left: the
 * parameters, trainer_state.json and the logs are those of the run that was not interrupted.
 * Rotation (save_total_limit) never deletes the best checkpoint. A best_model_checkpoint that no
 * longer exists on resume is dropped with a warning; a checkpoint past max_steps is an error.
 *
 * Every process makes the same calls: train, evaluate, predict and checkpoints are collectives.
 * One Trainer per accelerator at a time; free it before its accelerator (calls after the
 * accelerator is freed are ACCEL_ERR_STATE).
 * -------------------------------------------------------------------------------------------------
 */

/** A Trainer. */
typedef struct accel_trainer accel_trainer;

/**
 * transformers' TrainerCallback events. ON_SUBSTEP_END follows each micro-batch of an
 * accumulation window but its last; ON_PRE_OPTIMIZER_STEP comes after clipping; ON_LOG's values
 * are the logs (loss, grad_norm, learning_rate, epoch; or an evaluation's metrics), ON_EVALUATE's
 * and ON_PREDICT's the metrics; ON_PREDICTION_STEP follows each evaluation or prediction batch.
 */
typedef int32_t accel_trainer_event;

/** The values of accel_trainer_event. */
enum accel_trainer_event_values {
  ACCEL_TRAINER_ON_INIT_END = 0,
  ACCEL_TRAINER_ON_TRAIN_BEGIN = 1,
  ACCEL_TRAINER_ON_EPOCH_BEGIN = 2,
  ACCEL_TRAINER_ON_STEP_BEGIN = 3,
  ACCEL_TRAINER_ON_SUBSTEP_END = 4,
  ACCEL_TRAINER_ON_PRE_OPTIMIZER_STEP = 5,
  ACCEL_TRAINER_ON_OPTIMIZER_STEP = 6,
  ACCEL_TRAINER_ON_STEP_END = 7,
  ACCEL_TRAINER_ON_LOG = 8,
  ACCEL_TRAINER_ON_EVALUATE = 9,
  ACCEL_TRAINER_ON_SAVE = 10,
  ACCEL_TRAINER_ON_EPOCH_END = 11,
  ACCEL_TRAINER_ON_TRAIN_END = 12,
  ACCEL_TRAINER_ON_PREDICT = 13,
  ACCEL_TRAINER_ON_PREDICTION_STEP = 14
};

/** transformers' name of an event ("on_step_end"; static storage), or NULL for another value. */
ACCEL_API const char* accel_trainer_event_name(accel_trainer_event event);

/**
 * A callback of the Trainer: called on the thread running accel_trainer_train / evaluate /
 * predict, at each event, with `values` (see the events; NULL for the others, valid during the
 * call). It may read the state (accel_trainer_global_step, _epoch, _state_json), change the
 * control (accel_trainer_set_control) and call the accelerator and the Trainer's objects (e.g.
 * accel_trainer_evaluate from on_step_end); not accel_trainer_free nor accel_trainer_train.
 */
typedef int32_t (*accel_trainer_callback_fn)(accel_trainer* trainer, accel_trainer_event event,
                                             const accel_values* values, void* user_data);

/**
 * A training step: the loss of one micro-batch (`count` fields, valid during the call), a scalar
 * tensor with its graph, into `*out_loss` (the library frees it). Called on the training thread;
 * it may call the model (accel_model_call) and the other functions of the training family.
 */
typedef int32_t (*accel_training_step_fn)(const accel_tensor* const* batch, size_t count,
                                          accel_tensor** out_loss, void* user_data);

/**
 * An evaluation step, under no-grad, the model in eval mode (a model of the host's own tensors:
 * the host's module keeps its mode, which the steps set themselves): any of the loss (one
 * number), the predictions and the labels of the batch (first dimension: its samples); leave an
 * output NULL to give none. The library frees what it is given; an output may also be one of the batch's
 * handles as it is (the library then neither frees nor changes it).
 */
typedef int32_t (*accel_eval_step_fn)(const accel_tensor* const* batch, size_t count,
                                      accel_tensor** out_loss, accel_tensor** out_predictions,
                                      accel_tensor** out_labels, void* user_data);

/**
 * Metrics of an evaluation: the predictions and labels of every sample once, gathered from every
 * process in dataset order, set into `metrics` as numbers (each key gets the "eval_" or "test_"
 * prefix unless it has it). Called on every process; not called when the steps gave no
 * predictions or no labels (as transformers).
 */
typedef int32_t (*accel_compute_metrics_fn)(const accel_tensor* predictions,
                                            const accel_tensor* labels, accel_values* metrics,
                                            void* user_data);

/**
 * A Trainer of `model` with `optimizer`, `scheduler` (may be NULL), the `train` dataloader and
 * `eval` (may be NULL; needed for evaluations) on `accelerator`, with `settings` (may be NULL).
 * Objects not yet prepared are prepared here as accel_prepare would (in that order). The default
 * steps call the model's methods: training_step(batch fields...) returning the loss first, and
 * eval_step(batch fields...) returning (loss, predictions), the labels being the batch's last
 * field. A second Trainer on the same accelerator is ACCEL_ERR_STATE.
 */
ACCEL_API accel_status accel_trainer_new(accel_accelerator* accelerator, accel_model* model,
                                         accel_optimizer* optimizer, accel_scheduler* scheduler,
                                         accel_dataloader* train, accel_dataloader* eval,
                                         const char* settings, accel_trainer** out);

/** Replaces the training step (NULL `step`: the model's training_step again). Callback rules. */
ACCEL_API accel_status accel_trainer_set_training_step(accel_trainer* trainer,
                                                       accel_training_step_fn step,
                                                       void* user_data, accel_release_fn release);

/** Replaces the evaluation step (NULL `step`: the model's eval_step again). */
ACCEL_API accel_status accel_trainer_set_eval_step(accel_trainer* trainer, accel_eval_step_fn step,
                                                   void* user_data, accel_release_fn release);

/** Sets compute_metrics (NULL: none; an evaluation then gives its loss alone). */
ACCEL_API accel_status accel_trainer_set_compute_metrics(accel_trainer* trainer,
                                                         accel_compute_metrics_fn fn,
                                                         void* user_data,
                                                         accel_release_fn release);

/**
 * Adds a callback, called after the earlier ones at every event. on_init_end reaches the
 * callbacks added before the first accel_trainer_train, _evaluate or _predict, once.
 */
ACCEL_API accel_status accel_trainer_add_callback(accel_trainer* trainer,
                                                  accel_trainer_callback_fn callback,
                                                  void* user_data, accel_release_fn release);

/**
 * transformers' Trainer.train: from the start, or with resume_from_checkpoint from that
 * checkpoint. A callback's failure is ACCEL_ERR_CALLBACK naming the event (one returning
 * ACCEL_ERR_OUT_OF_MEMORY fails with that status: auto_find_batch_size retries it); any failure
 * leaves the objects where the failing step left them (the last checkpoint is intact).
 */
ACCEL_API accel_status accel_trainer_train(accel_trainer* trainer);

/**
 * transformers' Trainer.evaluate over the eval dataloader: "eval_loss" (the mean over samples of
 * the steps' losses) and compute_metrics' metrics, logged (log_history, trackers) and given to
 * on_evaluate. `*out_metrics` (may be NULL) receives them; free with accel_values_free.
 */
ACCEL_API accel_status accel_trainer_evaluate(accel_trainer* trainer, accel_values** out_metrics);

/**
 * transformers' Trainer.predict over `loader` (prepared on the accelerator): the predictions and
 * labels of every sample once, in dataset order, on every process (NULL outputs are not written;
 * an output the steps never gave is set to NULL), and the "test_" metrics.
 */
ACCEL_API accel_status accel_trainer_predict(accel_trainer* trainer, accel_dataloader* loader,
                                             accel_tensor** out_predictions,
                                             accel_tensor** out_labels,
                                             accel_values** out_metrics);

/** The state as transformers' trainer_state.json text. Buffer convention. */
ACCEL_API accel_status accel_trainer_state_json(const accel_trainer* trainer, char* buf,
                                                size_t capacity, size_t* out_size);

/** The optimizer updates made (TrainerState.global_step). */
ACCEL_API accel_status accel_trainer_global_step(const accel_trainer* trainer, int64_t* out);

/** TrainerState.epoch: epochs done as a fraction (0 before training). */
ACCEL_API accel_status accel_trainer_epoch(const accel_trainer* trainer, double* out);

/**
 * Reads one TrainerControl flag: "should_training_stop", "should_epoch_stop", "should_save",
 * "should_evaluate" or "should_log"; another name is ACCEL_ERR_INVALID_ARGUMENT.
 */
ACCEL_API accel_status accel_trainer_control(const accel_trainer* trainer, const char* flag,
                                             bool* out);

/** Sets one TrainerControl flag (from a callback: what transformers' callbacks return). */
ACCEL_API accel_status accel_trainer_set_control(accel_trainer* trainer, const char* flag,
                                                 bool value);

/** Frees a Trainer and releases its callbacks. NULL is a no-op. */
ACCEL_API void accel_trainer_free(accel_trainer* trainer);

/* ----------------------------------------------------------------------------------------------------
 * Option tables
 *
 * Every option an object takes by key (accel_optimizer_set, accel_scheduler_set,
 * accel_dataloader_set, accel_model_add_layer's spec), with its type and default, one kind a
 * line: "<object> <kind>: <key> <type> <default>, ..." (a line ending with a comma goes on).
 * Types: real, int, flag (true or false), or the words a choice allows ("right|left"). A default
 * of "-" is none: the option is required, or the library decides (the accelerator's
 * configuration, the dataset). accel.hpp's typed options (accel::AdamWOptions{.lr = 5e-3}, ...)
 * and the bindings' are generated from these lines (tools/gen_options.py); the ctest
 * abi.option_tables checks them against the library.
 *
 * optimizer sgd: lr real 1e-3, momentum real 0, dampening real 0, weight_decay real 0,
 *   nesterov flag false
 * optimizer adam: lr real 1e-3, beta1 real 0.9, beta2 real 0.999, eps real 1e-8,
 *   weight_decay real 0, amsgrad flag false
 * optimizer adamw: lr real 1e-3, beta1 real 0.9, beta2 real 0.999, eps real 1e-8,
 *   weight_decay real 1e-2, amsgrad flag false
 * optimizer rmsprop: lr real 1e-2, alpha real 0.99, eps real 1e-8, weight_decay real 0,
 *   momentum real 0, centered flag false
 * optimizer adagrad: lr real 1e-2, lr_decay real 0, weight_decay real 0,
 *   initial_accumulator_value real 0, eps real 1e-10
 * schedule constant:
 * schedule constant_with_warmup: warmup_steps int 0
 * schedule linear: warmup_steps int 0, total_steps int -
 * schedule cosine: warmup_steps int 0, total_steps int -, num_cycles real 0.5
 * schedule cosine_with_restarts: warmup_steps int 0, total_steps int -, num_cycles real 1
 * schedule polynomial: warmup_steps int 0, total_steps int -, lr_end real 1e-7, power real 1
 * schedule step: step_size int -, gamma real 0.1
 * schedule exponential: gamma real -
 * schedule one_cycle: max_lr real -, total_steps int -, pct_start real 0.3,
 *   anneal_strategy cos|linear cos, div_factor real 25, final_div_factor real 1e4,
 *   base_momentum real 0.85, max_momentum real 0.95, cycle_momentum flag true
 * dataloader dataloader: batch_size int 1, shuffle flag false, seed int 0, drop_last flag false,
 *   num_workers int 0, prefetch_factor int 2, split_batches flag -, even_batches flag -,
 *   device_placement flag true, group_by_length flag false, dispatch_batches flag -,
 *   shard flag true, pad_value real 0, padding_side right|left right, pad_to_multiple_of int 1,
 *   max_length int -, truncation flag false, mask attention_mask|lengths|none attention_mask
 * layer linear: in_features int -, out_features int -, bias flag true
 * layer conv2d: in_channels int -, out_channels int -, kernel_size int -, stride int 1,
 *   padding int 0, dilation int 1, groups int 1, bias flag true
 * layer batch_norm2d: num_features int -, eps real 1e-5, momentum real 0.1
 * layer layer_norm: normalized_shape int -, eps real 1e-5
 * layer embedding: num_embeddings int -, embedding_dim int -
 * -------------------------------------------------------------------------------------------------
 */

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* ACCEL_ACCEL_H */
