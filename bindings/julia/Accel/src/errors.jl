# The library's statuses and the one exception every failing call throws.

# Status, the header's status values as an @enum, is in generated.jl.

"""
    AccelError(status, message, cause = nothing)

What a failing libaccel call throws: `status` (a `Status`), the library's `message`, and, when
Julia code called by the library failed (a dataset function, a checkpoint callback), the original
exception and its backtrace in `cause` (`(exception, backtrace)`), shown with the error.
"""
struct AccelError <: Exception
    status::Status
    message::String
    cause::Any
end
AccelError(status::Status, message::AbstractString) = AccelError(status, String(message), nothing)

function Base.showerror(io::IO, e::AccelError)
    print(io, "AccelError(", e.status, "): ", e.message)
    if e.cause !== nothing
        exception, backtrace = e.cause
        print(io, "\ncaused by: ")
        showerror(io, exception, backtrace)
    end
end

status_of(code::Integer) =
    Integer(typemin(Status)) <= code <= Integer(typemax(Status)) ? Status(code) : ERR_INTERNAL

# Reads the message of the call that just failed on this thread: called right after the ccall,
# before anything that could yield or make another libaccel call.
@noinline function throw_status(code::Integer, cause = nothing)
    message = unsafe_string(@acall accel_last_error_message())
    recorded = @acall accel_last_error_status()
    if recorded != code   # the message is another call's: say so rather than mislead
        message = "(no message: this thread's last error is $(status_of(recorded)), not $(status_of(code)))"
    end
    throw(AccelError(status_of(code), message, cause))
end

"""
    status_name(status) -> String

The library's name of a status ("ACCEL_ERR_SHAPE").
"""
status_name(status::Union{Status,Integer}) =
    unsafe_string(@acall accel_status_name(Int32(status)))
