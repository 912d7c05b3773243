# Dataloaders: this process's shard of every global batch, with Julia's iteration protocol.

"""
    DataLoader(acc, dataset; batch_size = 1, shuffle = false, seed = 0, drop_last = false,
               num_workers = 0, prefetch_factor = 2, split_batches, even_batches,
               device_placement)

This process's shard of `dataset`, as Accelerate's prepared DataLoader (see accel.h,
"Dataloaders"). Options can be changed later with `set!(loader, key, value)` (between epochs).

Iterate it with `for (x, y) in loader`: one pass is one epoch (the next `for` starts the next
epoch; `set_epoch!` chooses the shuffle). Each batch is a tuple of `Tensor`s, one per field, that
lives for one turn of the loop: it is closed when the loader moves on (the loop's next turn or
end, `next_batch`, `set!`, `set_epoch!`, `close`), so the memory of a batch is returned at once;
copy what you keep (`Array(x)`). `next_batch(loader)` returns a batch you own instead (or
`nothing` at the end of the epoch).
"""
mutable struct DataLoader <: Handle
    ptr::Ptr{Cvoid}
    dataset::Dataset                      # roots a function dataset's state
    fields::Int
    batch::Union{Nothing,Tuple}           # the batch the running loop holds
end

function DataLoader(acc, dataset::Dataset; options...)
    pointer = @out Ptr{Cvoid} accel_dataloader_new(acc::Ptr{Cvoid}, dataset::Ptr{Cvoid})
    loader = own(DataLoader(pointer, dataset, 0, nothing))
    try
        loader.fields = field_count(loader)
        for (key, value) in options
            set!(loader, key, value)
        end
    catch
        close(loader)
        rethrow()
    end
    loader
end
DataLoader(f::Function, acc, dataset::Dataset; options...) =
    with_handle(f, DataLoader(acc, dataset; options...))

# Free waits for the samples the workers are making: see paused_gc.
free_handle(loader::DataLoader, p) =
    paused_gc(() -> @acall(accel_dataloader_free(p::Ptr{Cvoid})::Cvoid), loader)

"""
    close(loader)

Stops the worker threads (waiting for the samples they are making) and frees the dataloader. A
prepared dataloader stays in the accelerator's checkpoints with its cursor as it was.
"""
function Base.close(loader::DataLoader)
    release_batch!(loader)
    if isopen(loader)
        paused_gc(loader) do
            @check accel_dataloader_close(loader::Ptr{Cvoid})
        end
    end
    release!(loader)
end

# Julia < 1.9 cannot run a dataset function on the dataloader's threads.
const FOREIGN_THREAD_CALLBACKS = VERSION >= v"1.9"

"""
    set!(object, key, value)

Sets an option of a `DataLoader`, `Optimizer`, `Scheduler` (or a `Config`, as `cfg[key] = value`)
by key: `set!(loader, :batch_size, 64)`. Values are Bool, numbers, strings or symbols.
"""
function set!(loader::DataLoader, key::Union{AbstractString,Symbol}, value)
    text = c_text(value)
    workers = String(key) == "num_workers" ? tryparse(Int, strip(text)) : nothing
    if workers !== nothing && workers > 0 && !FOREIGN_THREAD_CALLBACKS && loader.dataset.source !== nothing
        throw(AccelError(ERR_UNSUPPORTED,
            "num_workers = $value: the dataset is a Julia function, and Julia $VERSION cannot run " *
            "it on the dataloader's threads (that needs Julia 1.9); use num_workers = 0, or a " *
            "dataset of arrays or IDX files"))
    end
    release_batch!(loader)     # the library ends an iteration in progress
    paused_gc(loader) do
        @check accel_dataloader_set(loader::Ptr{Cvoid}, c_text(key)::Cstring, text::Cstring)
    end
    loader
end

function release_batch!(loader::DataLoader)
    batch = loader.batch
    loader.batch = nothing
    batch === nothing || foreach(close, batch)
    nothing
end

