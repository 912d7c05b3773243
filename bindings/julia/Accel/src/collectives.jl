# Collectives: every rank makes the same calls in the same order.

# A collective's result comes back in the form its argument went in: a `Tensor` gives a `Tensor`
# (the caller's to close), an array an `Array`, a number a number (`gather` of numbers a `Vector`),
# as Accelerate gives tensors for tensors and Python numbers from `.item()`. Values need no close.

# `call(t)` runs the collective on `x` as a tensor and returns the library's result (a pointer).
collective(call, x::Tensor) = Tensor(call(x), Val(:own))
collective(call, x) = throw(ArgumentError(
    "a collective takes a Tensor, an array or a number; got $(typeof(x))"))
function collective(call, x::Union{Number,AbstractArray})
    t = Tensor(x)
    pointer = try
        call(t)
    finally
        close(t)
    end
    value_of(pointer, x isa Number)
end

# Copies a result the library returned into Julia and frees it; a 0-dimensional result of a
# number is that number.
function value_of(pointer::Ptr{Cvoid}, scalar::Bool)
    result = Tensor(pointer, Val(:own))
    A = try
        Array(result)
    catch e
        # Only a broadcast to `nothing` can receive a dtype Julia has no type for (BF16).
        e isa AccelError && e.status == ERR_DTYPE || rethrow()
        throw(AccelError(ERR_DTYPE, "the collective's result is $(dtype(result)), which has no " *
                                    "Julia element type: pass a Tensor to receive a Tensor"))
    finally
        close(result)
    end
    scalar && ndims(A) == 0 ? A[] : A
end

"""
    gather(acc, x) -> Tensor, Array or Vector

Every rank's `x` concatenated along the library's first dimension (Julia's **last**), in rank
order, on every rank (rank `r`'s part first for `r = 0`, as `process_index` counts ranks).
A `Tensor` gives a `Tensor` (close it), an array an `Array`, a number a `Vector` of one number per
rank (`gather(acc, 1.5)[r + 1]` is rank `r`'s). Shapes and dtypes must agree (see
`pad_across_processes`).

    gather(f, acc, t::Tensor)

The do-block form: `f(result)`, then the result is closed.
"""
gather(acc::Accelerator, x) = collective(x) do t
    @out Ptr{Cvoid} accel_gather(acc, t)
end

"""
    pad_across_processes(acc, x; dim = ndims(x), pad_value = 0, pad_first = false) -> Tensor or Array

Pads Julia dimension `dim` (by default the last: the library's first, Accelerate's dim 0) to the
largest size any rank has there, with `pad_value`, at the end or with `pad_first` at the start.
A `Tensor` gives a `Tensor`, an array an `Array`.
"""
function pad_across_processes(acc::Accelerator, x; dim::Union{Nothing,Integer} = nothing,
                              pad_value::Real = 0, pad_first::Bool = false)
    n = ndims(x)
    d = dim === nothing ? n : Int(dim)
    1 <= d <= n || throw(AccelError(ERR_INVALID_ARGUMENT,
        "pad_across_processes: dim $d is not a dimension of a $n-dimensional tensor"))
    collective(x) do t
        @out Ptr{Cvoid} accel_pad_across_processes(acc, t, Int64(n - d),
                                                   Float64(pad_value), pad_first)
    end
end

const REDUCTIONS = (sum = 0, mean = 1, max = 2, min = 3)

"""
    reduce_across(acc, x; reduction = :sum) -> Tensor, Array or number

The element-wise `:sum`, `:mean`, `:max` or `:min` of every rank's `x`, on every rank
(Accelerate's `reduce`; named apart from Base's `reduce(op, collection)`, which this is not). A
`Tensor` gives a `Tensor` (close it), an array an `Array`, a number a number of its type:
`reduce_across(acc, only(loss); reduction = :mean)` is the mean loss over the processes. `:mean`
wants floating-point elements.
"""
function reduce_across(acc::Accelerator, x; reduction::Union{Symbol,AbstractString} = :sum)
    reduction = Symbol(reduction)   # "mean" as Accelerate spells it is :mean
    haskey(REDUCTIONS, reduction) || throw(AccelError(ERR_INVALID_ARGUMENT,
        "reduce_across: reduction $(repr(reduction)) is not one of :sum, :mean, :max, :min"))
    code = Int32(REDUCTIONS[reduction])
    collective(x) do t
        @out Ptr{Cvoid} accel_reduce(acc, t, code)
    end
