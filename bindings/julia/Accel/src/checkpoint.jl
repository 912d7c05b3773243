# Checkpoints: weights as safetensors, the whole training state, and the program's own objects.

"""
    save_model(acc, model, dir; max_shard_size = nothing)

Accelerate's save_model: the model's parameters and buffers as safetensors in `dir`
(`model.safetensors`, or shards and an index above `max_shard_size`, "10GB" by default). Only the
main process writes; every process returns once it is written.
"""
function save_model(acc::Accelerator, model::Model, dir::AbstractString;
                    max_shard_size::Union{Nothing,AbstractString} = nothing)
    @check accel_save_model(acc, model, c_text(dir), optional_text(max_shard_size))
    dir
end

"""
    load_checkpoint_in_model(model, path)

Accelerate's load_checkpoint_in_model: weights from a safetensors file, an index, or a directory
holding either. Names, shapes and dtypes must match (else `ERR_SHAPE` and the model is unchanged).
"""
function load_checkpoint_in_model(model::Model, path::AbstractString)
    @check accel_load_checkpoint_in_model(model, c_text(path))
    model
end

"""
    LoadReport

What `load_pretrained!` found and did, in the checkpoint's naming (transformers' keys), each list
sorted: `missing` (the model's tensors no checkpoint tensor filled: they keep their
initialisation), `unexpected` (checkpoint tensors not used), `mismatched` (left for their shape
with `ignore_mismatched_sizes`); `warnings`, transformers' WARNING messages (what its default
verbosity shows, "" when none), and `text`, all its messages, each starting with "WARNING: " or
"INFO: ".
"""
struct LoadReport
    missing::Vector{String}
    unexpected::Vector{String}
    mismatched::Vector{String}
    warnings::String
    text::String
end

function Base.show(io::IO, ::MIME"text/plain", r::LoadReport)
    print(io, "LoadReport: ", length(r.missing), " missing, ", length(r.unexpected),
          " unexpected, ", length(r.mismatched), " mismatched")
    for (label, names) in (("missing", r.missing), ("unexpected", r.unexpected),
                           ("mismatched", r.mismatched))
        isempty(names) || print(io, "\n  ", label, ": ", join(names, ", "))
    end
end

"""
    load_pretrained!(model, path; strict = false, base_model_prefix = nothing,
                     ignore_mismatched_sizes = false, model_name = nothing,
                     architecture_matches = false) -> LoadReport
    load_pretrained!(model, path, options::AbstractString) -> LoadReport

Loads a pretrained checkpoint (a safetensors file, an index, or a directory holding either) into
`model` as transformers' from_pretrained does, and reports what it did (`LoadReport`):

- not `strict`: the model's tensors the checkpoint lacks keep their initialisation (`missing`)
  and checkpoint tensors the model lacks are left (`unexpected`), the fine-tune of a new head;
  `strict = true` makes any of them an error (`ERR_INVALID_ARGUMENT`, `ERR_SHAPE` for shapes);
- `base_model_prefix` ("bert"): a checkpoint of the base model ("encoder.x") loads into a model
  holding it under the prefix ("bert.encoder.x"), and a task checkpoint ("bert.x") into the base
  model ("x");
- `ignore_mismatched_sizes`: a tensor of another shape keeps the model's and is reported, where
  otherwise it is `ERR_SHAPE`;
- `model_name` ("the model") and `architecture_matches` (the checkpoint was made for this very
  architecture: unexpected tensors are then a warning, else info) only word the report.

Floating tensors are cast to the model's dtype (fp16 and bf16 into fp32 and back); a floating
tensor for an integer one, or the other way, is `ERR_DTYPE`. On any error found before the
tensors' bytes are read (files, headers, dtypes, the plan) the model is unchanged; a read failing
midway is `ERR_IO` saying the model is partly loaded. A missing or corrupt file is `ERR_IO`. The string form takes the options as
the library writes them, `"strict=false base_model_prefix=bert"`.

    report = load_pretrained!(model, "bert-base/model.safetensors"; base_model_prefix = "bert")
    isempty(report.warnings) || @warn report.warnings
"""
function load_pretrained!(model::Model, path::AbstractString; options...)
    load_pretrained!(model, path, pretrained_options(; options...))
end

function load_pretrained!(model::Model, path::AbstractString, options::AbstractString)
    read_report(@out Ptr{Cvoid} accel_load_pretrained(model, c_text(path), c_text(options)))
end

