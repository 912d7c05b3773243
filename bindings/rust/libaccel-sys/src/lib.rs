//! Raw declarations of libaccel's C interface, `include/accel/accel.h` (ABI 0.2), one for one.
//!
//! Everything here is `unsafe` to call and follows the header's rules (ownership, buffer
//! convention, thread rules); the safe API is the `libaccel` crate. The library is found at build
//! time through `ACCEL_LIB_DIR` or pkg-config (see `build.rs`); [`check_version`] tells at run time
//! whether the library actually loaded is one these declarations match.
#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_void};

/// The oldest library version these declarations match (0.2.0), as `accel_version_number` counts.
pub const SUPPORTED_VERSION_MIN: u32 = 200;
/// The first library version these declarations no longer match (0.3.0: the ABI changes).
pub const SUPPORTED_VERSION_END: u32 = 300;

/// The header's `ACCEL_VERSION_MAJOR`, `_MINOR`, `_PATCH` and `_NUMBER`.
pub const ACCEL_VERSION_MAJOR: u32 = 0;
pub const ACCEL_VERSION_MINOR: u32 = 2;
pub const ACCEL_VERSION_PATCH: u32 = 1;
pub const ACCEL_VERSION_NUMBER: u32 =
    ACCEL_VERSION_MAJOR * 10000 + ACCEL_VERSION_MINOR * 100 + ACCEL_VERSION_PATCH;

/// Checks that the loaded library's version lies in
/// [`SUPPORTED_VERSION_MIN`, `SUPPORTED_VERSION_END`); the error says which was found.
pub fn check_version() -> Result<(), String> {
    // SAFETY: takes no arguments and only reads a constant.
    check_version_number(unsafe { accel_version_number() })
}

/// Whether a library of version number `found` (as `accel_version_number` counts) is one these
/// declarations match; the error names both versions.
pub fn check_version_number(found: u32) -> Result<(), String> {
    if (SUPPORTED_VERSION_MIN..SUPPORTED_VERSION_END).contains(&found) {
        Ok(())
    } else {
        Err(format!(
            "libaccel {}.{}.{} is loaded, but libaccel-sys {} supports [{}.{}.{}, {}.{}.{})",
            found / 10000,
            found / 100 % 100,
            found % 100,
            env!("CARGO_PKG_VERSION"),
            SUPPORTED_VERSION_MIN / 10000,
            SUPPORTED_VERSION_MIN / 100 % 100,
            SUPPORTED_VERSION_MIN % 100,
            SUPPORTED_VERSION_END / 10000,
            SUPPORTED_VERSION_END / 100 % 100,
            SUPPORTED_VERSION_END % 100
        ))
    }
}

// Fixed-width enumerations (typedefs of int32_t in the header).
pub type accel_status = i32;
pub type accel_dtype = i32;
pub type accel_distribution = i32;
pub type accel_precision = i32;
pub type accel_reduction = i32;

pub const ACCEL_OK: accel_status = 0;
pub const ACCEL_ERR_INVALID_ARGUMENT: accel_status = 1;
pub const ACCEL_ERR_WRONG_HANDLE: accel_status = 2;
pub const ACCEL_ERR_CONFIG: accel_status = 3;
pub const ACCEL_ERR_UNSUPPORTED: accel_status = 4;
pub const ACCEL_ERR_IO: accel_status = 5;
pub const ACCEL_ERR_SHAPE: accel_status = 6;
pub const ACCEL_ERR_DTYPE: accel_status = 7;
pub const ACCEL_ERR_RENDEZVOUS: accel_status = 8;
pub const ACCEL_ERR_TIMEOUT: accel_status = 9;
pub const ACCEL_ERR_PEER_FAILED: accel_status = 10;
pub const ACCEL_ERR_STATE: accel_status = 11;
pub const ACCEL_ERR_BUFFER_TOO_SMALL: accel_status = 12;
pub const ACCEL_ERR_CALLBACK: accel_status = 13;
pub const ACCEL_ERR_OUT_OF_MEMORY: accel_status = 14;
pub const ACCEL_ERR_TORCH: accel_status = 15;
pub const ACCEL_ERR_INTERNAL: accel_status = 16;

