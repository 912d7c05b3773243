# The accelerator: this process's place among the ranks, and the training verbs.

# A checkpoint callback pair, passed to the library as user_data; rooted by the Accelerator.
mutable struct Checkpointed
    save::Any
    load::Any
    failure::Any
end

# The program's own trackers (trackers.jl) and what their callbacks left during the running call.
# One per accelerator, shared by its trackers' entries.
mutable struct TrackerSet
    added::Vector{Any}           # the Tracked entries, rooted while the accelerator lives
    failures::Vector{Any}        # (exception, backtrace) of each callback that failed, in order
    calling::Union{Nothing,Task} # the task running a tracker's method, if any
    lock::ReentrantLock          # one call that may run the trackers' methods at a time
end
TrackerSet() = TrackerSet(Any[], Any[], nothing, ReentrantLock())

# Where the accelerator's messages go (logging.jl), passed to the library as the log sink's
# user_data; one per accelerator, rooted by it, the same object for its whole life.
mutable struct LogSinkState
    sink::Any                    # nothing (the calling task's logger), a logger or a function
    processes::Int               # num_processes, for the messages' field
    failure::Any                 # (exception, backtrace) of the sink that failed in this call
    calling::Union{Nothing,Task} # the task running the sink, if any
    lock::ReentrantLock          # one call that may run the sink at a time
end
LogSinkState() = LogSinkState(nothing, 1, nothing, nothing, ReentrantLock())

# A tracker added with add_tracker!, passed to the library as user_data; rooted by the Accelerator.
mutable struct Tracked         # mutable: pointer_from_objref
    tracker::Any
    name::String
    set::TrackerSet
end

"""
    Accelerator(; settings...)
    Accelerator(config::Config)
    Accelerator(; settings...) do acc ... end

The runtime of this process (Accelerate's Accelerator). It learns its place from the
environment `accel launch`, torchrun or a cluster sets (RANK, WORLD_SIZE, ...), or is a world of
one. `settings` are configuration keys (`mixed_precision = "bf16"`, ...; see `Config`). One
accelerator may exist in a process at a time: close it (or let the do-block end) before making
another.

Queries: `process_index`, `local_process_index`, `num_processes` (ranks are identifiers the
launcher, RANK and Accelerate share: they count from 0, see `Accel`), `is_main_process`,
`is_local_main_process`, `is_last_process`, `device`, `distributed_type`, `mixed_precision`,
`effective_config`; `on_main_process`, `on_local_main_process`, `on_last_process` and
`on_process` run a block on one process.

Around the step: `no_sync`, `find_executable_batch_size`, `LocalSgd`, `profile` (`Profiler`).

Trackers (configuration keys `log_with`, `logging_dir`): `init_trackers`, `log_values`,
`end_training`, and the program's own with `add_tracker!`.

Logging (configuration key `log_level`): `log_message`, `log_level`, `set_log_level!`,
`set_log_sink!`. The accelerator's messages go to Julia's logging from the start.
"""
mutable struct Accelerator <: Handle
    ptr::Ptr{Cvoid}
    checkpointed::Vector{Checkpointed}
    trackers::TrackerSet
    logging::LogSinkState
    Accelerator(pointer::Ptr{Cvoid}) =
        own(new(pointer, Checkpointed[], TrackerSet(), LogSinkState()))
end

function Accelerator(config::Union{Nothing,Config})
    acc = Accelerator(@out(Ptr{Cvoid}, accel_init(optional(config))))
    try
        acc.logging.processes = num_processes(acc)
        install_log_sink(acc)   # Julia's logging, rather than the library's lines on stderr
    catch
        close(acc)
        rethrow()
    end
    acc
end

function Accelerator(; settings...)
    isempty(settings) && return Accelerator(nothing)
    Config(cfg -> Accelerator(cfg); settings...)
end
Accelerator(f::Function, args...; settings...) = with_handle(f, Accelerator(args...; settings...))

free_handle(::Accelerator, p) = @acall accel_accelerator_free(p)

"Global rank of this process, from 0 (the RANK the launcher set; not an index: see `Accel`)."
process_index(acc::Accelerator) =
    Int(@out Int32 accel_process_index(acc))
"Rank of this process on its machine, from 0."
local_process_index(acc::Accelerator) =
    Int(@out Int32 accel_local_process_index(acc))
"Number of processes in the job."
num_processes(acc::Accelerator) =
    Int(@out Int32 accel_num_processes(acc))
"Whether this is the main process (rank 0)."
is_main_process(acc::Accelerator) =
    @out Bool accel_is_main_process(acc)
"Whether this is the main process of its machine (local rank 0)."
is_local_main_process(acc::Accelerator) =
    @out Bool accel_is_local_main_process(acc)

"The device this process computes on: \"cpu\", \"cuda:1\", ..."
function device(acc::Accelerator)
    read_text() do buffer, capacity, size
        @acall accel_device(acc, buffer, capacity, size)
    end
