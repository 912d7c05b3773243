# Around the training step: no_sync, find_executable_batch_size and LocalSGD.

"""
    no_sync(f, acc, model)

Accelerate's `no_sync(model)` as a do-block: while `f()` runs, `backward` keeps `model`'s
gradients on this rank (they add up across backwards), and the first backward after it reduces
them all (PyTorch DDP's `no_sync`). Optimizers still step when called. Returns what `f` returns.
Blocks nest; with one process, or a model that is not prepared, there is nothing to hold back.
Not a collective. The end runs also when `f` throws, and `f`'s exception is what comes out.

    for (i, (x, y)) in enumerate(loader)
        if i % 2 == 1
            no_sync(acc, model) do
                model(loss -> backward(acc, loss), :training_step, x, y)
            end
        else
            model(loss -> backward(acc, loss), :training_step, x, y)   # reduces both backwards
            step!(opt); zero_grad!(opt)
        end
    end
"""
function no_sync(f, acc::Accelerator, model::Model)
    @check accel_no_sync_begin(acc, model)
    returned = false
    try
        result = f()
        returned = true
        @check accel_no_sync_end(acc, model)
        return result
    finally
        # f threw: the end still runs, and f's exception goes on (an end that fails as well
        # would only hide it).
        returned || @acall accel_no_sync_end(acc, model)
    end
end

# A search of find_executable_batch_size, passed to the library as user_data; rooted by the call.
mutable struct BatchSizeSearch
    f::Any
    failure::Any   # the exception that stopped the search, or nothing
end

"""
    find_executable_batch_size(f, acc; starting_batch_size = 128) -> Int

Accelerate's `find_executable_batch_size`: calls `f(batch_size)` from `starting_batch_size` down
and returns the size whose try ran. A try that runs out of memory is tried again at
`floor(Int, size * 0.9)` (128, 115, 103, ..., 9, 8, 7, ...): running out of memory is an
`AccelError` with status `ERR_OUT_OF_MEMORY` (what any libaccel call inside, a model call
say, throws when LibTorch or the system ran out of memory) or Julia's own `OutOfMemoryError`.
When no size down to 1 runs, it throws `AccelError(ERR_OUT_OF_MEMORY, "No executable batch size
found, reached zero.")` (so does a start of 0). Any other exception of `f` stops the search and
comes out of this call as it was thrown (the same object).

In a job of several processes every rank calls it with the same start and all go on with the
same size: a rank that ran out of memory makes every rank retry smaller, and a rank whose `f`
failed otherwise stops every rank (`ERR_PEER_FAILED` on the others). A try that is retried leaves
the random generators, the prepared models' gradients, the prepared dataloaders' positions and
the accumulation counters as they were before it; make the model and optimizer inside `f`, as
Accelerate's examples do.

    batch_size = find_executable_batch_size(acc; starting_batch_size = 64) do size
        train_one_epoch(size)   # throws ERR_OUT_OF_MEMORY when size is too large
    end
"""
function find_executable_batch_size(f, acc::Accelerator; starting_batch_size::Integer = 128)
    search = BatchSizeSearch(f, nothing)
    found = Ref{Int64}(0)
    status = GC.@preserve search begin
        @acall accel_find_executable_batch_size(acc, Int64(starting_batch_size),
                                                BATCH_SIZE_TRAMPOLINE[],
                                                pointer_from_objref(search), found)
    end
    search.failure === nothing || throw(search.failure)   # f's own exception, as it was
    status == 0 || throw_status(status)
    Int(found[])
end

out_of_memory(exception) = exception isa OutOfMemoryError ||
                           (exception isa AccelError && exception.status == ERR_OUT_OF_MEMORY)

