# Dataloaders: this process's shard of every global batch, with Julia's iteration protocol.

"""
    DataLoader(acc, dataset; batch_size = 1, shuffle = false, seed = 0, drop_last = false,
               num_workers = 0, prefetch_factor = 2, split_batches, even_batches,
               device_placement, group_by_length = false, dispatch_batches = :auto,
               pad_value = 0, padding_side = :right, pad_to_multiple_of = 1,
               max_length = nothing, truncation = false, mask = :attention_mask)

This process's shard of `dataset`, as Accelerate's prepared DataLoader (see accel.h,
"Dataloaders"). Options can be changed later with `set!(loader, key, value)` (between epochs).

Iterate it with `for (x, y) in loader`: one pass is one epoch (the next `for` starts the next
epoch; `set_epoch!` chooses the shuffle). Each batch is a tuple of `Tensor`s, one per field, that
lives for one turn of the loop: it is closed when the loader moves on (the loop's next turn or
end, `next_batch`, `set!`, `set_epoch!`, `close`), so the memory of a batch is returned at once;
copy what you keep (`Array(x)`). `next_batch(loader)` returns a batch you own instead (or
`nothing` at the end of the epoch).

**Ragged fields** (a dataset with `RaggedField`s): each batch pads every ragged field to its
longest sample (Julia size `(dims..., padded, batch)`) and, after the dataset's fields, adds one
field per ragged field, as `mask` says: `:attention_mask`, `Int64` of size `(padded, batch)`, 1 on
a sample's entries and 0 on padding; `:lengths`, an `Int64` vector of each sample's length (after
truncation); `:none` (or `nothing`), no field. `for (tokens, label, mask) in loader`.
`field_count(loader)` counts them. The padding options, for every ragged field (`set_field!` sets
one field's): `pad_value`; `padding_side` `:right` or `:left` (where the padding goes);
`pad_to_multiple_of` (the padded length is rounded up to it); `max_length` (`nothing`, or a
length); `truncation`: with `false` a sample longer than `max_length` fails the batch with an
`AccelError` (`ERR_SHAPE`) naming the sample and field, counted from 1; with `true` its first
`max_length` entries are kept. `group_by_length = true` gives batches of similar lengths (the
Hugging Face Trainer's grouping, by the first ragged field's length, the same global batches
whatever the number of processes); every sample still comes once per epoch. It asks `lengths`
for every sample once, at the first epoch.

**Streams** (`stream_dataset`, `text_lines_dataset`): sharded as Accelerate shards an
`IterableDataset`. With `dispatch_batches` (`:auto`, the default, is `true` for a stream; it
matters on several processes only) the main process reads the stream, one global batch of
`batch_size` per process (one batch in all with `split_batches`) at a time, and sends every
process its rows: every `next_batch` (every turn of the loop) is then a collective, which every
process makes together; the stream's Julia code runs on the main process alone. With
`dispatch_batches = false` every process reads the whole stream and keeps its slice of each
global batch (`IterableDatasetShard`). Either way global batch `i` goes to the ranks in order,
and the last global batch is dropped with `drop_last`, else completed from the epoch's first
samples (`even_batches` does not apply). `dispatch_batches = true` on a dataset of known length
throws `ERR_UNSUPPORTED` (it is sharded by index on every process), and so does
`group_by_length` on a stream. A stream has no `length(loader)` (it throws; iterating and
`collect` do not need it: `Base.IteratorSize` is `SizeUnknown`); `remainder` is known at the
last batch. A failure (an exception in the stream's iterator) keeps `position(loader)` at the
batches already returned: the next call reads the stream again up to there and returns the batch
that failed.
"""
mutable struct DataLoader <: Handle
    ptr::Ptr{Cvoid}
    dataset::Dataset                      # roots a function dataset's state (a stream's copy)
    fields::Int
    batch::Union{Nothing,Tuple}           # the batch the running loop holds
end

function DataLoader(acc, dataset::Dataset; options...)
    reader = reader_of(dataset)   # a stream from Julia: a copy with a pass of its own
    pointer = try
        @out Ptr{Cvoid} accel_dataloader_new(acc, reader)
    finally
        # The dataloader keeps the library's dataset; the Julia object stays in the dataloader, as
        # the root of its source.
        reader === dataset || close(reader)
    end
    loader = own(DataLoader(pointer, reader, 0, nothing))
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
    paused_gc(() -> @acall(accel_dataloader_free(p)), loader)