end

# Accel.jl 0.2.0 named these Base.reduce and Base.broadcast, and Base's own reduce(op, x) of a
# number (or a one-element array) returns x without calling op: an old call would quietly give
# this rank's value. It is refused with the new name instead.
# (One method per Base method it would otherwise be ambiguous with.)
for X in (Any, Number, AbstractArray)
    @eval Base.reduce(::Accelerator, ::$X; kwargs...) = throw(ArgumentError(
        "reduce(acc, x) is Base's reduce, not a collective: use reduce_across(acc, x; reduction = :sum)"))
end

"""
    broadcast_across(acc, x; from = 0) -> Tensor, Array or number

Rank `from`'s `x` on every rank, shape and dtype included (Accelerate's `broadcast`, named apart
from Base's `broadcast(f, xs...)`). `from` is a rank, counted from 0 as `process_index` counts.
`x` is read on rank `from` only; on the other ranks it chooses the form of the result (a `Tensor`
gives a `Tensor` to close, an array an `Array`, a number a number) and may be `nothing`, which
gives values: a number where rank `from` sent a number (a 0-dimensional tensor), else an `Array`.
"""
function broadcast_across(acc::Accelerator, x; from::Integer = 0)
    world = num_processes(acc)
    0 <= from < world || throw(AccelError(ERR_INVALID_ARGUMENT,
        "broadcast_across: from = $from is not a rank: ranks count from 0, as process_index, " *
        "here 0:$(world - 1)"))
    if x === nothing
        pointer = @out Ptr{Cvoid} accel_broadcast(acc, C_NULL, Int32(from))
        return value_of(pointer, true)
    end
    collective(x) do t
        @out Ptr{Cvoid} accel_broadcast(acc, t, Int32(from))
    end
end

# The do-block forms of the collectives of a Tensor: the result lives for the block.
for name in (:gather, :pad_across_processes, :reduce_across, :broadcast_across, :gather_for_metrics)
    @eval $name(f, acc::Accelerator, t::Tensor; kwargs...) =
        with_handle(f, $name(acc, t; kwargs...))
end

"""
    gather_bytes(acc, data::AbstractVector{UInt8}) -> Vector{Vector{UInt8}}

Every rank's bytes (any length, may differ), in rank order: rank `r`'s at `[r + 1]`.
"""
function gather_bytes(acc::Accelerator, data::AbstractVector{UInt8})
    bytes = Vector{UInt8}(data)
    take_bytes_list(@out(Ptr{Cvoid}, accel_gather_object(acc, bytes, length(bytes))))
end

# The entries of an accel_bytes_list the library returned, copied; the list is freed.
function take_bytes_list(list::Ptr{Cvoid})
    try
        count = @out Csize_t accel_bytes_list_count(list)
        map(0:Int(count)-1) do i
            entry, size = Ref{Ptr{Cvoid}}(C_NULL), Ref{Csize_t}(0)
            @check accel_bytes_list_get(list, i, entry, size)
            copy(unsafe_wrap(Array, Ptr{UInt8}(entry[]), Int(size[])))
        end
    finally
        @acall accel_bytes_list_free(list)
    end
end

"""
    gather_object(acc, x) -> Vector

Accelerate's gather_object: every rank's `x` (any Julia value, serialised with the standard
library's Serialization; every rank runs the same program), in rank order: rank `r`'s at
`[r + 1]` (`for (r, x) in zip(0:num_processes(acc)-1, gather_object(acc, x))`).
"""
function gather_object(acc::Accelerator, x)
    io = IOBuffer()
    Serialization.serialize(io, x)
    [Serialization.deserialize(IOBuffer(b)) for b in gather_bytes(acc, take!(io))]
end

"""
    gather_for_metrics(acc, x) -> Tensor, Array or Vector

Gathers like `gather` (ranks may hold different numbers of samples) and, on a dataloader's last
batch, drops the samples duplicated to even it out: each sample of the dataset counts once. The
result has the form of `x`, as for `gather`.
"""
gather_for_metrics(acc::Accelerator, x) = collective(x) do t
    @out Ptr{Cvoid} accel_gather_for_metrics(acc, t)
end

