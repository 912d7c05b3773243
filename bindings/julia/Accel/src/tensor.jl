# Tensors, and the one layout rule between Julia's arrays and the library's.
#
# Julia arrays are column-major, the library's tensors row-major. A tensor is made from an array's
# memory as it is, with the dimensions reversed: a Julia array of size (28, 28, N) is the library's
# tensor of shape [N, 28, 28], and the first index of the library (the sample) is Julia's last.
# `Array(t)` applies the same rule back. No transposing copy, in either direction.

"""
    DType

Element types of the library (`Accel.F32`, `Accel.BF16`, ...). Julia's `Float32`, `Float64`,
`Float16`, `Int64`, `Int32`, `Int16`, `Int8`, `UInt8` and `Bool` map to them one to one; `BF16`
has no Julia type here and is read and written as raw bytes (`Tensor(BF16, bytes, dims)`, `rawdata`).
"""
@enum DType::Int32 F32 = 1 F64 = 2 F16 = 3 BF16 = 4 I64 = 5 I32 = 6 I16 = 7 I8 = 8 U8 = 9 BOOL = 10

const ELEMENT_TYPES = (Float32 => F32, Float64 => F64, Float16 => F16, Int64 => I64, Int32 => I32,
                       Int16 => I16, Int8 => I8, UInt8 => U8, Bool => BOOL)

"The Julia element types a tensor converts from and to."
const Element = Union{Float32,Float64,Float16,Int64,Int32,Int16,Int8,UInt8,Bool}

# One method per type, so that the dtype of a known element type is a constant.
for (T, d) in ELEMENT_TYPES
    @eval dtype_of(::Type{$T}) = $d
end
function julia_type(dtype::DType)
    i = findfirst(p -> last(p) === dtype, ELEMENT_TYPES)
    i === nothing && throw(AccelError(ERR_DTYPE, "$dtype has no Julia element type: use rawdata"))
    first(ELEMENT_TYPES[i])
end

"""
    Tensor(A::AbstractArray)
    Tensor(x::Number)
    Tensor(dtype::DType, bytes::AbstractVector{UInt8}, dims)

A library tensor holding a copy of `A`, with the dimensions reversed (see the layout rule: size
(28, 28, N) in Julia is the library's [N, 28, 28]). A number makes a scalar (0 dimensions). The
third form takes raw little-endian elements of any dtype (BF16 included), `dims` in Julia's order.

`Array(t)` copies back; `size(t)`, `ndims(t)`, `length(t)` and `eltype(t)` are Julia's view of
it, `Accel.shape(t)` the library's (row-major) shape, `only(t)` or `t[]` the value of a
one-element tensor.
"""
mutable struct Tensor <: Handle
    ptr::Ptr{Cvoid}
    lent::Bool   # the library's for one callback (a Trainer step's batch): never freed here
    Tensor(pointer::Ptr{Cvoid}, ::Val{:own}) = own(new(pointer, false))
    # No finalizer: whoever lends it sets `ptr` to C_NULL when the callback returns.
    Tensor(pointer::Ptr{Cvoid}, ::Val{:lent}) = new(pointer, true)
end

free_handle(t::Tensor, p) = t.lent ? nothing : @acall accel_tensor_free(p)

# `data` is anything ccall passes as a pointer (an Array, a Ref). The shape is a tuple in a Ref,
# not a Vector, and a number's data a Ref, not a 0-dimensional Array: a one-element tensor costs
# the library's call, one small object and its finalizer (bench/calls.jl), nothing more.
@inline function make_tensor(data, bytes::Integer, dtype::DType, juliadims::NTuple{N,Integer}) where {N}
    shape = N == 0 ? C_NULL : Ref(ntuple(i -> Int64(juliadims[N+1-i]), Val(N)))
    pointer = @out Ptr{Cvoid} accel_tensor_from_data(data, bytes, Int32(dtype), shape, N)
    Tensor(pointer, Val(:own))
end

Tensor(A::Array{T}) where {T<:Element} = make_tensor(A, sizeof(A), dtype_of(T), size(A))
Tensor(A::AbstractArray{T}) where {T<:Element} = Tensor(Array{T}(A))
Tensor(A::AbstractArray{T}) where {T} = throw(AccelError(ERR_DTYPE,
    "Julia element type $T has no library dtype (use one of $(join(first.(ELEMENT_TYPES), ", ")))"))
Tensor(x::T) where {T<:Element} = make_tensor(Ref(x), sizeof(T), dtype_of(T), ())
Tensor(x::Number) = throw(AccelError(ERR_DTYPE,
    "Julia number type $(typeof(x)) has no library dtype (use one of $(join(first.(ELEMENT_TYPES), ", ")))"))
Tensor(t::Tensor) = t
function Tensor(dtype::DType, bytes::AbstractVector{UInt8}, dims)
    data = Vector{UInt8}(bytes)
    make_tensor(data, length(data), dtype, Tuple(dims))
end
Tensor(f::Function, args...) = with_handle(f, Tensor(args...))

"""
    dtype(t) -> DType

The tensor's element type as the library names it.
"""
function dtype(t::Tensor)
    DType(@out Int32 accel_tensor_dtype(t))
end

Base.eltype(t::Tensor) = julia_type(dtype(t))

"""
    shape(t) -> Vector{Int64}

The library's shape (row-major order: samples first). `size(t)` is the same reversed.
"""
function shape(t::Tensor)
    count = Ref{Csize_t}(0)
    @check accel_tensor_dim_count(t, count)
    dims = Vector{Int64}(undef, count[])
    @check accel_tensor_shape(t, dims, length(dims), count)
    dims
end