end

"""How the job is distributed, as Accelerate names it: `:NO`, `:MULTI_CPU`, `:MULTI_GPU`, or
`:DEEPSPEED` / `:FSDP` when that configuration chose a ZeRO stage."""
function distributed_type(acc::Accelerator)
    value = @out Int32 accel_distributed_type(acc)
    (:NO, :MULTI_CPU, :MULTI_GPU, :DEEPSPEED, :FSDP)[value+1]
end

"The mixed precision in force: `:no`, `:fp16` or `:bf16`."
function mixed_precision(acc::Accelerator)
    value = @out Int32 accel_mixed_precision(acc)
    (:no, :fp16, :bf16)[value+1]
end

"The configuration the accelerator was made with, as YAML with each setting's source."
function effective_config(acc::Accelerator)
    read_text() do buffer, capacity, size
        @acall accel_effective_config(acc, buffer, capacity, size)
    end
end

"Blocks until every rank has called it (bounded by the collective timeout)."
function wait_for_everyone(acc::Accelerator)
    @check accel_wait_for_everyone(acc)
    nothing
end

"""
    set_interrupted!(acc, interrupted::Bool)

Interrupts (`true`) or stops interrupting (`false`) every call of this process that waits on other
processes or on a dataloader's workers: while set, such a call throws `ERR_CANCELLED` within about
50 ms, and one that would start waiting throws it at once (accel.h, `accel_set_interrupted`). Call
it from another thread while one waits (`Threads.@spawn` with `JULIA_NUM_THREADS` >= 2: a task on
the waiting thread does not run while a library call blocks it). A collective it ends leaves the
process group unusable; a dataloader loses no batch.
"""
function set_interrupted!(acc::Accelerator, interrupted::Bool)
    @check accel_set_interrupted(acc, Cint(interrupted))
    acc
end

"""
    println(acc, xs...)

Prints `xs` and a newline on the local main process only (Accelerate's `accelerator.print`).
"""
function Base.println(acc::Accelerator, xs...)
    @check accel_print(acc, c_text(string(xs...)))
end

"""
    main_process_first(f, acc)

Runs `f()` on the main process first and on the others once it is done (Accelerate's
`main_process_first`): `main_process_first(acc) do ... end`. A collective: every rank calls it.
"""
function main_process_first(f, acc::Accelerator)
    @check accel_main_process_first_begin(acc)
    result = try
        f()
    finally
        # The others wait in begin for this end: it runs even when f failed.
        @check accel_main_process_first_end(acc)
    end
    result
end

"""
    local_main_process_first(f, acc)

Runs `f()` on each machine's local main process first and on that machine's other processes once
it is done (Accelerate's `local_main_process_first`: a download or a cache each machine makes
once): `local_main_process_first(acc) do ... end`. A collective: every rank calls it. The end runs
also when `f` throws (the others wait for it), and `f`'s exception goes on.
"""
function local_main_process_first(f, acc::Accelerator)
    @check accel_local_main_process_first_begin(acc)
    result = try
        f()
    finally
        @check accel_local_main_process_first_end(acc)
    end
    result
end

"Whether this is the last process (rank `num_processes(acc) - 1`; Accelerate's `is_last_process`)."
is_last_process(acc::Accelerator) =
    @out Bool accel_is_last_process(acc)

"""
    on_main_process(f, acc)
    on_local_main_process(f, acc)
    on_last_process(f, acc)
    on_process(f, acc, rank)

Accelerate's decorators of the same names as do-blocks: `f()` runs on that process only (the
main process, each machine's local main process, the last process, the process whose
`process_index` is `rank`, from 0; a rank outside `0:num_processes(acc)-1` is
`ERR_INVALID_ARGUMENT`), and its value is returned there; the others return `nothing`. Not a
collective: `f` must not call one.

    on_main_process(acc) do
        println("only once")
    end
"""
on_main_process(f, acc::Accelerator) = is_main_process(acc) ? f() : nothing

"`f()` on each machine's local main process only (see `on_main_process`)."
on_local_main_process(f, acc::Accelerator) = is_local_main_process(acc) ? f() : nothing

"`f()` on the last process only (see `on_main_process`)."
on_last_process(f, acc::Accelerator) = is_last_process(acc) ? f() : nothing

"`f()` on the process whose `process_index` is `rank` only, from 0 (see `on_main_process`)."
function on_process(f, acc::Accelerator, rank::Integer)
    world = num_processes(acc)
    0 <= rank < world || throw(AccelError(ERR_INVALID_ARGUMENT,
        "on_process: $rank is not a rank: ranks count from 0, as process_index, " *
        "here 0:$(world - 1)"))
    process_index(acc) == rank ? f() : nothing
end