"""
    next_batch(loader) -> Union{Nothing, Tuple{Vararg{Tensor}}}

The next batch (tensors you own and close), or `nothing` at the end of the epoch; the call after
that starts the next epoch. A failing dataset function throws an `AccelError` (`ERR_CALLBACK`)
with the function's exception as its `cause`; the next call starts that epoch again.
"""
function next_batch(loader::DataLoader)
    release_batch!(loader)
    fields = fill(C_NULL, loader.fields)
    count = Ref{Csize_t}(0)
    status = paused_gc(loader) do
        @acall accel_dataloader_next(loader::Ptr{Cvoid}, fields::Ptr{Ptr{Cvoid}},
                                     length(fields)::Csize_t, count::Ptr{Csize_t})::Int32
    end
    status == 0 || throw_status(status, take_failure!(loader.dataset.source))
    count[] == 0 && return nothing
    Tuple(Tensor(fields[i], Val(:own)) for i in 1:count[])
end

# On Julia >= 1.9 a function dataset's workers run Julia code on the library's threads while this
# thread waits inside a ccall (for a batch, or for the workers to stop), where it cannot take part
# in a garbage collection (julia #51574): a collection started by a worker would wait for it
# forever. Collections wait for the call instead.
function paused_gc(f, loader::DataLoader)
    FOREIGN_THREAD_CALLBACKS && loader.dataset.source !== nothing || return f()
    previous = GC.enable(false)
    try
        f()
    finally
        GC.enable(previous)
    end
end

function Base.iterate(loader::DataLoader, state = nothing)
    batch = next_batch(loader)
    batch === nothing && return nothing
    loader.batch = batch
    batch, nothing
end
Base.IteratorSize(::Type{DataLoader}) = Base.SizeUnknown()
Base.eltype(::Type{DataLoader}) = Tuple{Vararg{Tensor}}

"The number of batches this process gets in a whole epoch."
function Base.length(loader::DataLoader)
    Int(@out Int64 accel_dataloader_batch_count(loader::Ptr{Cvoid}))
end

function field_count(loader::DataLoader)
    Int(@out Csize_t accel_dataloader_field_count(loader::Ptr{Cvoid}))
end

"""
    set_epoch!(loader, epoch)

The epoch the next iteration uses (its shuffle). Epochs are names shared with Accelerate and the
checkpoints, not indices: they count from 0 (`for e in 0:epochs-1`; see `Accel`).
"""
function set_epoch!(loader::DataLoader, epoch::Integer)
    release_batch!(loader)
    paused_gc(loader) do
        @check accel_dataloader_set_epoch(loader::Ptr{Cvoid}, Int64(epoch)::Int64)
    end
    loader
end

"The current epoch (from 0; it advances after each complete pass)."
function epoch(loader::DataLoader)
    Int(@out Int64 accel_dataloader_epoch(loader::Ptr{Cvoid}))
end

"Whether the last batch of the epoch is in use (Accelerate's `end_of_dataloader`)."
function end_of_epoch(loader::DataLoader)
    @out Bool accel_dataloader_end_of_epoch(loader::Ptr{Cvoid})
end

"How many samples of the last global step are real (Accelerate's `remainder`); -1 with drop_last."
function remainder(loader::DataLoader)
    Int(@out Int64 accel_dataloader_remainder(loader::Ptr{Cvoid}))
end

"""
    skip_first_batches!(loader, n)

The next iteration skips this process's first `n` batches (a mid-epoch resume).
"""
function skip_first_batches!(loader::DataLoader, n::Integer)
    @check accel_dataloader_skip_first_batches(loader::Ptr{Cvoid}, Int64(n)::Int64)
    loader
end

"""
    position(loader) -> (epoch, samples)

The global sample cursor: the epoch (from 0, as `set_epoch!`) and how many of its samples all
processes have consumed (a count).
`set_position!(loader, epoch, samples)` continues there, with any number of processes.
"""
function Base.position(loader::DataLoader)
    epoch, samples = Ref{Int64}(0), Ref{Int64}(0)
    @check accel_dataloader_position(loader::Ptr{Cvoid}, epoch::Ptr{Int64}, samples::Ptr{Int64})
    (Int(epoch[]), Int(samples[]))
end

"""
    set_position!(loader, epoch, samples)

Continues at a saved global cursor (see `position`): the next iteration starts `samples` into
`epoch`, whatever the number of processes now.
"""
function set_position!(loader::DataLoader, epoch::Integer, samples::Integer)
    release_batch!(loader)
    @check accel_dataloader_set_position(loader::Ptr{Cvoid}, Int64(epoch)::Int64, Int64(samples)::Int64)
    loader
end
