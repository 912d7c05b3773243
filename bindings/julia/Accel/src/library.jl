# Finding libaccel, checking its version, and calling it.
#
# The library is found at run time (no JLL package or Preferences without a registry): every
# function pointer is looked up once in __init__ and kept in a constant Ref per symbol, so a call is
# a ccall through a pointer, no lookup.

"The library versions this package supports: the ABI 0.2, as accel_version_number() counts."
const SUPPORTED_VERSIONS = (200, 300)   # [0.2.0, 0.3.0)

# SYMBOLS, every C function the package may call, is in generated.jl.

pointer_ref(name::Symbol) = Symbol("fp_", name)
for name in SYMBOLS
    @eval const $(pointer_ref(name)) = Ref{Ptr{Cvoid}}(C_NULL)
end

"The path of the libaccel that was loaded."
const LIBRARY_PATH = Ref{String}("")

"""
    @acall accel_name(arg::CType, ...)::ReturnType

A ccall of the libaccel function `accel_name` with the given C argument types. Handles
(`Tensor`, `Model`, ...) may be passed where the type is `Ptr{Cvoid}`: ccall keeps them alive
for the call and a closed one is refused before the call.
"""
macro acall(expr)
    Meta.isexpr(expr, :(::)) || error("@acall wants name(args...)::ReturnType")
    ccall_expr(expr.args[1], esc(expr.args[2]))
end

"""
    @check accel_name(arg::CType, ...)

@acall of a function that returns an accel_status: anything but ACCEL_OK throws an `AccelError`
with the library's message, read at once on the thread of the call (nothing yields in between).
"""
macro check(call)
    quote
        local status = $(ccall_expr(call, :Int32))
        status == 0 || throw_status(status)
        nothing
    end
end

"""
    @out T accel_name(arg::CType, ...)

@check of a function whose last parameter is one output of type `T`: the call gets a `Ref{T}`
as that parameter and the expression is its value.
"""
macro out(T, call)
    Meta.isexpr(call, :call) || error("@out wants T name(args...)")
    out = gensym("out")
    full = Expr(:call, call.args..., Expr(:(::), out, Expr(:curly, :Ptr, T)))
    quote
        local $(esc(out)) = Ref{$(esc(T))}()
        local status = $(ccall_expr(full, :Int32))
        status == 0 || throw_status(status)
        $(esc(out))[]
    end
end

# The ccall expression of the macros (one macro expanding another trips Julia 1.5's
# precompilation over the escaped arguments).
function ccall_expr(call, rettype)
    Meta.isexpr(call, :call) || error("libaccel calls are written name(args...)")
    name = call.args[1]
    name in SYMBOLS || error("$name is not in Accel.SYMBOLS")
    types, values = [], []
    for arg in call.args[2:end]
        Meta.isexpr(arg, :(::)) || error("argument $arg of $name has no C type")
        push!(values, esc(arg.args[1]))
        push!(types, esc(arg.args[2]))
    end
    :(ccall($(pointer_ref(name))[], $rettype, ($(types...),), $(values...)))
end

# The handle, or C_NULL and the loader's reason.
function try_open(path::AbstractString)
    try
        Libdl.dlopen(path, Libdl.RTLD_LAZY | Libdl.RTLD_GLOBAL), ""
    catch e
        C_NULL, sprint(showerror, e)
    end
end

function pkg_config_libdir()
    Sys.which("pkg-config") === nothing && return nothing
    out = IOBuffer()
    ok = success(pipeline(`pkg-config --variable=libdir accel`, stdout = out, stderr = devnull))
    dir = strip(String(take!(out)))
    ok && !isempty(dir) ? dir : nothing
end

# ACCEL_LIBRARY, else pkg-config's libdir for accel, else the system's search path. A library named
# by ACCEL_LIBRARY that does not open is an error at once: never silently another one.
function find_library()
    explicit = get(ENV, "ACCEL_LIBRARY", "")
    if !isempty(explicit)
        handle, reason = try_open(explicit)
        handle != C_NULL && return handle, explicit
        error("Accel.jl cannot open ACCEL_LIBRARY=$explicit: $reason")
    end
    tried = ["ACCEL_LIBRARY (not set)"]
    libdir = pkg_config_libdir()
    if libdir !== nothing
        for file in ("libaccel.so.0.2", "libaccel.so", "libaccel.dylib")
            path = joinpath(libdir, file)
            isfile(path) || continue
            handle, _ = try_open(path)
            handle != C_NULL && return handle, path
        end
        push!(tried, "pkg-config's libdir for accel ($libdir: no loadable libaccel there)")
    else
        push!(tried, "pkg-config (no pkg-config, or no accel.pc on PKG_CONFIG_PATH)")
    end
    for name in ("libaccel.so.0.2", "libaccel")
        handle, _ = try_open(name)
        handle != C_NULL && return handle, Libdl.dlpath(handle)
    end
    push!(tried, "the system's library search path (no libaccel.so.0.2)")
    error("Accel.jl cannot find libaccel. Tried, in order:\n  " * join(tried, "\n  ") *
          "\nSet ACCEL_LIBRARY to the library's path, or PKG_CONFIG_PATH to the directory of accel.pc.")
end

function load_library()
    handle, path = find_library()
    missing = String[]
    for name in SYMBOLS
        pointer = Libdl.dlsym(handle, name; throw_error = false)
        if pointer === nothing
            push!(missing, String(name))
        else
            getfield(@__MODULE__, pointer_ref(name))[] = pointer
        end
    end
    isempty(missing) || error("$path is not libaccel 0.2: it lacks $(join(missing, ", "))")
    number = Int(@acall accel_version_number()::UInt32)
    if !(SUPPORTED_VERSIONS[1] <= number < SUPPORTED_VERSIONS[2])
        error("$path is libaccel $(unsafe_string(@acall accel_version()::Cstring)); Accel.jl " *
              "$(PACKAGE_VERSION) supports [0.2.0, 0.3.0)")
    end
    LIBRARY_PATH[] = path
    nothing
end

"""
    library_version() -> VersionNumber

The version of the libaccel that was loaded (`accel_version`).
"""
library_version() = VersionNumber(unsafe_string(@acall accel_version()::Cstring))
