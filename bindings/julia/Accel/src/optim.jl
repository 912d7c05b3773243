# Optimizers and learning-rate schedules.

"""
    Optimizer(model, kind; options...)

An optimizer over `model`'s parameters: `:sgd`, `:adam`, `:adamw`, `:rmsprop` or `:adagrad`, with
PyTorch's defaults and options (`lr`, `momentum`, `weight_decay`, `beta1`, ...):
`Accel.Optimizer(model, :adamw; lr = 1e-3)`. `step!`, `zero_grad!`, `lr`, `set_lr!`,
`step_was_skipped`, `set!(opt, key, value)`; parameter groups with `add_group!`, `set_group!`,
`lr(opt, group)` and `group_count`. `lr`, `set_lr!` and `set!` are group 1's (and the defaults
later groups start from).
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
...; see accel.h): `Accel.Scheduler(opt, :linear; warmup_steps = 100, total_steps = 1000)`. Once
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

"""
    add_group!(optimizer, names; options...) -> Int

A parameter group, as PyTorch's optimizers have them (`param_groups`): the parameters `names` (as
`tensor_names` lists them) step with the group's own options from now on, starting from the
optimizer's defaults of this moment (what `set!` set) and then `options`. Returns the group's
index: groups count from 1, as Julia's indices, and group 1 holds every parameter no other group
names, with the options `set!` sets; the first group added is 2. The classic is no weight decay
on biases:

    opt = Optimizer(model, :adamw; lr = 1e-3, weight_decay = 0.01)
    add_group!(opt, filter(n -> endswith(n, ".bias"), tensor_names(model)); weight_decay = 0)

A name that is not one of the model's parameters, given twice or already in another group, and an
empty `names`, are `ERR_INVALID_ARGUMENT`; once the optimizer is prepared, has stepped or has a
`Scheduler` it is `ERR_STATE` (make the groups first: a scheduler takes each group's base rate).
`set_group!` sets a group's options later, `lr(optimizer, group)` reads its rate, `group_count`
counts the groups. A checkpoint keeps each group's options; `load_state` needs the same groups.
"""
function add_group!(opt::Optimizer, names; options...)
    texts = String[c_text(name) for name in names]
    pointers = Ptr{UInt8}[pointer(text) for text in texts]
    group = GC.@preserve texts begin
        @out Csize_t accel_optimizer_add_group(opt, pointers, length(pointers))
    end
    index = Int(group) + 1
    set_group!(opt, index; options...)
    index
end

"The number of parameter groups: 1 (group 1, the optimizer's own) plus one per `add_group!`."
group_count(opt::Optimizer) =
    Int(@out Csize_t accel_optimizer_group_count(opt))

# The library's index (from 0) of parameter group `group` (from 1).
function group_index(opt::Optimizer, group::Integer)
    count = group_count(opt)
    1 <= group <= count || throw(AccelError(ERR_INVALID_ARGUMENT,
        "$group is not a parameter group: groups count from 1 (group 1 holds every parameter no " *
        "other group names), here 1:$count"))
    Csize_t(group - 1)
end

"""
    set_group!(optimizer, group, key, value)
    set_group!(optimizer, group; options...)

Sets options of parameter group `group` (from 1; see `add_group!`) with the keys and values of
`set!` (`lr`, `weight_decay`, `momentum`, `beta1`, ...); they take effect at the next step.
Group 1's here leaves the optimizer's defaults (what later groups start from) alone.
"""
function set_group!(opt::Optimizer, group::Integer, key::Union{AbstractString,Symbol}, value)
    index = group_index(opt, group)
    @check accel_optimizer_set_group(opt, index, c_text(key), c_text(value))
    opt
end
function set_group!(opt::Optimizer, group::Integer; options...)
    for (key, value) in options
        set_group!(opt, group, key, value)
    end
    opt
end

"""
    lr(optimizer, group) -> Float64

The current learning rate of parameter group `group` (from 1; a scheduler sets every group's).
"""
function lr(opt::Optimizer, group::Integer)
    index = group_index(opt, group)
    @out Float64 accel_optimizer_group_lr(opt, index)
end

"Whether the last prepared step was skipped because an fp16 gradient was inf/nan."
function step_was_skipped(opt::Optimizer)
    @out Bool accel_optimizer_step_was_skipped(opt)
end
