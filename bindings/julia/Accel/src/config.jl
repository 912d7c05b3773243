# Configuration: Accelerate's YAML keys and libaccel's own, validated by the library.

"""
    Config(; settings...)
    Config(path::AbstractString; settings...)

A set of settings by key (see accel.h, "Configuration"): `Config(mixed_precision = "bf16",
gradient_accumulation_steps = 4)`. With `path`, an Accelerate YAML file is loaded first. An
unknown key or a bad value throws an `AccelError` (`ERR_CONFIG`) naming the key. Precedence:
settings made here > environment variables > the file > defaults.

`cfg[key] = value` sets, `cfg[key]` reads the resolved value as text, `dump_yaml(cfg)` gives
every key with its value and source.
"""
mutable struct Config <: Handle
    ptr::Ptr{Cvoid}
    function Config(; settings...)
        cfg = own(new(@out(Ptr{Cvoid}, accel_config_new())))
        for (key, value) in settings
            cfg[key] = value
        end
        cfg
    end
end

function Config(path::AbstractString; settings...)
    cfg = Config()
    try
        load_file!(cfg, path)
        for (key, value) in settings
            cfg[key] = value
        end
    catch
        close(cfg)
        rethrow()
    end
    cfg
end
Config(f::Function, args...; settings...) = with_handle(f, Config(args...; settings...))

free_handle(::Config, p) = @acall accel_config_free(p)

function Base.setindex!(cfg::Config, value, key::Union{AbstractString,Symbol})
    @check accel_config_set(cfg, c_text(key), c_text(value))
    value
end

function Base.getindex(cfg::Config, key::Union{AbstractString,Symbol})
    name = c_text(key)
    read_text() do buffer, capacity, size
        @acall accel_config_get(cfg, name, buffer, capacity, size)
    end
end

"""
    load_file!(cfg, path = nothing)

Loads an Accelerate YAML (or JSON) file into the file layer, replacing one loaded before.
`nothing` is Accelerate's default location (\$HF_HOME/accelerate/default_config.yaml, ...): when
none exists nothing is loaded. A bad file throws and leaves `cfg` unchanged.
"""
function load_file!(cfg::Config, path::Union{Nothing,AbstractString} = nothing)
    file = path === nothing ? C_NULL : c_text(path)
    @check accel_config_load_file(cfg, file)
    cfg
end

"""
    dump_yaml(cfg) -> String

The effective configuration as YAML: every key, its resolved value, and its source as a comment.
"""
function dump_yaml(cfg::Config)
    read_text() do buffer, capacity, size
        @acall accel_config_dump(cfg, buffer, capacity, size)
    end
end