"""
    close(loader)

Stops the worker threads (waiting for the samples they are making) and frees the dataloader. A
prepared dataloader stays in the accelerator's checkpoints with its cursor as it was.
"""
function Base.close(loader::DataLoader)
    release_batch!(loader)
    if isopen(loader)
        paused_gc(loader) do
            @check accel_dataloader_close(loader)
        end
    end
    release!(loader)
end

# Julia < 1.9 cannot run a dataset function on the dataloader's threads.
const FOREIGN_THREAD_CALLBACKS = VERSION >= v"1.9"

"""
    set!(object, key, value)

Sets an option of a `DataLoader`, `Optimizer`, `Scheduler` (or a `Config`, as `cfg[key] = value`)
by key: `set!(loader, :batch_size, 64)`. Values are Bool, numbers, strings or symbols (and
`nothing` for a dataloader's `max_length` and `mask`: "none").
"""
function set!(loader::DataLoader, key::Union{AbstractString,Symbol}, value)
    text = loader_text(key, value)
    workers = String(key) == "num_workers" ? tryparse(Int, strip(text)) : nothing
    if workers !== nothing && workers > 0 && !FOREIGN_THREAD_CALLBACKS && loader.dataset.source !== nothing
        what = loader.dataset.source isa StreamSource ? "a stream from a Julia iterator" :
                                                       "a Julia function"
        throw(AccelError(ERR_UNSUPPORTED,
            "num_workers = $value: the dataset is $what, and Julia $VERSION cannot run " *
            "it on the dataloader's threads (that needs Julia 1.9); use num_workers = 0, or a " *
            "dataset of arrays, IDX files or text lines"))
    end
    release_batch!(loader)     # the library ends an iteration in progress
    paused_gc(loader) do
        @check accel_dataloader_set(loader, c_text(key), text)
    end
    loader.fields = field_count(loader)   # `mask` adds or removes fields
    loader
end

# The options whose "none" is Julia's `nothing`.
const NOTHING_IS_NONE = ("max_length", "mask")

loader_text(key, value) =
    value === nothing && String(key) in NOTHING_IS_NONE ? "none" : c_text(value)

