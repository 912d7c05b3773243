# Finding libaccel, checking its version, and calling it.
#
# The library is found at run time (no JLL package or Preferences without a registry): every
# function pointer is looked up once in __init__ and kept in a constant Ref per symbol, so a call is
# a ccall through a pointer, no lookup.

"The library versions this package supports: the ABI 0.2, as accel_version_number() counts."
const SUPPORTED_VERSIONS = (200, 300)   # [0.2.0, 0.3.0)

# generated.jl has, from accel.h: SYMBOLS (every C function), a typed Julia function per C function
# (`accel_x(args...) = ccall(fp_accel_x[], ...)` with the header's types) and the Ref `fp_accel_x`
# it calls through, which load_library fills.

pointer_ref(name::Symbol) = Symbol("fp_", name)

"The path of the libaccel that was loaded."
const LIBRARY_PATH = Ref{String}("")

"""
    @acall accel_name(args...)

A call of the generated function `accel_name` whose result is used as it is (a value, nothing,
or a status the caller looks at itself). Handles (`Tensor`, `Model`, ...) are passed as they
are: ccall keeps them alive for the call and a closed one is refused before the call.
"""
macro acall(call)
    esc(libaccel_call(call))
end

"""
    @check accel_name(args...)

A call of a generated function that returns an accel_status: anything but ACCEL_OK throws an
`AccelError` with the library's message, read at once on the thread of the call (nothing yields
in between).
"""
macro check(call)
    quote
        local status = $(esc(libaccel_call(call)))
        status == 0 || throw_status(status)
        nothing
    end
end

"""
    @out T accel_name(args...)

@check of a function whose last parameter is one output of type `T`: the call gets a `Ref{T}`
as that parameter and the expression is its value.
"""
macro out(T, call)
    out = gensym("out")
    full = Expr(:call, libaccel_call(call).args..., out)
    quote
        local $(esc(out)) = Ref{$(esc(T))}()
        local status = $(esc(full))
        status == 0 || throw_status(status)
        $(esc(out))[]
    end
end

# The call, once its name is known to be a libaccel function (a typo fails where it is written).
function libaccel_call(call)
    Meta.isexpr(call, :call) || error("libaccel calls are written accel_name(args...)")
    call.args[1] in SYMBOLS || error("$(call.args[1]) is not in Accel.SYMBOLS")
    call
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
    number = Int(@acall accel_version_number())
    if !(SUPPORTED_VERSIONS[1] <= number < SUPPORTED_VERSIONS[2])
        error("$path is libaccel $(unsafe_string(@acall accel_version())); Accel.jl " *
              "$(PACKAGE_VERSION) supports [0.2.0, 0.3.0)")
    end
    LIBRARY_PATH[] = path
    nothing
end

"""
    library_version() -> VersionNumber

The version of the libaccel that was loaded (`accel_version`).
"""
library_version() = VersionNumber(unsafe_string(@acall accel_version()))
