# Collectives: every rank makes the same calls in the same order.

"""
    gather(acc, t) -> Tensor

Every rank's tensor concatenated along the library's first dimension (Julia's **last**), in rank
order, on every rank. Shapes and dtypes must agree (see `pad_across_processes`). Arrays and
numbers are converted to tensors.
"""
gather(acc::Accelerator, t) = with_tensors((t,)) do (x,)
    pointer = @out Ptr{Cvoid} accel_gather(acc::Ptr{Cvoid}, x::Ptr{Cvoid})
    Tensor(pointer, Val(:own))
end

"""
    pad_across_processes(acc, t; dim = ndims(t), pad_value = 0, pad_first = false) -> Tensor

Pads Julia dimension `dim` (by default the last: the library's first, Accelerate's dim 0) to the
largest size any rank has there, with `pad_value`, at the end or with `pad_first` at the start.
"""
function pad_across_processes(acc::Accelerator, t; dim::Union{Nothing,Integer} = nothing,
                              pad_value::Real = 0, pad_first::Bool = false)
    with_tensors((t,)) do (x,)
        n = ndims(x)
        d = dim === nothing ? n : Int(dim)
        1 <= d <= n || throw(AccelError(ERR_INVALID_ARGUMENT,
            "pad_across_processes: dim $d is not a dimension of a $n-dimensional tensor"))
        pointer = @out Ptr{Cvoid} accel_pad_across_processes(acc::Ptr{Cvoid}, x::Ptr{Cvoid},
                                                             Int64(n - d)::Int64,
                                                             Float64(pad_value)::Float64, pad_first::Bool)
        Tensor(pointer, Val(:own))
    end
end

const REDUCTIONS = (sum = 0, mean = 1, max = 2, min = 3)

"""
    reduce(acc, t; reduction = :sum) -> Tensor

The element-wise `:sum`, `:mean`, `:max` or `:min` of every rank's tensor, on every rank
(Accelerate's `reduce`).
"""
Base.reduce(acc::Accelerator, t::Tensor; reduction::Symbol = :sum) = reduce_across(acc, t, reduction)
# Base has reduce(op, a::Number) and reduce(op, A::AbstractArray): these are the more specific.
Base.reduce(acc::Accelerator, x::Number; reduction::Symbol = :sum) = reduce_across(acc, x, reduction)
Base.reduce(acc::Accelerator, A::AbstractArray; reduction::Symbol = :sum) = reduce_across(acc, A, reduction)

function reduce_across(acc::Accelerator, t, reduction::Symbol)
    haskey(REDUCTIONS, reduction) || throw(AccelError(ERR_INVALID_ARGUMENT,
        "reduce: reduction $(repr(reduction)) is not one of :sum, :mean, :max, :min"))
    with_tensors((t,)) do (x,)
        pointer = @out Ptr{Cvoid} accel_reduce(acc::Ptr{Cvoid}, x::Ptr{Cvoid},
                                               Int32(REDUCTIONS[reduction])::Int32)
        Tensor(pointer, Val(:own))
    end
end

"""
    broadcast(acc, t; from = 0) -> Tensor

Rank `from`'s tensor, on every rank (shape and dtype included). `t` is read on rank `from` only
and may be `nothing` on the others.
"""
function Base.broadcast(acc::Accelerator, t; from::Integer = 0)
    with_tensors(t === nothing ? () : (t,)) do tensors
        source = isempty(tensors) ? C_NULL : tensors[1]
        pointer = @out Ptr{Cvoid} accel_broadcast(acc::Ptr{Cvoid}, source::Ptr{Cvoid}, Int32(from)::Int32)
        Tensor(pointer, Val(:own))
    end
end

"""
    gather_bytes(acc, data::AbstractVector{UInt8}) -> Vector{Vector{UInt8}}

Every rank's bytes (any length, may differ), in rank order.
"""
function gather_bytes(acc::Accelerator, data::AbstractVector{UInt8})
    bytes = Vector{UInt8}(data)
    list = @out Ptr{Cvoid} accel_gather_object(acc::Ptr{Cvoid}, bytes::Ptr{Cvoid}, length(bytes)::Csize_t)
    try
        count = @out Csize_t accel_bytes_list_count(list::Ptr{Cvoid})
        map(0:Int(count)-1) do i
            entry, size = Ref{Ptr{Cvoid}}(C_NULL), Ref{Csize_t}(0)
            @check accel_bytes_list_get(list::Ptr{Cvoid}, i::Csize_t, entry::Ptr{Ptr{Cvoid}},
                                        size::Ptr{Csize_t})
            copy(unsafe_wrap(Array, Ptr{UInt8}(entry[]), Int(size[])))
        end
    finally
        @acall accel_bytes_list_free(list::Ptr{Cvoid})::Cvoid
    end
end

"""
    gather_object(acc, x) -> Vector

Accelerate's gather_object: every rank's `x` (any Julia value, serialised with the standard
library's Serialization; every rank runs the same program), in rank order.
"""
function gather_object(acc::Accelerator, x)
    io = IOBuffer()
    Serialization.serialize(io, x)
    [Serialization.deserialize(IOBuffer(b)) for b in gather_bytes(acc, take!(io))]
end

"""
    gather_for_metrics(acc, t) -> Tensor

Gathers like `gather` (ranks may hold different numbers of samples) and, on a dataloader's last
batch, drops the samples duplicated to even it out: each sample of the dataset counts once.
"""
gather_for_metrics(acc::Accelerator, t) = with_tensors((t,)) do (x,)
    pointer = @out Ptr{Cvoid} accel_gather_for_metrics(acc::Ptr{Cvoid}, x::Ptr{Cvoid})
    Tensor(pointer, Val(:own))
end