"""
    set_field!(loader, field, key, value)

Sets a padding option (`pad_value`, `padding_side`, `pad_to_multiple_of`, `max_length`,
`truncation`, `mask`; see `DataLoader`) of one ragged field: `field` counts the dataset's fields
from 1 (`set_field!(loader, 1, :pad_value, -1)`). `set!(loader, key, value)` sets it for every
ragged field. A field that is not a `RaggedField` throws `ERR_INVALID_ARGUMENT`.
"""
function set_field!(loader::DataLoader, field::Integer, key::Union{AbstractString,Symbol}, value)
    ragged = loader.dataset.ragged
    fields = length(ragged)
    any(ragged) || throw(AccelError(ERR_INVALID_ARGUMENT,
        "set_field!: padding options apply to ragged fields, and the dataset has none"))
    1 <= field <= fields || throw(AccelError(ERR_INVALID_ARGUMENT,
        "set_field!: field $field is not a field of the dataset: fields count from 1, here 1:$fields"))
    ragged[field] || throw(AccelError(ERR_INVALID_ARGUMENT,
        "set_field!: field $field is not ragged (fields $(join(findall(ragged), ", ")) " *
        "are): padding options apply to ragged fields only"))
    text = loader_text(key, value)
    release_batch!(loader)
    paused_gc(loader) do
        @check accel_dataloader_set_field(loader, Csize_t(field - 1), c_text(key), text)
    end
    loader.fields = field_count(loader)
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
with the function's exception as its `cause`; the next call starts that epoch again (a stream's:
goes on with the batch that failed). With a dispatched stream on several processes it is a
collective (see `DataLoader`).
"""
function next_batch(loader::DataLoader)
    release_batch!(loader)
    fields = fill(C_NULL, loader.fields)
    count = Ref{Csize_t}(0)
    status = paused_gc(loader) do
        @acall accel_dataloader_next(loader, fields, length(fields), count)
    end
    status == 0 || throw_batch_status(status, loader)
    count[] == 0 && return nothing
    Tuple(Tensor(fields[i], Val(:own)) for i in 1:count[])
end

# The failure of accel_dataloader_next, with the dataset function's exception as its cause. The
# library names samples and fields in its messages as it counts, from 0 ("sample 3, field 0" of a
# padding error, "returned 1 for index 3" of a failed function, "returned -1 for sample 3 of
# epoch 0" of a stream): they are given as Julia counts, from 1, as the function saw them (a
# stream's item, a file's line).
function throw_batch_status(status::Integer, loader::DataLoader)
    cause = take_failure!(loader.dataset.source)
    try
        throw_status(status, cause)
    catch e
        e isa AccelError && e.status in (ERR_SHAPE, ERR_CALLBACK) || rethrow()
        throw(AccelError(e.status, count_from_one(e.message), e.cause))
    end
end

function count_from_one(message::AbstractString)
    message = replace(message, r"\bsample \d+, field \d+" => function (text)
        m = match(r"sample (\d+), field (\d+)", text)
        "sample $(parse(Int, m[1]) + 1), field $(parse(Int, m[2]) + 1)"
    end)
    message = replace(message, r"returned (-?\d+) for sample \d+ of epoch" => function (text)
        m = match(r"returned (-?\d+) for sample (\d+)", text)
        "returned $(m[1]) for sample $(parse(Int, m[2]) + 1) of epoch"
    end)
    message = replace(message, r"returned sample \d+ without writing field \d+" => function (text)
        m = match(r"sample (\d+) without writing field (\d+)", text)
        "returned sample $(parse(Int, m[1]) + 1) without writing field $(parse(Int, m[2]) + 1)"
    end)
    replace(message, r"callback returned (-?\d+) for index \d+" => function (text)
        m = match(r"returned (-?\d+) for index (\d+)", text)
        "callback returned $(m[1]) for sample $(parse(Int, m[2]) + 1)"
    end)
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

"The number of batches this process gets in a whole epoch. A stream has none: it throws."
function Base.length(loader::DataLoader)
    n = Int(@out Int64 accel_dataloader_batch_count(loader))
    n >= 0 || throw(AccelError(ERR_UNSUPPORTED,
        "length: the dataloader reads a stream, whose number of batches is unknown until a pass " *
        "reaches its end; iterate it (`for`, `collect`), and ask `isstream(loader)` first in " *
        "code that takes dataloaders of both kinds"))
    n
end

isstream(loader::DataLoader) = (@out Int64 accel_dataloader_batch_count(loader)) < 0

function field_count(loader::DataLoader)
    Int(@out Csize_t accel_dataloader_field_count(loader))
end

"""
    set_epoch!(loader, epoch)

The epoch the next iteration uses (its shuffle). Epochs are names shared with Accelerate and the
checkpoints, not indices: they count from 0 (`for e in 0:epochs-1`; see `Accel`).
"""
function set_epoch!(loader::DataLoader, epoch::Integer)
    release_batch!(loader)
    paused_gc(loader) do
        @check accel_dataloader_set_epoch(loader, Int64(epoch))
    end
    loader
end

"The current epoch (from 0; it advances after each complete pass)."
function epoch(loader::DataLoader)
    Int(@out Int64 accel_dataloader_epoch(loader))
end

"Whether the last batch of the epoch is in use (Accelerate's `end_of_dataloader`)."
function end_of_epoch(loader::DataLoader)
    @out Bool accel_dataloader_end_of_epoch(loader)
end

"""
How many samples of the last global step are real (Accelerate's `remainder`): a map-style
dataset's sample count mod the global batch size (-1 with drop_last); a stream's -1 until its last
global batch is in use, then that batch's real samples.
A stream's is known at its last batch (`end_of_epoch`), -1 before.
"""
function remainder(loader::DataLoader)
    Int(@out Int64 accel_dataloader_remainder(loader))
end

"""
    skip_first_batches!(loader, n)

The next iteration skips this process's first `n` batches (a mid-epoch resume).
"""
function skip_first_batches!(loader::DataLoader, n::Integer)
    @check accel_dataloader_skip_first_batches(loader, Int64(n))
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
    @check accel_dataloader_position(loader, epoch, samples)
    (Int(epoch[]), Int(samples[]))
end

"""
    set_position!(loader, epoch, samples)

Continues at a saved global cursor (see `position`): the next iteration starts `samples` into
`epoch`, whatever the number of processes now.
"""
function set_position!(loader::DataLoader, epoch::Integer, samples::Integer)
    release_batch!(loader)
    @check accel_dataloader_set_position(loader, Int64(epoch), Int64(samples))
    loader
end
