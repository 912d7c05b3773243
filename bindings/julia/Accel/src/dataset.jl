# Datasets: from arrays or tensors, from IDX files, and from a Julia function (streams: stream.jl).

# The state of a function dataset, passed to the C trampolines as user_data. The Dataset and every
# DataLoader over it hold it in a field, so it lives as long as the library may call it: a handle
# is freed (by close or its finalizer) before what it references can be collected.
mutable struct SampleSource
    f::Any
    types::Vector{DataType}
    dims::Vector{Tuple}          # per-sample dims, Julia's order; a ragged field's fixed ones
    ragged::Vector{Bool}         # per field: a RaggedField (its last Julia dimension varies)
    lengths::Any                 # the lengths function of a dataset with ragged fields, or nothing
    failure::Any                 # (exception, backtrace) of the last failed call, or nothing
    lock::Threads.SpinLock       # workers (Julia >= 1.9) may fail at once
end

# The state of a stream from a Julia iterator (stream.jl), passed to its C trampoline as
# user_data, rooted as a SampleSource is. The library reads a stream in order, one call at a time;
# `iterator` and `state` are where the running pass is. Every DataLoader reads its own copy (see
# `reader_of`): the C callback cannot tell two dataloaders' passes apart.
mutable struct StreamSource
    factory::Any                 # epoch -> an iterator of samples
    types::Vector{DataType}
    dims::Vector{Tuple}          # per-sample dims, Julia's order; a ragged field's fixed ones
    ragged::Vector{Bool}
    iterator::Any                # the running pass (nothing when none)
    state::Any                   # its iteration state
    epoch::Int64                 # the epoch of the running pass
    next::Int64                  # the library's position of the sample it will ask for; -1: none
    failure::Any
    lock::Threads.SpinLock
end

"""
    RaggedField(T, dims...)

A field of a function dataset whose samples differ in length (the tokens of a sentence): each
sample of it is a Julia array of size `(dims..., n)`, `n` that sample's own length. The varying
dimension is Julia's **last** (the library's first, `ACCEL_RAGGED`; see the layout rule at
`Tensor`): `RaggedField(Int64)` is a sequence of `n` tokens (a `Vector`), `RaggedField(Float32, 16)`
`n` rows of 16 features (16 × n). `n` may be 0.

A batch pads the field to its longest sample (see the padding options of `DataLoader`): Julia size
`(dims..., padded, batch)`, and adds one field after the dataset's, per ragged field: by default
the attention mask, `Int64` of size `(padded, batch)` (1 on a sample's entries, 0 on padding).
"""
struct RaggedField
    type::DataType
    dims::Tuple{Vararg{Int}}     # the fixed dims, Julia's order (the ragged one, last, left out)
    function RaggedField(T::DataType, dims::Integer...)
        all(d -> d >= 0, dims) ||
            throw(ArgumentError("RaggedField($T, $(join(dims, ", "))): a negative dimension"))
        new(T, Tuple(Int.(dims)))
    end
end

"""
    Dataset(arrays_or_tensors...)
    Dataset(f, n, field_type => dims, ...)
    Dataset(f, n, RaggedField(T, dims...), ...; lengths)
    idx_dataset(paths...)

A dataset: `n` samples, each one row of every field.

- From arrays or tensors: field `i` is the `i`-th argument, samples along the **last** Julia
  dimension (the library's first; see the layout rule at `Tensor`): `Dataset(images, labels)`
  with images of size (28, 28, N) and labels of length N.
- From a Julia function, `Dataset(n, Float32 => (8,), Int64 => ()) do i, x, y ... end`: for
  sample `i` (1-based) it fills one array per field, each of its type and per-sample dims (Julia
  order; `()` is a scalar, a 0-dimensional array `y[] = ...`). The arrays are the library's
  buffers: valid during the call only. An exception thrown inside fails the dataloader's
  iteration with an `AccelError` (`ERR_CALLBACK`) whose `cause` is the exception. With
  `num_workers > 0` the function runs on the dataloader's threads, several at once: that needs
  Julia 1.9 (earlier Julia cannot run Julia code on threads it did not start), so on Julia < 1.9
  a dataloader over a function dataset refuses `num_workers > 0`.
- Samples of different lengths: fields declared `RaggedField(T, dims...)` and a `lengths`
  function: `Dataset(n, RaggedField(Int64), Int64 => (); lengths = i -> length(docs[i])) do i,
  tokens, label ... end` (`tokens .= docs[i]; label[] = labels[i]`). `lengths(i)` returns the length of sample `i`'s ragged field (a tuple of lengths, in field order,
  when there are several); the fill function then gets arrays of exactly those lengths (Julia size
  `(dims..., lengths(i))`). Two functions rather than one returning the sample's arrays: the
  library asks for the lengths of a whole batch before it fills any sample (to know the padded
  length and write each sample in place), and for every sample's length once with
  `group_by_length`, so a function returning arrays would run twice per sample or have its
  results kept. `lengths` should be cheap and give the same answer each time. It runs on the same
  threads as the fill function (the same `num_workers` rule), and its exceptions fail the
  iteration the same way.

`length(ds)` is the number of samples, `field_count(ds)` the number of fields. A dataset with no
known length, read in order, is a stream: see `stream_dataset` and `text_lines_dataset`.
"""
mutable struct Dataset <: Handle
    ptr::Ptr{Cvoid}
    source::Union{Nothing,SampleSource,StreamSource}   # the Julia code the library calls
    ragged::Vector{Bool}                               # per field: whether it is ragged
    Dataset(pointer::Ptr{Cvoid}, source, ragged::Vector{Bool}) = own(new(pointer, source, ragged))
