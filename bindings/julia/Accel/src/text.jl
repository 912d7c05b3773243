# Text in and out of the library.

# The buffer convention for text: `call(buf, capacity, out_size)` returns a status; the first try
# uses a small buffer, a second one the size the library asked for.
function read_text(call)
    size = Ref{Csize_t}(0)
    buffer = Vector{UInt8}(undef, 256)
    status = call(buffer, length(buffer), size)
    if status == Int32(ERR_BUFFER_TOO_SMALL)
        resize!(buffer, size[])
        status = call(buffer, length(buffer), size)
    end
    status == 0 || throw_status(status)
    String(buffer[1:size[]-1])
end

"""
The text form of an option value, as the YAML file would hold it: `true`/`false`, integers,
floating-point numbers in Julia's shortest round-trip form, strings and symbols as they are.
"""
option_text(value::Bool) = value ? "true" : "false"
option_text(value::Integer) = string(value)
function option_text(value::AbstractFloat)
    isfinite(value) || throw(ArgumentError("option value $value is not a finite number"))
    # Float32 prints its exponent as "f" (1.0f-5), which C does not read.
    value isa Float32 ? replace(string(value), 'f' => 'e') : string(Float64(value))
end
option_text(value::Union{AbstractString,Symbol}) = String(value)
option_text(value) = throw(ArgumentError(
    "option values are Bool, integers, floating-point numbers, strings or symbols; got $(typeof(value))"))

# Optional text (a NULL `const char*` when `nothing`).
optional_text(value) = value === nothing ? C_NULL : c_text(value)

# Text the library reads: NUL inside would cut it short, so it is refused.
function c_text(value)
    text = option_text(value)
    occursin('\0', text) && throw(ArgumentError("text given to libaccel contains a NUL byte: $(repr(text))"))
    text
end