"""
    load_pretrained!(map, model, path; options...) -> LoadReport
    load_pretrained!(map, model, path, options::AbstractString) -> LoadReport

`load_pretrained!` with the checkpoint's names mapped first, as transformers' `key_mapping`
(`accel_load_pretrained_mapped`): `map(name)` gets each checkpoint tensor's name (once, in name
order, before any byte is read) and returns the model's name for it as a `String`, or `nothing` to
leave it unused (reported in `unexpected` under its own name). The new names then follow every
rule of `load_pretrained!`, `base_model_prefix` included, and the report uses them.

Each failure leaves the model unchanged: what `map` throws is rethrown as it is; a name that is
empty, holds a NUL or is not a string is an `ArgumentError`; a name longer than 4095 bytes is
`ERR_CALLBACK` naming the checkpoint tensor; two tensors given one name `ERR_INVALID_ARGUMENT`
naming both.

    report = load_pretrained!(model, "ckpt"; base_model_prefix = "bert") do name
        startswith(name, "lm_head.") ? nothing :
            replace(replace(name, "layers." => "layer."), ".gamma" => ".weight")
    end
"""
function load_pretrained!(map::Function, model::Model, path::AbstractString; options...)
    load_pretrained!(map, model, path, pretrained_options(; options...))
end

function load_pretrained!(map::Function, model::Model, path::AbstractString,
                          options::AbstractString)
    state = NameMap(map, nothing)
    report = Ref{Ptr{Cvoid}}(C_NULL)
    status = GC.@preserve state begin
        @acall accel_load_pretrained_mapped(model, c_text(path), c_text(options),
                                            NAME_MAP_TRAMPOLINE[], pointer_from_objref(state),
                                            report)
    end
    state.failure === nothing || throw(state.failure)   # map's own exception, as it was
    status == 0 || throw_status(status)
    read_report(report[])
end

function pretrained_options(; strict::Bool = false,
                            base_model_prefix::Union{Nothing,AbstractString} = nothing,
                            ignore_mismatched_sizes::Bool = false,
                            model_name::Union{Nothing,AbstractString} = nothing,
                            architecture_matches::Bool = false)
    options = Pair{String,Any}["strict" => strict,
                               "ignore_mismatched_sizes" => ignore_mismatched_sizes,
                               "architecture_matches" => architecture_matches]
    base_model_prefix === nothing || push!(options, "base_model_prefix" => base_model_prefix)
    model_name === nothing || push!(options, "model_name" => model_name)
    join((load_option(key, value) for (key, value) in options), " ")
end

# The report's names and messages; the report is freed.
function read_report(report::Ptr{Cvoid})
    try
        names(kind) =
            String.(take_bytes_list(@out(Ptr{Cvoid}, accel_load_report_keys(report, kind))))
        messages(warnings_only) = read_text() do buffer, capacity, size
            @acall accel_load_report_text(report, warnings_only, buffer, capacity, size)
        end
        LoadReport(names("missing"), names("unexpected"), names("mismatched"),
                   messages(true), messages(false))
    finally
        @acall accel_load_report_free(report)
    end
end

# A name map and the exception it threw.
mutable struct NameMap
    f::Function
    failure::Any
end

function name_map_trampoline(name::Ptr{UInt8}, out::Ptr{UInt8}, capacity::Csize_t,
                             user_data::Ptr{Cvoid})::Int32
    state = unsafe_pointer_to_objref(user_data)::NameMap
    try
        checkpoint_name = unsafe_string(name)
        mapped = state.f(checkpoint_name)
        text = mapped === nothing ? "" : String(mapped_name(checkpoint_name, mapped))
        # With its NUL; a name that does not fit goes without it, and the library names it.
        n = min(ncodeunits(text), Int(capacity))
        GC.@preserve text unsafe_copyto!(out, pointer(text), n)
        n < capacity && unsafe_store!(out, 0x00, n + 1)
        return Int32(0)
    catch exception
        state.failure = exception
        return Int32(1)
    end
end

function mapped_name(checkpoint_name, mapped)
    what = "the name map's name for $(repr(checkpoint_name))"
    mapped isa AbstractString ||
        throw(ArgumentError("$what is $(repr(mapped)), not a String or nothing"))
    isempty(mapped) && throw(ArgumentError("$what is empty (nothing leaves it unused)"))
    '\0' in mapped && throw(ArgumentError("$what holds a NUL"))
    mapped
end

const NAME_MAP_TRAMPOLINE = Ref{Ptr{Cvoid}}(C_NULL)

# "key=value" of the options string; a value the library would split (a space, a comma) is refused
# here rather than read as another option.
function load_option(key, value)
    text = c_text(value)
    any(c -> c in (' ', ',', '\t', '\n'), text) &&
        throw(ArgumentError("load_pretrained! option $key=$(repr(text)): the library's " *
                            "options hold no spaces, commas, tabs or newlines"))
    "$key=$text"
end

"""
    save_state(acc, dir = nothing)
    load_state(acc, dir = nothing)

Accelerate's save_state/load_state: every prepared object, the random states, the dataloaders'
cursors and the registered objects, with a manifest of checksums. `nothing` uses the project
settings (`project_dir`, `automatic_checkpoint_naming`, `total_limit`). Collectives. A failing
registered callback throws `ERR_CALLBACK` with its exception as `cause`.
"""
save_state(acc::Accelerator, dir::Union{Nothing,AbstractString} = nothing) =
    check_with_callbacks(acc, @acall(accel_save_state(acc, optional_text(dir))))