pub const ACCEL_DTYPE_F32: accel_dtype = 1;
pub const ACCEL_DTYPE_F64: accel_dtype = 2;
pub const ACCEL_DTYPE_F16: accel_dtype = 3;
pub const ACCEL_DTYPE_BF16: accel_dtype = 4;
pub const ACCEL_DTYPE_I64: accel_dtype = 5;
pub const ACCEL_DTYPE_I32: accel_dtype = 6;
pub const ACCEL_DTYPE_I16: accel_dtype = 7;
pub const ACCEL_DTYPE_I8: accel_dtype = 8;
pub const ACCEL_DTYPE_U8: accel_dtype = 9;
pub const ACCEL_DTYPE_BOOL: accel_dtype = 10;

pub const ACCEL_MAX_DIMS: usize = 16;

pub const ACCEL_DISTRIBUTED_NO: accel_distribution = 0;
pub const ACCEL_DISTRIBUTED_MULTI_CPU: accel_distribution = 1;
pub const ACCEL_DISTRIBUTED_MULTI_GPU: accel_distribution = 2;

pub const ACCEL_PRECISION_NO: accel_precision = 0;
pub const ACCEL_PRECISION_FP16: accel_precision = 1;
pub const ACCEL_PRECISION_BF16: accel_precision = 2;

pub const ACCEL_REDUCE_SUM: accel_reduction = 0;
pub const ACCEL_REDUCE_MEAN: accel_reduction = 1;
pub const ACCEL_REDUCE_MAX: accel_reduction = 2;
pub const ACCEL_REDUCE_MIN: accel_reduction = 3;

// Opaque handles: only ever behind pointers, neither Send nor Sync nor Unpin by themselves.
macro_rules! opaque {
    ($($name:ident),* $(,)?) => {$(
        #[repr(C)]
        pub struct $name {
            _data: [u8; 0],
            _marker: core::marker::PhantomData<(*mut u8, core::marker::PhantomPinned)>,
        }
    )*};
}
opaque!(
    accel_config,
    accel_tensor,
    accel_tensor_list,
    accel_accelerator,
    accel_bytes_list,
    accel_dataset,
    accel_dataloader,
    accel_model,
    accel_optimizer,
    accel_scheduler,
    accel_state_writer,
);

pub type accel_release_fn = Option<unsafe extern "C" fn(user_data: *mut c_void)>;
pub type accel_sample_fn = Option<
    unsafe extern "C" fn(
        index: i64,
        buffers: *const *mut c_void,
        sizes: *const usize,
        count: usize,
        user_data: *mut c_void,
    ) -> i32,
>;
pub type accel_state_save_fn =
    Option<unsafe extern "C" fn(writer: *mut accel_state_writer, user_data: *mut c_void) -> i32>;
pub type accel_state_load_fn =
    Option<unsafe extern "C" fn(data: *const c_void, size: usize, user_data: *mut c_void) -> i32>;