Base.size(t::Tensor) = Tuple(Int.(reverse(shape(t))))
Base.ndims(t::Tensor) = length(shape(t))
function Base.length(t::Tensor)
    Int(@out Int64 accel_tensor_element_count(t))
end

"""
    datasize(t) -> Int

The size of the tensor's elements in bytes.
"""
function datasize(t::Tensor)
    Int(@out Csize_t accel_tensor_data_size(t))
end

"""
    dtype_size(dtype) -> Int

The size of one element of `dtype` in bytes.
"""
dtype_size(d::DType) = Int(@acall accel_dtype_size(Int32(d)))

function copy_out!(dest, t::Tensor)
    written = Ref{Csize_t}(0)
    @check accel_tensor_to_data(t, dest, sizeof(dest), written)
    dest
end

function Base.Array(t::Tensor)
    T = eltype(t)
    copy_out!(Array{T}(undef, size(t)), t)
end

function Base.Array{T}(t::Tensor) where {T}
    A = Array(t)
    eltype(A) === T ? A : convert(Array{T}, A)
end

"""
    rawdata(t) -> Vector{UInt8}

The tensor's elements as bytes, row-major (the library's order; for BF16 and for interop).
"""
rawdata(t::Tensor) = copy_out!(Vector{UInt8}(undef, datasize(t)), t)

"""
    only(t), t[]

The value of a one-element tensor, as Julia reads a one-element array: a Float64 for
floating-point tensors, a Bool for Bool ones, an Int64 for the other integers. More than one
element throws `ERR_SHAPE`.
"""
function Base.only(t::Tensor)
    d = dtype(t)
    d in (F32, F64, F16, BF16) && return @out Float64 accel_tensor_item_f64(t)
    v = @out Int64 accel_tensor_item_i64(t)
    d == BOOL ? v != 0 : v
end
Base.getindex(t::Tensor) = only(t)

# Deprecated in 0.3 (removed in 0.4): Julia writes only(t) or t[]. Not exported any more.
function item(t::Tensor)
    Base.depwarn("`Accel.item(t)` is deprecated, use `only(t)` or `t[]`", :item)
    d = dtype(t)
    d in (F32, F64, F16, BF16) ? (@out Float64 accel_tensor_item_f64(t)) :
    (@out Int64 accel_tensor_item_i64(t))
end
function item(::Type{T}, t::Tensor) where {T<:Union{Float64,Int64}}
    Base.depwarn("`Accel.item($T, t)` is deprecated, use `$T(only(t))`", :item)
    T === Float64 ? (@out Float64 accel_tensor_item_f64(t)) : (@out Int64 accel_tensor_item_i64(t))
end

function Base.show(io::IO, t::Tensor)
    if isopen(t)
        print(io, "Tensor{", dtype(t), "}(size ", size(t), ")")
    else
        print(io, "Tensor (closed)")
    end
end

"""
    wrap_torch(pointer::Ptr{Cvoid}) -> Tensor

Interop, no copy: a tensor sharing the storage of the LibTorch `at::Tensor` at `pointer` (as
Torch.jl holds them), from the very LibTorch build libaccel links. Anything else is undefined
behaviour: the one call that trusts its argument.
"""
function wrap_torch(pointer::Ptr{Cvoid})
    Tensor(@out(Ptr{Cvoid}, accel_tensor_wrap_torch(pointer)), Val(:own))
end

"""
    set_requires_grad!(t, on = true)

Whether autograd records operations on `t` (PyTorch's `requires_grad_`), so that a tensor made
from data can be lent to a model as a parameter (`add_parameter!`). An autograd leaf only.
"""
function set_requires_grad!(t::Tensor, on::Bool = true)
    @check accel_tensor_set_requires_grad(t, on)
    t
end

"""
    check_torch(version; cxx11_abi = -1, cpu_allocator = C_NULL)

Checks that a program's own LibTorch (Torch.jl's) is the very build libaccel runs on before a
tensor crosses with `wrap_torch`: `version` as that LibTorch says ("2.11.0"), `cxx11_abi` its
`_GLIBCXX_USE_CXX11_ABI` (-1 when unknown), `cpu_allocator` the address of
`c10::GetCPUAllocator` as the program sees it. A mismatch throws `ERR_UNSUPPORTED` naming both.
"""
function check_torch(version::AbstractString; cxx11_abi::Integer = -1, cpu_allocator::Ptr{Cvoid} = C_NULL)
    @check accel_torch_check(c_text(version), Int32(cxx11_abi), cpu_allocator)
    nothing
end

"""
    borrow_torch(t) -> Ptr{Cvoid}

Interop, no copy: the `at::Tensor*` inside `t`, valid while `t` is open.
"""
function borrow_torch(t::Tensor)
    @out(Ptr{Cvoid}, accel_tensor_borrow_torch(t))
end

# Takes every entry of a library-owned tensor list, then frees the list.
function take_tensor_list(list::Ptr{Cvoid})
    try
        count = @out Csize_t accel_tensor_list_count(list)
        tensors = Vector{Tensor}(undef, count)
        for i in 1:count
            pointer = @out Ptr{Cvoid} accel_tensor_list_get(list, (i - 1))
            tensors[i] = Tensor(pointer, Val(:own))
        end
        tensors
    finally
        @acall accel_tensor_list_free(list)
    end
end

# Tensors for a call: arrays and numbers are converted (and closed after the call by `f`).
function with_tensors(f, inputs)
    made = Tensor[]
    tensors = map(inputs) do x
        x isa Tensor && return x
        t = Tensor(x)
        push!(made, t)
        t
    end
    try
        f(tensors)
    finally
        foreach(close, made)
    end
end