end
Dataset(pointer::Ptr{Cvoid}, source::Union{SampleSource,StreamSource}) =
    Dataset(pointer, source, source.ragged)

free_handle(::Dataset, p) = @acall accel_dataset_free(p)

function Dataset(fields::Union{Tensor,AbstractArray}...)
    isempty(fields) && throw(ArgumentError("a dataset needs at least one field"))
    with_tensors(fields) do tensors
        handles = HandleArray(tensors)
        dataset = @out Ptr{Cvoid} accel_dataset_from_tensors(handles, length(handles))
        Dataset(dataset, nothing, fill(false, length(fields)))
    end
end

"""
    idx_dataset(paths...) -> Dataset

A dataset from IDX files (the MNIST family, plain or gzip), one field per file in the file's own
dtype: Fashion-MNIST's images are UInt8 of Julia size (28, 28, N), its labels UInt8 of length N.
A missing, truncated or foreign file throws `ERR_IO` naming it.
"""
function idx_dataset(paths::AbstractString...)
    isempty(paths) && throw(ArgumentError("idx_dataset needs at least one file"))
    texts = [c_text(p) for p in paths]
    pointers = Ptr{UInt8}[pointer(t) for t in texts]
    dataset = GC.@preserve texts begin
        @out Ptr{Cvoid} accel_dataset_from_idx(pointers, length(pointers))
    end
    Dataset(dataset, nothing, fill(false, length(paths)))
end

const FieldSpec = Pair{DataType,<:Tuple}

function Dataset(f::Function, n::Integer, fields::Union{FieldSpec,RaggedField}...; lengths = nothing)
    isempty(fields) && throw(ArgumentError("a dataset needs at least one field (Float32 => (8,), ...)"))
    types = DataType[p isa RaggedField ? p.type : first(p) for p in fields]
    for T in types
        T <: Element || throw(AccelError(ERR_DTYPE, "field type $T has no library dtype"))
    end
    ragged = Bool[p isa RaggedField for p in fields]
    dims = Tuple[p isa RaggedField ? p.dims : Tuple(Int.(last(p))) for p in fields]
    if any(ragged)
        lengths === nothing && throw(ArgumentError(
            "a dataset with a RaggedField needs the keyword `lengths`: a function of the sample " *
            "index giving its length (a tuple of lengths, in field order, for several ragged fields)"))
    elseif lengths !== nothing
        throw(ArgumentError("`lengths` is for datasets with a RaggedField, and no field is ragged"))
    end
    source = SampleSource(f, types, dims, ragged, lengths, nothing, Threads.SpinLock())
    dtypes = Int32[Int32(dtype_of(T)) for T in types]
    # The library's per-sample dims: Julia's reversed, ACCEL_RAGGED (-1) first for a ragged field.
    library_dims = [r ? Int64[-1; reverse(collect(Int64, d))] : collect(Int64, reverse(d))
                    for (r, d) in zip(ragged, dims)]
    dim_counts = Csize_t[length(d) for d in library_dims]
    flat = reduce(vcat, library_dims; init = Int64[])
    dataset = GC.@preserve source begin
        if any(ragged)
            @out Ptr{Cvoid} accel_dataset_from_ragged_callback(Int64(n), length(fields),
                dtypes, dim_counts, flat,
                LENGTH_TRAMPOLINE[], SAMPLE_TRAMPOLINE[],
                pointer_from_objref(source), C_NULL)
        else
            @out Ptr{Cvoid} accel_dataset_from_callback(Int64(n), length(fields),
                                                        dtypes, dim_counts,
                                                        flat, SAMPLE_TRAMPOLINE[],
                                                        pointer_from_objref(source),
                                                        C_NULL)
        end
    end
    Dataset(dataset, source)