"""
    split_between_processes(acc, items::AbstractVector; apply_padding = false) -> Vector
    split_between_processes(acc, x::Union{Tensor,AbstractArray}; apply_padding = false)
    split_between_processes(acc, d::Union{AbstractDict,NamedTuple}; apply_padding = false)

Accelerate's split_between_processes: this process's share of a list of `items` (prompts, file
names), a contiguous slice in order. With `n` items on `P` processes, rank `r` (from 0) takes the
`r + 1`-th slice; the first `n mod P` ranks take one item more, a rank past the end takes none
(Accelerate 1.15). `apply_padding` (on more than one process) repeats the list's last item until
every rank holds `cld(n, P)` items (none added when `P` divides `n`). With one process: every item,
unpadded. An empty list gives every rank nothing. Not a collective: each rank computes its share
alone. Three items on two ranks: `[1, 2]` and `[3]`, padded `[1, 2]` and `[3, 3]`.

A dictionary or a named tuple of them splits every value alike (values of different lengths are
`ERR_INVALID_ARGUMENT`, as Accelerate raises `ValueError`); a `Dict` gives a `Dict`.

A `Tensor` or an array of two or more dimensions is split the same way along the library's first
dimension (Julia's **last**), padded with copies of the last entry. A `Tensor` gives a `Tensor` (close it, or use the do-block form
`split_between_processes(acc, t) do mine ... end`), an array an `Array`.
"""
function split_between_processes(acc::Accelerator, items::AbstractVector; apply_padding::Bool = false)
    indices = split_indices(acc, length(items), apply_padding)
    items[firstindex(items) .+ indices]   # the library's indices count from 0
end

split_between_processes(acc::Accelerator, x::Union{Tensor,AbstractArray}; apply_padding::Bool = false) =
    collective(x) do t
        @out Ptr{Cvoid} accel_split_tensor_between_processes(acc, t, apply_padding)
    end
split_between_processes(f, acc::Accelerator, t::Tensor; kwargs...) =
    with_handle(f, split_between_processes(acc, t; kwargs...))

# A dictionary (or named tuple) of lists, arrays and tensors, as Accelerate splits a dict: every
# value alike, all of one length (a tensor's or array's length is its library rows).
function split_between_processes(acc::Accelerator, d::Union{AbstractDict,NamedTuple};
                                 apply_padding::Bool = false)
    lengths = unique(split_length(v) for v in values(d))
    length(lengths) <= 1 || throw(AccelError(ERR_INVALID_ARGUMENT,
        "split_between_processes: all values in the dictionary must have the same length " *
        "(found $(join(lengths, ", ")))"))
    part(v) = split_between_processes(acc, v; apply_padding = apply_padding)
    d isa NamedTuple ? map(part, d) : Dict(k => part(v) for (k, v) in d)
end

split_length(v::AbstractVector) = length(v)
split_length(a::AbstractArray) = size(a, ndims(a))   # the library's first dimension
split_length(t::Tensor) = (s = shape(t); isempty(s) ? 0 : s[1])   # a scalar: ERR_SHAPE next

# The 0-based indices of this process's items, by the buffer convention: the first call asks for
# the count, the second fills a buffer of that size.
function split_indices(acc::Accelerator, n::Integer, apply_padding::Bool)
    needed = Ref{Csize_t}(0)
    status = @acall accel_split_between_processes(acc, Int64(n), apply_padding, C_NULL, 0, needed)
    status == 0 && return Int64[]   # nothing to take
    status == Int32(ERR_BUFFER_TOO_SMALL) || throw_status(status)
    indices = Vector{Int64}(undef, needed[])
    got = Ref{Csize_t}(0)
    @check accel_split_between_processes(acc, Int64(n), apply_padding,
                                         indices, length(indices),
                                         got)
    resize!(indices, got[])
end

"""
    set_trigger!(acc)

Accelerate's set_trigger: raises this process's stop flag (an early stop, a NaN loss) for the next
`check_trigger`. Local: it communicates nothing and takes no lock, so one rank alone may call it.
"""
function set_trigger!(acc::Accelerator)
    @check accel_set_trigger(acc)
    nothing
end

"""
    check_trigger(acc) -> Bool

Accelerate's check_trigger, a collective: `true` on every rank when any rank called `set_trigger!`
since the last check, and every flag is lowered again (the next check is `false` unless a rank
sets it again). Call it at the same point of the loop on every rank, so that all stop at the same
step: `check_trigger(acc) && break`.
"""
function check_trigger(acc::Accelerator)
    @out Bool accel_check_trigger(acc)
end