"""
    join_uneven_inputs(f, acc; even_batches = nothing)

Accelerate's join_uneven_inputs: `join_uneven_inputs(acc; even_batches = false) do ... end` runs
`f()` (the training loop) for ranks whose numbers of batches differ, and returns what `f`
returns. A rank that runs out of batches leaves `f` and keeps answering the others' gradient
synchronisation with zero gradients (the average still divides by the number of processes)
until every rank has left it; then every rank takes the parameters of the rank that made the
most steps.

`even_batches`: `nothing` leaves the prepared dataloaders as they are; `true` or `false` sets
theirs (not a stream's) until the end. Join is on only with several processes and even_batches
false; otherwise this only sets and restores the option. Only the gradient synchronisation is
answered: other collectives inside `f` (`gather`, `reduce_across`, `check_trigger`) must not be
called by one rank after another has left. Several prepared models, or a model with buffers
(batch norm), are `ERR_UNSUPPORTED` with join on; a join inside another is `ERR_STATE`.

The end is a collective and runs whatever `f` does: when `f` throws, its exception is what comes
out (after the end, whose own failure is then not reported).

    steps = join_uneven_inputs(acc; even_batches = false) do
        n = 0
        for (x, y) in loader
            train_step!(acc, model, opt, x, y)   # backward(acc, loss), step!, zero_grad!
            n += 1
        end
        n
    end   # the parameters now agree on every rank, whatever its number of steps
"""
function join_uneven_inputs(f, acc::Accelerator; even_batches::Union{Nothing,Bool} = nothing)
    flag = even_batches === nothing ? Int32(-1) : Int32(even_batches)
    @check accel_join_uneven_inputs_begin(acc, flag)
    returned = false
    try
        result = f()
        returned = true
        @check accel_join_uneven_inputs_end(acc)
        return result
    finally
        # f threw: the end still answers the other ranks, and f's exception goes on (an end
        # that fails as well would only hide it).
        returned || @acall accel_join_uneven_inputs_end(acc)
    end
end

"""
    set_seed(acc, seed; device_specific = false)

Seeds LibTorch's generators, libaccel's (data shuffling) and Julia's default generator (`Random`,
as Accelerate seeds Python's `random` and numpy beside torch): `rand()` then draws the same on
every rank and in every run. `device_specific` adds the process index (do not use it when ranks
must agree).
"""
function set_seed(acc::Accelerator, seed::Integer; device_specific::Bool = false)
    @check accel_set_seed(acc, UInt64(seed), device_specific)
    Random.seed!(UInt64(seed) + (device_specific ? UInt64(process_index(acc)) : UInt64(0)))
    nothing
end

const Preparable = Union{Model,Optimizer,Scheduler,DataLoader}

"""
    prepare(acc, objects...) -> objects

Accelerate's prepare: models (placed, synchronised across ranks), optimizers, schedulers and
dataloaders, in any order. Returns its arguments, so `model, opt = prepare(acc, model, opt)`
reads as in Python. Everything is checked before anything is prepared.
"""
function prepare(acc::Accelerator, objects::Preparable...)
    handles = HandleArray(objects)
    @check accel_prepare(acc, handles, length(handles))
    length(objects) == 1 ? objects[1] : objects
end

"""
    accumulate_gradients!(acc)
    accumulate_gradients!(f, acc)

Opens a micro-step (Accelerate's `accumulate`; named apart from Base's `accumulate`, a cumulative
sum): with gradient_accumulation_steps K, gradients synchronise and optimizers and schedulers step
every K-th time. Call it once per batch, before the forward; the do-block form runs `f()` after it
and returns what `f` returns.
"""
function accumulate_gradients!(acc::Accelerator)
    @check accel_accumulate(acc)
    acc
end
accumulate_gradients!(f::Function, acc::Accelerator) = (accumulate_gradients!(acc); f())

"Whether the current micro-step synchronises gradients."
sync_gradients(acc::Accelerator) =
    @out Bool accel_sync_gradients(acc)

"""
    backward(acc, loss)

Backward of a one-element loss: divided by the accumulation steps, scaled under fp16, gradients
averaged across processes while it runs.
"""
function backward(acc::Accelerator, loss::Tensor)
    @check accel_backward(acc, loss)
    nothing
end

"""
    clip_grad_norm!(acc, model, max_norm; norm_type = 2) -> Float64

Clips the gradient norm of `model`'s parameters (unscaled first under fp16); returns the norm
before clipping.
"""
function clip_grad_norm!(acc::Accelerator, model::Model, max_norm::Real; norm_type::Real = 2)
    @out Float64 accel_clip_grad_norm(acc, model, Float64(max_norm), Float64(norm_type))
end

"""
    clip_grad_value!(acc, model, clip_value)

Clamps every gradient element of `model` to [-clip_value, clip_value].
"""
function clip_grad_value!(acc::Accelerator, model::Model, clip_value::Real)
    @check accel_clip_grad_value(acc, model, Float64(clip_value))
    nothing
end
