# Streams: datasets with no known length, read in order (Accelerate's IterableDataset), from a
# Julia iterator or from the lines of a text file.

"""
    stream_dataset(factory, field_type => dims | RaggedField(T, dims...), ...) -> Dataset

A stream: a dataset with no known length, read in order, one sample after the other (an
`IterableDataset`). `factory(epoch)` returns an iterator of the epoch's samples, a fresh one from
its beginning each time it is called; each item is one sample: a tuple with one value per field
(a `NamedTuple`'s values in field order will do; a stream of one field may give the value alone).

    ds = stream_dataset(RaggedField(Int64), Int64 => ()) do epoch
        ((tokenize(line), label_of(line)) for line in eachline("corpus.txt"))
    end

A value is what the field declares, in Julia's order (see `Tensor`): for `T => dims` an array of
size `dims` (`()`: a number), for `RaggedField(T, dims...)` an array of size `(dims..., n)`, `n`
the sample's own length (for `RaggedField(UInt8)`, a string gives its UTF-8 bytes). Elements are
converted to `T` as `.=` would. A value of the wrong size fails the pass with an `AccelError`
(`ERR_CALLBACK`) whose `cause` is an `AccelError` (`ERR_SHAPE`) naming the sample and field.
Ragged fields are padded and masked as for `Dataset(f, n, RaggedField(...); lengths)` (see
`DataLoader`); a stream needs no `lengths` function, the values give them.

**Counting.** The factory gets the epoch as `set_epoch!` names it, from 0. Samples count from 1
like a dataset's indices: the first item of a pass is sample 1, as error messages name it
("returned -1 for sample 7 of epoch 0" is the iterator's seventh item). `position(loader)` counts
samples consumed (a count, as for every dataset), and `length` throws: see `isstream`.

**When the factory is called.** At the start of every pass: each epoch, and again whenever a pass
starts over, for the stream is read from its beginning to get back to a place: after an exception
(the next call reads it again up to the batches already returned and goes on with the batch that
failed), after `set_position!`/`skip_first_batches!` (the samples before the cursor are read and
dropped), after `set!` or `set_epoch!` in the middle of a pass, and every rank reads the whole
stream unless the main process dispatches it (`DataLoader`'s `dispatch_batches`, the default on
several processes: then the factory runs on the main process alone). So `factory(epoch)` should
give the same items each time for the same epoch (shuffle with the epoch as seed, if at all).

An exception thrown by the factory or the iterator fails the dataloader's call with an
`AccelError` (`ERR_CALLBACK`) whose `cause` is the exception. The iterator runs on the thread that
iterates the dataloader; with `num_workers > 0` it would run on the dataloader's reading thread
(which reads up to `num_workers * prefetch_factor` global batches ahead): as for function
datasets that needs Julia 1.9, so on older Julia a dataloader over a stream from Julia refuses
`num_workers > 0`. Each `DataLoader` reads its own pass (two dataloaders over one stream do not
share an iterator).

Why a factory of iterators rather than a function of (epoch, position): the library asks for the
samples of a pass in order, starting over at position 0, which is exactly a fresh iteration, so
any Julia iterator (`eachline`, a generator, `Iterators.flatten` over files) is a stream as it
is, with no position to keep, and a sample can be returned whole rather than written in place.
"""
function stream_dataset(factory, fields::Union{FieldSpec,RaggedField}...)
    factory isa Union{FieldSpec,RaggedField} && throw(ArgumentError(
        "stream_dataset takes the factory first: stream_dataset(epoch -> iterator, fields...), " *
        "or `stream_dataset(fields...) do epoch ... end`"))
    isempty(fields) && throw(ArgumentError(
        "a stream needs at least one field (Float32 => (8,), RaggedField(Int64), ...)"))
    types = DataType[p isa RaggedField ? p.type : first(p) for p in fields]
    for T in types
        T <: Element || throw(AccelError(ERR_DTYPE, "field type $T has no library dtype"))
    end
    ragged = Bool[p isa RaggedField for p in fields]
    dims = Tuple[p isa RaggedField ? p.dims : Tuple(Int.(last(p))) for p in fields]
    for (f, d) in enumerate(dims)
        all(x -> x >= 0, d) || throw(ArgumentError("field $f: a negative dimension in $d"))
    end
    open_stream(factory, types, dims, ragged)
end

# A library stream over a new StreamSource: a pass of its own.
function open_stream(factory, types::Vector{DataType}, dims::Vector{Tuple}, ragged::Vector{Bool})
    source = StreamSource(factory, types, dims, ragged, nothing, nothing, 0, -1, nothing,
                          Threads.SpinLock())
    dtypes = Int32[Int32(dtype_of(T)) for T in types]
    library_dims = [r ? Int64[-1; reverse(collect(Int64, d))] : collect(Int64, reverse(d))
                    for (r, d) in zip(ragged, dims)]
    dim_counts = Csize_t[length(d) for d in library_dims]
    flat = reduce(vcat, library_dims; init = Int64[])
    dataset = GC.@preserve source begin
        @out Ptr{Cvoid} accel_dataset_from_stream(length(types), dtypes,
            dim_counts, flat, STREAM_TRAMPOLINE[],
            pointer_from_objref(source), C_NULL)
    end
    Dataset(dataset, source)
end

# The dataset a new DataLoader reads: a stream from Julia gets a copy with a pass of its own
# (accel_stream_fn names no dataloader, so one source read by two dataloaders at once would mix
# their passes); every other dataset is shared as it is.
function reader_of(ds::Dataset)
    source = ds.source
    source isa StreamSource || return ds
    isopen(ds) || throw(AccelError(ERR_STATE, "Dataset used after close"))
    open_stream(source.factory, source.types, source.dims, source.ragged)