extern "C" {
    // Versions and errors
    pub fn accel_version() -> *const c_char;
    pub fn accel_version_number() -> u32;
    pub fn accel_last_error_message() -> *const c_char;
    pub fn accel_last_error_status() -> accel_status;
    pub fn accel_status_name(status: accel_status) -> *const c_char;

    // Configuration
    pub fn accel_config_new(out: *mut *mut accel_config) -> accel_status;
    pub fn accel_config_free(config: *mut accel_config);
    pub fn accel_config_set(
        config: *mut accel_config,
        key: *const c_char,
        value: *const c_char,
    ) -> accel_status;
    pub fn accel_config_load_file(config: *mut accel_config, path: *const c_char) -> accel_status;
    pub fn accel_config_get(
        config: *const accel_config,
        key: *const c_char,
        buf: *mut c_char,
        capacity: usize,
        out_size: *mut usize,
    ) -> accel_status;
    pub fn accel_config_dump(
        config: *const accel_config,
        buf: *mut c_char,
        capacity: usize,
        out_size: *mut usize,
    ) -> accel_status;

    // Tensors
    pub fn accel_dtype_size(dtype: accel_dtype) -> usize;
    pub fn accel_tensor_from_data(
        data: *const c_void,
        size: usize,
        dtype: accel_dtype,
        shape: *const i64,
        dim_count: usize,
        out: *mut *mut accel_tensor,
    ) -> accel_status;
    pub fn accel_tensor_to_data(
        tensor: *const accel_tensor,
        buf: *mut c_void,
        capacity: usize,
        out_size: *mut usize,
    ) -> accel_status;
    pub fn accel_tensor_free(tensor: *mut accel_tensor);
    pub fn accel_tensor_dim_count(tensor: *const accel_tensor, out: *mut usize) -> accel_status;
    pub fn accel_tensor_shape(
        tensor: *const accel_tensor,
        shape: *mut i64,
        capacity: usize,
        out_count: *mut usize,
    ) -> accel_status;
    pub fn accel_tensor_dtype(tensor: *const accel_tensor, out: *mut accel_dtype) -> accel_status;
    pub fn accel_tensor_element_count(tensor: *const accel_tensor, out: *mut i64) -> accel_status;
    pub fn accel_tensor_data_size(tensor: *const accel_tensor, out: *mut usize) -> accel_status;
    pub fn accel_tensor_item_f64(tensor: *const accel_tensor, out: *mut f64) -> accel_status;
    pub fn accel_tensor_item_i64(tensor: *const accel_tensor, out: *mut i64) -> accel_status;
    pub fn accel_tensor_wrap_torch(
        torch_tensor: *mut c_void,
        out: *mut *mut accel_tensor,
    ) -> accel_status;
    pub fn accel_tensor_borrow_torch(
        tensor: *const accel_tensor,
        out: *mut *mut c_void,
    ) -> accel_status;
    pub fn accel_torch_check(
        version: *const c_char,
        cxx11_abi: i32,
        cpu_allocator_fn: *const c_void,
    ) -> accel_status;
    pub fn accel_tensor_set_requires_grad(
        tensor: *mut accel_tensor,
        requires_grad: bool,
    ) -> accel_status;
    pub fn accel_tensor_list_count(list: *const accel_tensor_list, out: *mut usize)
        -> accel_status;
    pub fn accel_tensor_list_get(
        list: *const accel_tensor_list,
        index: usize,
        out: *mut *mut accel_tensor,
    ) -> accel_status;
    pub fn accel_tensor_list_free(list: *mut accel_tensor_list);

    // The accelerator
    pub fn accel_init(
        config: *const accel_config,
        out: *mut *mut accel_accelerator,
    ) -> accel_status;
    pub fn accel_accelerator_free(accelerator: *mut accel_accelerator);
    pub fn accel_process_index(
        accelerator: *const accel_accelerator,
        out: *mut i32,
    ) -> accel_status;
    pub fn accel_local_process_index(
        accelerator: *const accel_accelerator,
        out: *mut i32,
    ) -> accel_status;
    pub fn accel_num_processes(
        accelerator: *const accel_accelerator,
        out: *mut i32,
    ) -> accel_status;
    pub fn accel_is_main_process(
        accelerator: *const accel_accelerator,
        out: *mut bool,
    ) -> accel_status;
    pub fn accel_is_local_main_process(
        accelerator: *const accel_accelerator,
        out: *mut bool,
    ) -> accel_status;
    pub fn accel_device(
        accelerator: *const accel_accelerator,
        buf: *mut c_char,
        capacity: usize,
        out_size: *mut usize,
    ) -> accel_status;
    pub fn accel_distributed_type(
        accelerator: *const accel_accelerator,
        out: *mut accel_distribution,
    ) -> accel_status;
    pub fn accel_mixed_precision(
        accelerator: *const accel_accelerator,
        out: *mut accel_precision,
    ) -> accel_status;
    pub fn accel_effective_config(
        accelerator: *const accel_accelerator,
        buf: *mut c_char,
        capacity: usize,
        out_size: *mut usize,
    ) -> accel_status;
    pub fn accel_wait_for_everyone(accelerator: *mut accel_accelerator) -> accel_status;
    pub fn accel_print(
        accelerator: *const accel_accelerator,
        message: *const c_char,
    ) -> accel_status;
    pub fn accel_main_process_first_begin(accelerator: *mut accel_accelerator) -> accel_status;
    pub fn accel_main_process_first_end(accelerator: *mut accel_accelerator) -> accel_status;
    pub fn accel_set_seed(
        accelerator: *mut accel_accelerator,
        seed: u64,
        device_specific: bool,
    ) -> accel_status;

    // Collectives
    pub fn accel_gather(
        accelerator: *mut accel_accelerator,
        tensor: *const accel_tensor,
        out: *mut *mut accel_tensor,
    ) -> accel_status;
    pub fn accel_pad_across_processes(
        accelerator: *mut accel_accelerator,
        tensor: *const accel_tensor,
        dim: i64,
        pad_value: f64,
        pad_first: bool,
        out: *mut *mut accel_tensor,
    ) -> accel_status;
    pub fn accel_reduce(
        accelerator: *mut accel_accelerator,
        tensor: *const accel_tensor,
        reduction: accel_reduction,
        out: *mut *mut accel_tensor,
    ) -> accel_status;
    pub fn accel_broadcast(
        accelerator: *mut accel_accelerator,
        tensor: *const accel_tensor,
        from_process: i32,
        out: *mut *mut accel_tensor,
    ) -> accel_status;
    pub fn accel_gather_object(
        accelerator: *mut accel_accelerator,
        data: *const c_void,
        size: usize,
        out: *mut *mut accel_bytes_list,
    ) -> accel_status;
    pub fn accel_bytes_list_count(list: *const accel_bytes_list, out: *mut usize) -> accel_status;
    pub fn accel_bytes_list_get(
        list: *const accel_bytes_list,
        index: usize,
        out_data: *mut *const c_void,
        out_size: *mut usize,
    ) -> accel_status;
    pub fn accel_bytes_list_free(list: *mut accel_bytes_list);

    // Datasets
    pub fn accel_dataset_from_tensors(
        tensors: *const *const accel_tensor,
        count: usize,
        out: *mut *mut accel_dataset,
    ) -> accel_status;
    #[allow(clippy::too_many_arguments)]
    pub fn accel_dataset_from_callback(
        sample_count: i64,
        field_count: usize,
        dtypes: *const accel_dtype,
        dim_counts: *const usize,
        dims: *const i64,
        func: accel_sample_fn,
        user_data: *mut c_void,
        release: accel_release_fn,
        out: *mut *mut accel_dataset,
    ) -> accel_status;
    pub fn accel_dataset_from_idx(
        paths: *const *const c_char,
        count: usize,
        out: *mut *mut accel_dataset,
    ) -> accel_status;
    pub fn accel_dataset_sample_count(dataset: *const accel_dataset, out: *mut i64)
        -> accel_status;
    pub fn accel_dataset_field_count(
        dataset: *const accel_dataset,
        out: *mut usize,
    ) -> accel_status;
    pub fn accel_dataset_free(dataset: *mut accel_dataset);

    // Dataloaders
    pub fn accel_dataloader_new(
        accelerator: *const accel_accelerator,
        dataset: *mut accel_dataset,
        out: *mut *mut accel_dataloader,
    ) -> accel_status;
    pub fn accel_dataloader_set(
        loader: *mut accel_dataloader,
        key: *const c_char,
        value: *const c_char,
    ) -> accel_status;
    pub fn accel_dataloader_next(
        loader: *mut accel_dataloader,
        fields: *mut *mut accel_tensor,
        capacity: usize,
        out_count: *mut usize,
    ) -> accel_status;
    pub fn accel_dataloader_field_count(
        loader: *const accel_dataloader,
        out: *mut usize,
    ) -> accel_status;
    pub fn accel_dataloader_batch_count(
        loader: *const accel_dataloader,
        out: *mut i64,
    ) -> accel_status;
    pub fn accel_dataloader_set_epoch(loader: *mut accel_dataloader, epoch: i64) -> accel_status;
    pub fn accel_dataloader_epoch(loader: *const accel_dataloader, out: *mut i64) -> accel_status;
    pub fn accel_dataloader_end_of_epoch(
        loader: *const accel_dataloader,
        out: *mut bool,
    ) -> accel_status;
    pub fn accel_dataloader_remainder(
        loader: *const accel_dataloader,
        out: *mut i64,
    ) -> accel_status;
    pub fn accel_dataloader_skip_first_batches(
        loader: *mut accel_dataloader,
        n: i64,
    ) -> accel_status;
    pub fn accel_dataloader_position(
        loader: *const accel_dataloader,
        out_epoch: *mut i64,
        out_samples: *mut i64,
    ) -> accel_status;
    pub fn accel_dataloader_set_position(
        loader: *mut accel_dataloader,
        epoch: i64,
        samples: i64,
    ) -> accel_status;
    pub fn accel_dataloader_close(loader: *mut accel_dataloader) -> accel_status;
    pub fn accel_dataloader_free(loader: *mut accel_dataloader);
    pub fn accel_gather_for_metrics(
        accelerator: *mut accel_accelerator,
        tensor: *const accel_tensor,
        out: *mut *mut accel_tensor,
    ) -> accel_status;

    // Models
    pub fn accel_model_new(out: *mut *mut accel_model) -> accel_status;
    pub fn accel_model_load_torchscript(
        path: *const c_char,
        out: *mut *mut accel_model,
    ) -> accel_status;
    pub fn accel_model_add_layer(
        model: *mut accel_model,
        name: *const c_char,
        kind: *const c_char,
        spec: *const c_char,
    ) -> accel_status;
    pub fn accel_model_define(model: *mut accel_model, source: *const c_char) -> accel_status;
    pub fn accel_model_add_parameter(
        model: *mut accel_model,
        name: *const c_char,
        tensor: *const accel_tensor,
    ) -> accel_status;
    pub fn accel_model_add_buffer(
        model: *mut accel_model,
        name: *const c_char,
        tensor: *const accel_tensor,
    ) -> accel_status;
    pub fn accel_model_forward_begin(model: *mut accel_model) -> accel_status;
    pub fn accel_model_forward_end(model: *mut accel_model) -> accel_status;
    pub fn accel_model_call(
        model: *mut accel_model,
        method: *const c_char,
        inputs: *const *const accel_tensor,
        input_count: usize,
        out: *mut *mut accel_tensor_list,
    ) -> accel_status;
    pub fn accel_model_train(model: *mut accel_model, training: bool) -> accel_status;
    pub fn accel_model_parameter_element_count(
        model: *const accel_model,
        out: *mut i64,
    ) -> accel_status;
    pub fn accel_model_tensor_count(model: *const accel_model, out: *mut usize) -> accel_status;
    pub fn accel_model_tensor_name(
        model: *const accel_model,
        index: usize,
        buf: *mut c_char,
        capacity: usize,
        out_size: *mut usize,
    ) -> accel_status;
    pub fn accel_model_tensor(
        model: *const accel_model,
        name: *const c_char,
        out: *mut *mut accel_tensor,
    ) -> accel_status;
    pub fn accel_model_save_torchscript(
        model: *const accel_model,
        path: *const c_char,
    ) -> accel_status;
    pub fn accel_model_free(model: *mut accel_model);

    // Optimizers and schedulers
    pub fn accel_optimizer_new(
        model: *mut accel_model,
        kind: *const c_char,
        out: *mut *mut accel_optimizer,
    ) -> accel_status;
    pub fn accel_optimizer_set(
        optimizer: *mut accel_optimizer,
        key: *const c_char,
        value: *const c_char,
    ) -> accel_status;
    pub fn accel_optimizer_step(optimizer: *mut accel_optimizer) -> accel_status;
    pub fn accel_optimizer_zero_grad(optimizer: *mut accel_optimizer) -> accel_status;
    pub fn accel_optimizer_lr(optimizer: *const accel_optimizer, out: *mut f64) -> accel_status;
    pub fn accel_optimizer_set_lr(optimizer: *mut accel_optimizer, lr: f64) -> accel_status;
    pub fn accel_optimizer_step_was_skipped(
        optimizer: *const accel_optimizer,
        out: *mut bool,
    ) -> accel_status;
    pub fn accel_optimizer_free(optimizer: *mut accel_optimizer);
    pub fn accel_scheduler_new(
        optimizer: *mut accel_optimizer,
        kind: *const c_char,
        out: *mut *mut accel_scheduler,
    ) -> accel_status;
    pub fn accel_scheduler_set(
        scheduler: *mut accel_scheduler,
        key: *const c_char,
        value: *const c_char,
    ) -> accel_status;
    pub fn accel_scheduler_step(scheduler: *mut accel_scheduler) -> accel_status;
    pub fn accel_scheduler_lr(scheduler: *const accel_scheduler, out: *mut f64) -> accel_status;
    pub fn accel_scheduler_free(scheduler: *mut accel_scheduler);

    // Training
    pub fn accel_prepare(
        accelerator: *mut accel_accelerator,
        objects: *const *mut c_void,
        count: usize,
    ) -> accel_status;
    pub fn accel_accumulate(accelerator: *mut accel_accelerator) -> accel_status;
    pub fn accel_sync_gradients(
        accelerator: *const accel_accelerator,
        out: *mut bool,
    ) -> accel_status;
    pub fn accel_backward(
        accelerator: *mut accel_accelerator,
        loss: *const accel_tensor,
    ) -> accel_status;
    pub fn accel_clip_grad_norm(
        accelerator: *mut accel_accelerator,
        model: *mut accel_model,
        max_norm: f64,
        norm_type: f64,
        out_norm: *mut f64,
    ) -> accel_status;
    pub fn accel_clip_grad_value(
        accelerator: *mut accel_accelerator,
        model: *mut accel_model,
        clip_value: f64,
    ) -> accel_status;

    // Checkpoints
    pub fn accel_save_model(
        accelerator: *mut accel_accelerator,
        model: *const accel_model,
        dir: *const c_char,
        max_shard_size: *const c_char,
    ) -> accel_status;
    pub fn accel_load_checkpoint_in_model(
        model: *mut accel_model,
        path: *const c_char,
    ) -> accel_status;
    pub fn accel_save_state(
        accelerator: *mut accel_accelerator,
        dir: *const c_char,
    ) -> accel_status;
    pub fn accel_load_state(
        accelerator: *mut accel_accelerator,
        dir: *const c_char,
    ) -> accel_status;
    pub fn accel_state_writer_write(
        writer: *mut accel_state_writer,
        data: *const c_void,
        size: usize,
    ) -> accel_status;
    pub fn accel_register_for_checkpointing(
        accelerator: *mut accel_accelerator,
        save: accel_state_save_fn,
        load: accel_state_load_fn,
        user_data: *mut c_void,
        release: accel_release_fn,
    ) -> accel_status;
}