end
Dataset(f::Function, ds::Dataset) = with_handle(f, ds)

# Called by the library for every sample of a function dataset. Never lets an exception escape
# into C: it is kept in the source and the call fails.
function sample_trampoline(index::Int64, buffers::Ptr{Ptr{Cvoid}}, sizes::Ptr{Csize_t},
                           count::Csize_t, user_data::Ptr{Cvoid})::Int32
    source = unsafe_pointer_to_objref(user_data)::SampleSource
    try
        arrays = map(1:Int(count)) do i
            T, dims = source.types[i], source.dims[i]
            got = Int(unsafe_load(sizes, i))
            row = sizeof(T) * prod(dims)
            if source.ragged[i]
                # The sample's length, from the buffer's size (rows of no bytes: asked again).
                n = row == 0 ? ragged_lengths(source, index + 1)[count_ragged(source, i)] : div(got, row)
                row == 0 || got % row == 0 ||
                    error("field $i: the library gives $got bytes, not a whole number of $T$dims rows")
                dims = (dims..., n)
            else
                got == row || error("field $i: the library gives $got bytes, $T$dims needs $row")
            end
            unsafe_wrap(Array, Ptr{T}(unsafe_load(buffers, i)), dims; own = false)
        end
        source.f(index + 1, arrays...)
        return Int32(0)
    catch exception
        keep_failure!(source, exception, catch_backtrace())
        return Int32(1)
    end
end

# Called by the library for the lengths of a sample of a dataset with ragged fields, before its
# fill: lengths[f] for each ragged field f.
function length_trampoline(index::Int64, lengths::Ptr{Int64}, count::Csize_t,
                           user_data::Ptr{Cvoid})::Int32
    source = unsafe_pointer_to_objref(user_data)::SampleSource
    try
        Int(count) == length(source.ragged) ||
            error("the library asks for $(Int(count)) fields' lengths; the dataset has $(length(source.ragged))")
        values = ragged_lengths(source, index + 1)
        k = 0
        for f in 1:Int(count)
            source.ragged[f] || continue
            k += 1
            unsafe_store!(lengths, values[k], f)
        end
        return Int32(0)
    catch exception
        keep_failure!(source, exception, catch_backtrace())
        return Int32(1)
    end
end

# The lengths function's answer for sample i (1-based): one Int64 per ragged field, in field order.
function ragged_lengths(source::SampleSource, i::Integer)
    reported = source.lengths(i)
    wanted = count(source.ragged)
    values = reported isa Integer ? (reported,) : Tuple(reported)
    length(values) == wanted || error("lengths($i) returned $(repr(reported)): the dataset has " *
        "$wanted ragged field$(wanted == 1 ? "" : "s"), so it returns " *
        (wanted == 1 ? "one length" : "a tuple of $wanted lengths, in field order"))
    map(v -> Int64(v), values)
end

# Which ragged field (1st, 2nd, ...) field i is.
count_ragged(source::SampleSource, i::Integer) = count(view(source.ragged, 1:i))

function keep_failure!(source::Union{SampleSource,StreamSource}, exception, backtrace)
    lock(source.lock)
    source.failure = (exception, backtrace)
    unlock(source.lock)
end

const SAMPLE_TRAMPOLINE = Ref{Ptr{Cvoid}}(C_NULL)
const LENGTH_TRAMPOLINE = Ref{Ptr{Cvoid}}(C_NULL)

# The failure a dataset function left, taken once.
function take_failure!(source::Union{Nothing,SampleSource,StreamSource})
    source === nothing && return nothing
    lock(source.lock)
    failure = source.failure
    source.failure = nothing
    unlock(source.lock)
    failure
end

function Base.length(ds::Dataset)
    n = Int(@out Int64 accel_dataset_sample_count(ds))
    n >= 0 || throw(AccelError(ERR_UNSUPPORTED,
        "length: the dataset is a stream, whose length is unknown until a pass reaches its end; " *
        "iterate a DataLoader over it (`for`, `collect`), and ask `isstream(ds)` first in code " *
        "that takes datasets of both kinds"))
    n
end

"""
    isstream(dataset_or_loader) -> Bool

Whether the dataset (or the dataloader's) is a stream (`stream_dataset`, `text_lines_dataset`):
read in order, with no known length, so that `length` throws.
"""
isstream(ds::Dataset) = (@out Int64 accel_dataset_sample_count(ds)) < 0

"""
    field_count(dataset_or_loader) -> Int

The number of fields of each sample (and of each batch).
"""
function field_count(ds::Dataset)
    Int(@out Csize_t accel_dataset_field_count(ds))
end
