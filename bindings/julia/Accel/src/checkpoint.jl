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
