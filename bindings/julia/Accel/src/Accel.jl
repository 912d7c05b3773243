"""
    Accel

Julia binding of libaccel: Hugging Face Accelerate's training loop (one program on one CPU, many
processes, many machines) on LibTorch, through libaccel's C interface (accel.h, ABI 0.2) alone.

    using Accel
    Accelerator() do acc
        model, opt, loader = prepare(acc, model, opt, loader)
        for (x, y) in loader                    # a batch lives for one turn of the loop
            accumulate_gradients!(acc)
            value = model(:training_step, x, y) do loss
                backward(acc, loss)
                only(loss)                      # the loss is closed when the block ends
            end
            step!(opt); zero_grad!(opt)
            mean_loss = reduce_across(acc, value; reduction = :mean)   # a number
        end
    end

Run it on several processes with `accel launch -n 2 julia --project=... train.jl`. The library is
found through `ENV["ACCEL_LIBRARY"]`, else pkg-config's libdir for `accel`, else the system's
search path. Failures throw `AccelError`. Arrays cross with their dimensions reversed (see
`Tensor`). Standard library only; Julia 1.5 and later.

**Counting.** Every index is Julia's, from 1: sample `i` of a dataset (a function dataset's `i`,
`Dataset(A)`'s `A[.., i]`, the `i`-th item of a stream's pass, line `i` of `text_lines_dataset`,
the sample and field a batch's error names), a field (`set_field!`), a dimension
(`pad_across_processes`'s `dim`), the entries of a per-rank `Vector` (`gather_object(acc, x)[r +
1]` is rank `r`'s), the items `split_between_processes` picks, an optimizer's parameter group
(`add_group!`; group 1 is PyTorch's `param_groups[0]`). Ranks and epochs are not indices but
the names the processes share with the launcher, the environment (`RANK`, `LOCAL_RANK`),
Accelerate and its checkpoints, and MPI.jl: they count from 0 (`process_index`,
`local_process_index`, `broadcast_across`'s `from`, `on_process`'s rank, `set_epoch!`, `epoch`,
`position`'s epoch, the epoch a `stream_dataset`'s factory is given). Counts
(`skip_first_batches!`, `position`'s samples, `length`) are counts; a stream has no `length`
(it throws; see `isstream`).

**Values in, values out.** The collectives give back what they were given: `gather`,
`reduce_across`, `broadcast_across`, `pad_across_processes` and `gather_for_metrics` of a number
or an array return a number or an `Array` (nothing to close); of a `Tensor`, a `Tensor`.
`reduce_across`, `broadcast_across` and `accumulate_gradients!` are Accelerate's `reduce`,
`broadcast` and `accumulate` under names of their own: Base's `reduce`, `broadcast` and
`accumulate` mean something else. So is `log_values` Accelerate's `log` (Base's `log` is the
logarithm).

**Trackers.** `Accelerator(log_with = "jsonl", logging_dir = dir)`, then `init_trackers(acc,
"project"; config = (lr = 1e-3,))`, `log_values(acc, (loss = l, note = "text"); step = n)` and
`end_training(acc)` write `dir/project/metrics.jsonl` (TensorBoard and CSV likewise); a
`NamedTuple` or pairs keep their order in the files, a `Dict` its hash order. Trackers of the
program's own are `AbstractTracker` subtypes added with `add_tracker!`.

**Trainer.** transformers' Trainer over the accelerator: `Trainer(acc, model, opt, train;
scheduler, eval, settings...)`, `fit!`, `evaluate`, `predict`, with Julia steps, metrics and
callbacks as do-blocks (`add_callback!(trainer) do ctx, event, values ... end`; see `Trainer`).

**Logging.** libaccel's messages go to Julia's logging (`Logging.current_logger()` of the task
that logs), with the level mapped (the library's INFO is `Logging.Info`, CRITICAL
`LogLevel(2001)`) and the rank and number of processes as the fields `rank` and `processes`:
`log_message(acc, Logging.Info, "text")` from the main process only, `main_process_only =
false` from every process, and `in_order = true` besides in rank order (a collective). The
accelerator's own level (`log_level`, `set_log_level!`; the configuration key `log_level`,
ACCELERATE_LOG_LEVEL, default info) drops a message on every rank before the logger's level is
asked. `set_log_sink!` sends the messages elsewhere.

**Closing.** Every handle has `close` and a do-block form (`Tensor(A) do t ... end`); so do model
calls (`model(x) do y ... end`) and the collectives of a tensor. A batch of a `for` loop over a
`DataLoader` is closed when the loop moves on. A finalizer frees what was not closed, but the
collector does not see the library's memory: close what a loop makes.
"""
module Accel

using Libdl
import Random
import Serialization
import Logging
using Logging: LogLevel, AbstractLogger, @logmsg, with_logger

const PACKAGE_VERSION = v"0.2.4"