end

"""
    text_lines_dataset(path) -> Dataset

A stream (see `stream_dataset`) of the lines of a text file, read lazily, again from the start
each epoch: sample `k` is line `k` (from 1, as an editor numbers them; error messages say "sample
k"), one `RaggedField(UInt8)` holding the line's bytes without its newline (nor a carriage return
before it). A batch is the bytes, `UInt8` of size `(longest line, batch)`, padded with
`pad_value`, and the attention mask; with `mask = :lengths`, each line's length `n[j]` instead,
and `String(bytes[1:n[j], j])` is line `j` of the batch. An unreadable file throws `ERR_IO`
naming it. The file is read by the library, not by Julia code: `num_workers > 0` is fine on every
Julia.
"""
function text_lines_dataset(path::AbstractString)
    dataset = @out Ptr{Cvoid} accel_dataset_from_text_lines(c_text(path))
    Dataset(dataset, nothing, [true])
end

# Called by the library for the next sample of a pass: position 0 starts a new one. Never lets an
# exception escape into C: it is kept in the source, and the call returns -1 (a failure; 1 is the
# end of the stream).
function stream_trampoline(epoch::Int64, position::Int64, sample::Ptr{Cvoid},
                           user_data::Ptr{Cvoid})::Int32
    source = unsafe_pointer_to_objref(user_data)::StreamSource
    try
        if position == 0
            source.iterator = source.state = nothing
            source.next = -1
            source.iterator = source.factory(epoch)
            step = iterate(source.iterator)
        elseif position == source.next && epoch == source.epoch
            step = iterate(source.iterator, source.state)
        else   # the library's promise broken: say so rather than give another pass's sample
            error("the library asks for sample $(position + 1) of epoch $epoch, and this stream's " *
                  (source.next < 0 ? "pass has not started" :
                   "pass is at sample $(source.next + 1) of epoch $(source.epoch)"))
        end
        if step === nothing
            source.iterator = source.state = nothing
            source.next = -1
            return Int32(1)
        end
        item, source.state = step
        source.epoch, source.next = epoch, position + 1
        write_sample(source, sample, item, position + 1)
        return Int32(0)
    catch exception
        source.iterator = source.state = nothing
        source.next = -1
        keep_failure!(source, exception, catch_backtrace())
        return Int32(-1)
    end
end

# Writes one item of the iterator, sample k of the pass (from 1), field by field.
function write_sample(source::StreamSource, sample::Ptr{Cvoid}, item, k::Integer)
    n = length(source.types)
    values = item isa Tuple ? item : item isa NamedTuple ? Tuple(item) : n == 1 ? (item,) :
        throw(ArgumentError("sample $k: the iterator gave a $(typeof(item)); the stream has $n " *
                            "fields, so each item is a tuple of $n values, in field order"))
    length(values) == n || throw(ArgumentError("sample $k: the iterator gave $(length(values)) " *
        "value$(length(values) == 1 ? "" : "s"); the stream has $n field$(n == 1 ? "" : "s")"))
    for f in 1:n
        data = field_data(source, f, values[f], k)
        GC.@preserve data begin
            try
                @check accel_sample_set_field(sample, Csize_t(f - 1),
                                              data_pointer(data), sizeof(data))
            catch e   # the library names the sample and field from 0
                e isa AccelError || rethrow()
                throw(AccelError(e.status, count_from_one(e.message), e.cause))
            end
        end
    end
end

data_pointer(data::String) = Ptr{Cvoid}(pointer(data))
data_pointer(data::Array) = Ptr{Cvoid}(pointer(data))

# The bytes of field f's value: an Array of the field's type and size (a String for a
# RaggedField(UInt8)), checked against the declaration.
function field_data(source::StreamSource, f::Integer, value, k::Integer)
    T, dims, ragged = source.types[f], source.dims[f], source.ragged[f]
    where = "sample $k, field $f"
    if ragged && T == UInt8 && isempty(dims) && value isa AbstractString
        return String(value)
    end
    if !ragged && isempty(dims) && value isa Number
        return fill(element(T, value, where), ())
    end
    value isa AbstractArray || throw(AccelError(ERR_SHAPE, "$where: a $(typeof(value)), and the " *
        "field's values are " * declared(T, dims, ragged)))
    fits = ragged ? ndims(value) == length(dims) + 1 && size(value)[1:end-1] == dims :
                    size(value) == dims
    fits || throw(AccelError(ERR_SHAPE, "$where: Julia size $(size(value)), and the field's " *
                                        "values are " * declared(T, dims, ragged)))
    value isa Array{T} && return value
    try
        return Array{T}(value)
    catch e
        throw(AccelError(ERR_DTYPE, "$where: a $(typeof(value)) does not convert to the field's " *
                                    "$T: $(sprint(showerror, e))"))
    end
end

function element(T, value, where)
    try
        convert(T, value)
    catch e
        throw(AccelError(ERR_DTYPE, "$where: $(repr(value)) does not convert to the field's $T: " *
                                    sprint(showerror, e)))
    end
end

function declared(T, dims, ragged)
    ragged || return isempty(dims) ? "$T numbers (or 0-dimensional arrays)" : "$T arrays of size $dims"
    size = isempty(dims) ? "(n,)" : "($(join(dims, ", ")), n)"
    "$T arrays of size $size, n the sample's length"
end

const STREAM_TRAMPOLINE = Ref{Ptr{Cvoid}}(C_NULL)
