# Datasets: from arrays or tensors, from IDX files, and from a Julia function.

# The state of a function dataset, passed to the C trampoline as user_data. The Dataset and every
# DataLoader over it hold it in a field, so it lives as long as the library may call it: a handle
# is freed (by close or its finalizer) before what it references can be collected.
mutable struct SampleSource
    f::Any
    types::Vector{DataType}
    dims::Vector{Tuple}          # per-sample dims, Julia's order
    failure::Any                 # (exception, backtrace) of the last failed call, or nothing
    lock::Threads.SpinLock       # workers (Julia >= 1.9) may fail at once
end

"""
    Dataset(arrays_or_tensors...)
    Dataset(f, n, field_type => dims, ...)
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

`length(ds)` is the number of samples, `field_count(ds)` the number of fields.
"""
mutable struct Dataset <: Handle
    ptr::Ptr{Cvoid}
    source::Union{Nothing,SampleSource}
    Dataset(pointer::Ptr{Cvoid}, source) = own(new(pointer, source))
end

free_handle(::Dataset, p) = @acall accel_dataset_free(p::Ptr{Cvoid})::Cvoid

function Dataset(fields::Union{Tensor,AbstractArray}...)
    isempty(fields) && throw(ArgumentError("a dataset needs at least one field"))
    with_tensors(fields) do tensors
        handles = HandleArray(tensors)
        dataset = @out Ptr{Cvoid} accel_dataset_from_tensors(handles::Ptr{Ptr{Cvoid}},
                                                             length(handles)::Csize_t)
        Dataset(dataset, nothing)
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
        @out Ptr{Cvoid} accel_dataset_from_idx(pointers::Ptr{Ptr{UInt8}}, length(pointers)::Csize_t)
    end
    Dataset(dataset, nothing)
end

const FieldSpec = Pair{DataType,<:Tuple}

function Dataset(f::Function, n::Integer, fields::FieldSpec...)
    isempty(fields) && throw(ArgumentError("a dataset needs at least one field (Float32 => (8,), ...)"))
    types = DataType[first(p) for p in fields]
    for T in types
        T <: Element || throw(AccelError(ERR_DTYPE, "field type $T has no library dtype"))
    end
    dims = Tuple[Tuple(Int.(last(p))) for p in fields]
    source = SampleSource(f, types, dims, nothing, Threads.SpinLock())
    dtypes = Int32[Int32(dtype_of(T)) for T in types]
    dim_counts = Csize_t[length(d) for d in dims]
    flat = Int64[x for d in dims for x in reverse(d)]
    dataset = GC.@preserve source begin
        @out Ptr{Cvoid} accel_dataset_from_callback(Int64(n)::Int64, length(fields)::Csize_t,
                                                    dtypes::Ptr{Int32}, dim_counts::Ptr{Csize_t},
                                                    flat::Ptr{Int64}, SAMPLE_TRAMPOLINE[]::Ptr{Cvoid},
                                                    pointer_from_objref(source)::Ptr{Cvoid},
                                                    C_NULL::Ptr{Cvoid})
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
            expected = sizeof(T) * prod(dims)
            got = unsafe_load(sizes, i)
            got == expected || error("field $i: the library gives $got bytes, $T$dims needs $expected")
            unsafe_wrap(Array, Ptr{T}(unsafe_load(buffers, i)), dims; own = false)
        end
        source.f(index + 1, arrays...)
        return Int32(0)
    catch exception
        lock(source.lock)
        source.failure = (exception, catch_backtrace())
        unlock(source.lock)
        return Int32(1)
    end
end

const SAMPLE_TRAMPOLINE = Ref{Ptr{Cvoid}}(C_NULL)

# The failure a dataset function left, taken once.
function take_failure!(source::Union{Nothing,SampleSource})
    source === nothing && return nothing
    lock(source.lock)
    failure = source.failure
    source.failure = nothing
    unlock(source.lock)
    failure
end

function Base.length(ds::Dataset)
    Int(@out Int64 accel_dataset_sample_count(ds::Ptr{Cvoid}))
end

"""
    field_count(dataset_or_loader) -> Int

The number of fields of each sample (and of each batch).
"""
function field_count(ds::Dataset)
    Int(@out Csize_t accel_dataset_field_count(ds::Ptr{Cvoid}))
end