# Exported: libaccel's own names, none of which Base, Flux (NNlib), MLUtils or Optimisers export.
# The generic ones (DataLoader, Model, Optimizer, Scheduler, call, device, shape, gather,
# trainmode!, testmode!, and the Flux-style Chain, Dense, Conv, ...) are qualified, `Accel.Model`,
# or imported by name, `using Accel: DataLoader, Model`.
export AccelError, Status, DType, Tensor, dtype, rawdata,
       Config, load_file!, dump_yaml,
       Accelerator, process_index, local_process_index, num_processes, is_main_process,
       is_local_main_process, distributed_type, mixed_precision, effective_config,
       wait_for_everyone, set_interrupted!, main_process_first, join_uneven_inputs, set_seed,
       local_main_process_first, is_last_process, on_main_process, on_local_main_process,
       on_last_process, on_process,
       pad_across_processes, reduce_across, broadcast_across, gather_object, gather_bytes,
       gather_for_metrics, split_between_processes, set_trigger!, check_trigger,
       Dataset, RaggedField, idx_dataset, stream_dataset, text_lines_dataset, isstream,
       next_batch, set!, set_field!, set_epoch!, epoch, end_of_epoch, remainder,
       skip_first_batches!, set_position!, field_count,
       empty_model, load_torchscript, add_layer!, define!,
       add_parameter!, add_buffer!, forward, set_requires_grad!, check_torch,
       parameter_count, tensor_names, save_torchscript,
       step!, zero_grad!, lr, set_lr!, step_was_skipped,
       add_group!, set_group!, group_count,
       prepare, accumulate_gradients!, sync_gradients, backward, clip_grad_norm!, clip_grad_value!,
       no_sync, find_executable_batch_size, LocalSgd, finish!, average_count,
       Profiler, profile, on_trace_ready!, start!, stop!, table, export_chrome_trace, window_count,
       save_model, load_checkpoint_in_model, save_state, load_state, register_for_checkpointing,
       load_pretrained!, LoadReport, infer_device_map, dispatch!,
       Tokenizer, encode, encode_batch, token_id, vocab_size,
       init_trackers, log_values, end_training, AbstractTracker, add_tracker!, TrackedValues,
       log_message, log_level, set_log_level!, set_log_sink!,
       Trainer, TrainerContext, fit!, evaluate, predict, set_training_step!, set_eval_step!,
       set_compute_metrics!, add_callback!, global_step, state_json, control, set_control!

include("generated.jl")   # SYMBOLS and Status, from accel.h by tools/gen_raw.py
include("library.jl")
include("errors.jl")
include("handles.jl")
include("text.jl")
include("config.jl")
include("tensor.jl")
include("dataset.jl")
include("stream.jl")
include("dataloader.jl")
include("model.jl")
include("chain.jl")
include("optim.jl")
include("accelerator.jl")
include("collectives.jl")
include("step_tools.jl")
include("profiler.jl")
include("checkpoint.jl")
include("tokenizer.jl")
include("trackers.jl")
include("logging.jl")
include("trainer.jl")

function __init__()
    load_library()
    # C function pointers of the trampolines exist only in the running process.
    SAMPLE_TRAMPOLINE[] = @cfunction(sample_trampoline, Int32,
                                     (Int64, Ptr{Ptr{Cvoid}}, Ptr{Csize_t}, Csize_t, Ptr{Cvoid}))
    LENGTH_TRAMPOLINE[] = @cfunction(length_trampoline, Int32, (Int64, Ptr{Int64}, Csize_t, Ptr{Cvoid}))
    STREAM_TRAMPOLINE[] = @cfunction(stream_trampoline, Int32, (Int64, Int64, Ptr{Cvoid}, Ptr{Cvoid}))
    SAVE_TRAMPOLINE[] = @cfunction(save_trampoline, Int32, (Ptr{Cvoid}, Ptr{Cvoid}))
    LOAD_TRAMPOLINE[] = @cfunction(load_trampoline, Int32, (Ptr{Cvoid}, Csize_t, Ptr{Cvoid}))
    TRACKER_START_TRAMPOLINE[] = @cfunction(tracker_start_trampoline, Int32,
                                            (Ptr{UInt8}, Ptr{Cvoid}, Ptr{Cvoid}))
    TRACKER_LOG_TRAMPOLINE[] = @cfunction(tracker_log_trampoline, Int32, (Ptr{Cvoid}, Int64, Ptr{Cvoid}))
    TRACKER_FINISH_TRAMPOLINE[] = @cfunction(tracker_finish_trampoline, Int32, (Ptr{Cvoid},))
    LOG_SINK_TRAMPOLINE[] = @cfunction(log_sink_trampoline, Int32,
                                       (Int32, Int32, UInt32, Ptr{UInt8}, Ptr{Cvoid}))
    BATCH_SIZE_TRAMPOLINE[] = @cfunction(batch_size_trampoline, Int32, (Ptr{Cvoid}, Int64))
    TRACE_READY_TRAMPOLINE[] = @cfunction(trace_ready_trampoline, Int32, (Ptr{Cvoid}, Ptr{Cvoid}))
    NAME_MAP_TRAMPOLINE[] = @cfunction(name_map_trampoline, Int32,
                                       (Ptr{UInt8}, Ptr{UInt8}, Csize_t, Ptr{Cvoid}))
    init_trainer_trampolines()
end

end # module