function batch_size_trampoline(user_data::Ptr{Cvoid}, batch_size::Int64)::Int32
    search = unsafe_pointer_to_objref(user_data)::BatchSizeSearch
    try
        search.f(Int(batch_size))
        return Int32(0)
    catch exception
        out_of_memory(exception) && return Int32(ERR_OUT_OF_MEMORY)
        search.failure = exception
        return Int32(ERR_CALLBACK)
    end
end

const BATCH_SIZE_TRAMPOLINE = Ref{Ptr{Cvoid}}(C_NULL)

"""
    LocalSgd(acc, model, local_sgd_steps; options...)
    LocalSgd(f, acc, model, local_sgd_steps; options...)

Accelerate's `LocalSGD(accelerator, model, local_sgd_steps)`: from here until `finish!`, `model`'s
gradients are not synchronised, and every `local_sgd_steps`-th `step!(local_sgd)` (call it after
each optimizer step) averages the model's parameters across the ranks (a collective: every rank
calls it alike). `finish!` averages once more unless the last step just did (so n steps average
`cld(n, local_sgd_steps)` times) and ends; a second `finish!` does nothing. `average_count` says
how many times the parameters were averaged. `close` (or the finalizer) frees it; one not
finished stops without averaging (no collective).

The model must be prepared in a job of several processes (`ERR_STATE` otherwise); under ZeRO it
is `ERR_UNSUPPORTED`, as Accelerate refuses DeepSpeed and FSDP; `local_sgd_steps < 1` is
`ERR_INVALID_ARGUMENT`. With one process it only counts steps. Options (`set!`, before the first
step), beyond Accelerate: `outer_optimizer` (`none`: the plain average; `nesterov`: DiLoCo's outer
step, with `outer_lr` 0.7 and `outer_momentum` 0.9).

The do-block form is Accelerate's `with LocalSGD(...) as local_sgd:`: it runs `f(local_sgd)`,
then `finish!`, and returns what `f` returns; when `f` throws, the handle is freed without the
last average and the exception goes on.

    LocalSgd(acc, model, 8) do local_sgd
        for (x, y) in loader
            train_step!(acc, model, opt, x, y)
            step!(local_sgd)
        end
    end
"""
mutable struct LocalSgd <: Handle
    ptr::Ptr{Cvoid}
    LocalSgd(pointer::Ptr{Cvoid}) = own(new(pointer))
end

function LocalSgd(acc::Accelerator, model::Model, local_sgd_steps::Integer; options...)
    pointer = @out Ptr{Cvoid} accel_local_sgd_begin(acc, model, Int64(local_sgd_steps))
    with_options!(LocalSgd(pointer), options)
end

function LocalSgd(f::Function, acc::Accelerator, model::Model, local_sgd_steps::Integer; options...)
    local_sgd = LocalSgd(acc, model, local_sgd_steps; options...)
    try
        result = f(local_sgd)
        finish!(local_sgd)
        return result
    finally
        close(local_sgd)   # after finish!, only frees; when f threw, stops without averaging
    end
end

free_handle(::LocalSgd, p) = @acall accel_local_sgd_free(p)

function set!(local_sgd::LocalSgd, key::Union{AbstractString,Symbol}, value)
    @check accel_local_sgd_set(local_sgd, c_text(key), c_text(value))
    local_sgd
end

"""
    step!(local_sgd)

Counts an optimizer step; every `local_sgd_steps`-th averages the parameters (a collective).
"""
function step!(local_sgd::LocalSgd)
    @check accel_local_sgd_step(local_sgd)
    local_sgd
end

"""
    finish!(local_sgd)

The end of a `LocalSgd` (Accelerate's exit of its `with` block): averages once more unless the
last step just did, and synchronises the model's gradients again. A collective when it averages;
a second `finish!` does nothing.
"""
function finish!(local_sgd::LocalSgd)
    @check accel_local_sgd_end(local_sgd)
    local_sgd
end

"How many times the parameters were averaged so far."
average_count(local_sgd::LocalSgd) =
    Int(@out Int64 accel_local_sgd_average_count(local_sgd))
