# Optimizers and learning-rate schedules.

"""
    Optimizer(model, kind; options...)

An optimizer over `model`'s parameters: `:sgd`, `:adam`, `:adamw`, `:rmsprop` or `:adagrad`, with
PyTorch's defaults and options (`lr`, `momentum`, `weight_decay`, `beta1`, ...):
`Optimizer(model, :adamw; lr = 1e-3)`. `step!`, `zero_grad!`, `lr`, `set_lr!`,
`step_was_skipped`, `set!(opt, key, value)`.
"""
mutable struct Optimizer <: Handle
    ptr::Ptr{Cvoid}
    Optimizer(pointer::Ptr{Cvoid}) = own(new(pointer))
end

function Optimizer(model::Model, kind; options...)
    pointer = @out Ptr{Cvoid} accel_optimizer_new(model, c_text(kind))
    with_options!(Optimizer(pointer), options)
end

"""
    Scheduler(optimizer, kind; options...)

A learning-rate schedule driving `optimizer` (`:constant`, `:linear`, `:cosine`, `:one_cycle`,
...; see accel.h): `Scheduler(opt, :linear; warmup_steps = 100, total_steps = 1000)`. Once
prepared it steps as Accelerate's (num_processes times per optimizer step).
"""
mutable struct Scheduler <: Handle
    ptr::Ptr{Cvoid}
    Scheduler(pointer::Ptr{Cvoid}) = own(new(pointer))
end

function Scheduler(optimizer::Optimizer, kind; options...)
    pointer = @out Ptr{Cvoid} accel_scheduler_new(optimizer, c_text(kind))
    with_options!(Scheduler(pointer), options)
end

function with_options!(object, options)
    try
        for (key, value) in options
            set!(object, key, value)
        end
    catch
        close(object)
        rethrow()
    end
    object
end

free_handle(::Optimizer, p) = @acall accel_optimizer_free(p)
free_handle(::Scheduler, p) = @acall accel_scheduler_free(p)

function set!(opt::Optimizer, key::Union{AbstractString,Symbol}, value)
    @check accel_optimizer_set(opt, c_text(key), c_text(value))
    opt
end

function set!(sched::Scheduler, key::Union{AbstractString,Symbol}, value)
    @check accel_scheduler_set(sched, c_text(key), c_text(value))
    sched
end

"""
    step!(optimizer)
    step!(scheduler)

One optimizer step (nothing on accumulation micro-steps once prepared; skipped under fp16 when a
gradient is inf/nan), or one scheduler step (Accelerate's rules, see `Scheduler`).
"""
function step!(opt::Optimizer)
    @check accel_optimizer_step(opt)
    opt
end

function step!(sched::Scheduler)
    @check accel_scheduler_step(sched)
    sched
end

"""
    zero_grad!(optimizer)

Sets the gradients to none (once prepared, only on steps that synchronise); on several processes
the gradients that live in the communication buckets are zeroed in place instead (see
`accel_optimizer_zero_grad`).
"""
function zero_grad!(opt::Optimizer)
    @check accel_optimizer_zero_grad(opt)
    opt
end

"""
    lr(optimizer_or_scheduler) -> Float64

The current learning rate.
"""
function lr(opt::Optimizer)
    @out Float64 accel_optimizer_lr(opt)
end

function lr(sched::Scheduler)
    @out Float64 accel_scheduler_lr(sched)
end

"Sets the optimizer's learning rate."
function set_lr!(opt::Optimizer, rate::Real)
    @check accel_optimizer_set_lr(opt, Float64(rate))
    opt
end

"Whether the last prepared step was skipped because an fp16 gradient was inf/nan."
function step_was_skipped(opt::Optimizer)
    @out Bool accel_optimizer_step_was_skipped(opt)
end