"""
    load_state(acc, dir = nothing)

Restores a `save_state` directory into the prepared objects (the same kinds, prepared in the same
order) and the registered objects; checksums are verified first. See `save_state`.
"""
load_state(acc::Accelerator, dir::Union{Nothing,AbstractString} = nothing) =
    check_with_callbacks(acc, @acall(accel_load_state(acc, optional_text(dir))))

# The status of a call that ran the registered callbacks: a failure carries what one of them threw.
function check_with_callbacks(acc::Accelerator, status::Int32)
    status == 0 || throw_status(status, take_checkpoint_failure!(acc))
    nothing
end

function take_checkpoint_failure!(acc::Accelerator)
    for object in acc.checkpointed
        failure = object.failure
        object.failure = nothing
        failure === nothing || return failure
    end
    nothing
end

"""
    register_for_checkpointing(acc; save, load)

Saves the program's own state with every checkpoint (Accelerate's register_for_checkpointing):
`save(io)` writes it to an `IO` on the main process during `save_state`; `load(bytes)` gets those
bytes back on every process during `load_state`. Register the same objects in the same order
before loading.

    step = Ref(0)
    register_for_checkpointing(acc; save = io -> write(io, step[]),
                                    load = bytes -> (step[] = reinterpret(Int, bytes)[1]))
"""
function register_for_checkpointing(acc::Accelerator; save::Function, load::Function)
    object = Checkpointed(save, load, nothing)
    GC.@preserve object begin
        @check accel_register_for_checkpointing(acc, SAVE_TRAMPOLINE[],
                                                LOAD_TRAMPOLINE[],
                                                pointer_from_objref(object),
                                                C_NULL)
    end
    push!(acc.checkpointed, object)   # rooted while the accelerator lives
    nothing
end

function save_trampoline(writer::Ptr{Cvoid}, user_data::Ptr{Cvoid})::Int32
    object = unsafe_pointer_to_objref(user_data)::Checkpointed
    try
        io = IOBuffer()
        object.save(io)
        bytes = take!(io)
        status = @acall accel_state_writer_write(writer, bytes, length(bytes))
        status == 0 || throw_status(status)
        return Int32(0)
    catch exception
        object.failure = (exception, catch_backtrace())
        return Int32(1)
    end
end

function load_trampoline(data::Ptr{Cvoid}, size::Csize_t, user_data::Ptr{Cvoid})::Int32
    object = unsafe_pointer_to_objref(user_data)::Checkpointed
    try
        object.load(copy(unsafe_wrap(Array, Ptr{UInt8}(data), Int(size))))
        return Int32(0)
    catch exception
        object.failure = (exception, catch_backtrace())
        return Int32(1)
    end
end

const SAVE_TRAMPOLINE = Ref{Ptr{Cvoid}}(C_NULL)
const LOAD_TRAMPOLINE = Ref{Ptr{Cvoid}}(C_NULL)

"""
    infer_device_map(model, options) -> Vector{String}

Accelerate's infer_auto_device_map (`accel_infer_device_map`): where each module's weights go,
as `"module.path=cpu"` / `"=disk"` lines in Accelerate's order, the root named `""` (a model that
fits whole is one line, `"=cpu"`). `options`: key=value pairs separated by spaces or ';':
`max_memory` (required: `"cpu:SIZE"` and `"disk"`, e.g. `"max_memory=cpu:200MB,disk"`),
`no_split_module_classes` (`"Block,Attention"`), `fallback_allocation`. A map that needs disk
when `max_memory` names none is `ERR_OUT_OF_MEMORY`; a malformed option `ERR_INVALID_ARGUMENT`.
"""
function infer_device_map(model::Model, options::AbstractString)
    String.(take_bytes_list(@out(Ptr{Cvoid}, accel_infer_device_map(model, c_text(options)))))
end

"""
    dispatch!(model, checkpoint, device_map) -> model

Accelerate's load_checkpoint_and_dispatch with disk offload on the CPU (`accel_dispatch_model`):
the tensors mapped to "cpu" are loaded from `checkpoint` (a safetensors file, an index or a
directory) once; those mapped to "disk" are read from the file just before each forward of their
module and dropped after it. `device_map`: `infer_device_map`'s lines (joined by newlines, spaces
or ';') or its options, from which the map is computed. Inference only: afterwards optimizers,
`prepare`, and the saves and loads of every weight refuse the model (`ERR_STATE`). Errors found
before anything is read leave the model unchanged.
"""
function dispatch!(model::Model, checkpoint::AbstractString, device_map::AbstractString)
    @check accel_dispatch_model(model, c_text(checkpoint), c_text(device_map))
    model
end
