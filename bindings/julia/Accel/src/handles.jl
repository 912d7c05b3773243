# Ownership of library handles, one rule for every type.
#
# A handle is a mutable struct whose `ptr` field holds the library's pointer. It is freed by
# `close` (idempotent) or, when forgotten, by its finalizer (the header allows a free from any
# thread). ccall converts a handle passed as Ptr{Cvoid} through the two methods below, which keeps
# it alive for the whole call (a finalizer can never free a handle a call is using) and refuses a
# closed one before the call. Closing a handle while another task is using it is the program's
# error, as for Julia's own IO.

abstract type Handle end

Base.cconvert(::Type{Ptr{Cvoid}}, h::Handle) = h
function Base.unsafe_convert(::Type{Ptr{Cvoid}}, h::Handle)
    pointer = h.ptr
    pointer == C_NULL && throw(AccelError(ERR_STATE, "$(nameof(typeof(h))) used after close"))
    pointer
end

# An optional handle argument: `nothing` is NULL.
optional(h) = h === nothing ? C_NULL : h

# The argument of a `const accel_x* const*` parameter: ccall keeps the handles alive for the call
# and refuses a closed one, as for a single handle.
struct HandleArray
    handles::Any
    pointers::Vector{Ptr{Cvoid}}
end
HandleArray(handles) = HandleArray(handles, Ptr{Cvoid}[Base.unsafe_convert(Ptr{Cvoid}, h) for h in handles])
Base.cconvert(::Type{Ptr{Ptr{Cvoid}}}, a::HandleArray) = a
Base.unsafe_convert(::Type{Ptr{Ptr{Cvoid}}}, a::HandleArray) = pointer(a.pointers)
Base.length(a::HandleArray) = length(a.pointers)

"Whether `close` has been called on the handle."
Base.isopen(h::Handle) = h.ptr != C_NULL

"""
    close(handle)

Frees the library object now instead of when the garbage collector finds it. Idempotent; any
later use throws an `AccelError` (`ERR_STATE`, "used after close").
"""
Base.close(h::Handle) = release!(h)

# What close and the finalizer do for every type (a type's own close may do more first).
function release!(h::Handle)
    pointer = h.ptr
    h.ptr = C_NULL
    pointer == C_NULL || free_handle(h, pointer)
    nothing
end

# The do-block form of every constructor: `Tensor(A) do t ... end` closes `t` at the end.
function with_handle(f, h::Handle)
    try
        f(h)
    finally
        close(h)
    end
end

# Takes a pointer the library returned through `out`, with a finalizer.
own(h::Handle) = finalizer(release!, h)

function Base.show(io::IO, h::Handle)
    print(io, nameof(typeof(h)), isopen(h) ? "" : " (closed)")
end
