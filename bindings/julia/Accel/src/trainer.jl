# The Trainer: transformers' Trainer over the accelerator (accel.h, "Trainer"), with Julia steps,
# compute_metrics and callbacks through trampolines.

"""
    Trainer(acc, model, opt, train; scheduler = nothing, eval = nothing, settings...)
    Trainer(acc, model, opt, train, settings::AbstractString; scheduler = nothing, eval = nothing)
    Trainer(f, acc, model, opt, train, ...)   # do-block: closed when `f` returns

Hugging Face transformers' Trainer over the accelerator: the training loop (accumulation,
clipping, optimizer and scheduler steps), logging, evaluation, prediction, checkpoints with
rotation and the best model, early stopping and exact resume, with transformers' callback events.
`settings` are TrainingArguments' names, as keyword arguments (`num_train_epochs = 2,
logging_steps = 10, eval_strategy = :steps, output_dir = "runs/a"`) or as the library's
"key=value,key=value" text; an unknown name or a bad value throws `ERR_INVALID_ARGUMENT` with
TrainingArguments' message. Objects not yet prepared are prepared here as `prepare` would. One
Trainer per accelerator at a time (`ERR_STATE`); close it before the accelerator.

By default the steps call the model's TorchScript methods: `training_step(batch...)` returning
the loss, `eval_step(batch...)` returning `(loss, predictions)`, the labels being the batch's last
field. Replace them with `set_training_step!`, `set_eval_step!`; add `set_compute_metrics!` and
callbacks (`add_callback!`). Then `fit!(trainer)`, `evaluate(trainer)`, `predict(trainer,
loader)`; `global_step`, `epoch`, `state_json`.

    Trainer(acc, model, opt, train; scheduler = sched, eval = test,
            num_train_epochs = 2, eval_strategy = :epoch, output_dir = "runs/mnist") do trainer
        set_compute_metrics!(trainer) do predictions, labels
            (accuracy = sum(predictions .== labels) / length(labels),)
        end
        fit!(trainer)
        evaluate(trainer)   # Dict("eval_loss" => ..., "eval_accuracy" => ...)
    end

Julia code the library calls (steps, compute_metrics, callbacks) runs on the task that called
`fit!`, `evaluate` or `predict`; what it throws stops that call and is rethrown from it as it was.
"""
mutable struct Trainer <: Handle
    ptr::Ptr{Cvoid}
    acc::Accelerator               # kept reachable: its finalizer would free it under the trainer
    loaders::Vector{DataLoader}    # the train and eval dataloaders (see paused_gc)
    training_step::Any             # the TrainerHooks the library calls, rooted here
    eval_step::Any
    compute_metrics::Any
    callbacks::Vector{Any}
    failure::Any                   # what a hook threw during the running call
    calls::Int                     # fit!/evaluate/predict running (nested from callbacks too)
    Trainer(pointer::Ptr{Cvoid}, acc, loaders) =
        own(new(pointer, acc, loaders, nothing, nothing, nothing, Any[], nothing, 0))
end

free_handle(::Trainer, p) = @acall accel_trainer_free(p)

# Not from its own callbacks: the library would free the trainer under the running call.
function Base.close(t::Trainer)
    t.calls == 0 || throw(AccelError(ERR_STATE,
        "close(trainer) while its fit!, evaluate or predict runs (from one of its callbacks)"))
    release!(t)
end

function Trainer(acc::Accelerator, model::Model, opt::Optimizer, train::DataLoader,
                 settings::AbstractString; scheduler::Union{Nothing,Scheduler} = nothing,
                 eval::Union{Nothing,DataLoader} = nothing)
    pointer = @out Ptr{Cvoid} accel_trainer_new(acc, model, opt, optional(scheduler), train,
                                                optional(eval), c_text(settings))
    Trainer(pointer, acc, eval === nothing ? [train] : [train, eval])
end

function Trainer(acc::Accelerator, model::Model, opt::Optimizer, train::DataLoader;
                 scheduler::Union{Nothing,Scheduler} = nothing,
                 eval::Union{Nothing,DataLoader} = nothing, settings...)
    Trainer(acc, model, opt, train, trainer_settings(settings); scheduler = scheduler, eval = eval)
end

Trainer(f::Function, args...; options...) = with_handle(f, Trainer(args...; options...))

# "key=value,key=value"; a value the library would split is refused here, not read as another key.
function trainer_settings(settings)
    join(map(collect(settings)) do (key, value)
        text = c_text(value)
        any(c -> c in (' ', ',', '\t', '\n'), text) && throw(ArgumentError(
            "Trainer setting $key=$(repr(text)): the settings hold no spaces, commas, tabs or newlines"))
        "$key=$text"
    end, ",")
end

"""
    TrainerContext

What a callback (`add_callback!`) gets first: the state and the control flags while it runs.
`global_step(ctx)`, `epoch(ctx)`, `state_json(ctx)`, `control(ctx, flag)`, `set_control!(ctx,
flag, value = true)`. Valid during the callback only: afterwards it throws `ERR_STATE`.
"""
mutable struct TrainerContext
    ptr::Ptr{Cvoid}
end

function context_pointer(ctx::TrainerContext)
    ctx.ptr == C_NULL && throw(AccelError(ERR_STATE, "a TrainerContext used after its callback returned"))
    ctx.ptr
end

const TrainerLike = Union{Trainer,TrainerContext}
trainer_pointer(t::Trainer) = t
trainer_pointer(ctx::TrainerContext) = context_pointer(ctx)

"The optimizer updates made (transformers' `TrainerState.global_step`)."
global_step(t::TrainerLike) = Int(@out Int64 accel_trainer_global_step(trainer_pointer(t)))

"The epochs done, as a fraction (`TrainerState.epoch`; 0 before training)."
epoch(t::TrainerLike) = @out Float64 accel_trainer_epoch(trainer_pointer(t))

"The state as transformers' trainer_state.json text (what each checkpoint holds)."
function state_json(t::TrainerLike)
    p = trainer_pointer(t)
    read_text() do buffer, capacity, size
        @acall accel_trainer_state_json(p, buffer, capacity, size)
    end
end

"""
    control(ctx, flag) -> Bool
    set_control!(ctx, flag, value = true)

A TrainerControl flag (`:should_training_stop`, `:should_epoch_stop`, `:should_save`,
`:should_evaluate`, `:should_log`; another name is `ERR_INVALID_ARGUMENT`): what transformers'
callbacks return, set from a callback. `set_control!(ctx, :should_training_stop)` at
`:on_step_end` ends the training after that step.
"""
control(ctx::TrainerContext, flag::Union{Symbol,AbstractString}) =
    @out Bool accel_trainer_control(context_pointer(ctx), c_text(flag))

function set_control!(ctx::TrainerContext, flag::Union{Symbol,AbstractString}, value::Bool = true)
    @check accel_trainer_set_control(context_pointer(ctx), c_text(flag), value)
    ctx
end

# A Julia function the library calls, and the Trainer whose call gets what it throws.
mutable struct TrainerHook   # mutable: pointer_from_objref
    f::Any
    owner::Trainer
end

# Registers `f` (nothing: the library's default, or no callback) with `register(trampoline,
# user_data)`; the hook is rooted in `field` of the Trainer.
function set_hook!(register, t::Trainer, f, field::Symbol, trampoline::Ref{Ptr{Cvoid}})
    hook = f === nothing ? nothing : TrainerHook(f, t)
    status = GC.@preserve hook begin
        register(hook === nothing ? C_NULL : trampoline[],
                 hook === nothing ? C_NULL : pointer_from_objref(hook))
    end
    status == 0 || throw_status(status)
    setfield!(t, field, hook)
    t
end

"""
    set_training_step!(f, trainer)
    set_training_step!(nothing, trainer)   # the model's training_step again

Replaces the training step: `f(batch...)` gets the micro-batch's fields (`Tensor`s lent for the
call: closed when it returns, `close` on them does nothing to the batch) and returns the loss, a
one-element `Tensor` with its graph, which the Trainer takes (it is closed for the program).
With the setting `num_items_in_batch = true` the batch has one more field, the accumulation
window's label-token count, and the loss is the sum over tokens divided by it.

    set_training_step!(trainer) do x, y
        model(:training_step, x, y)
    end
"""
set_training_step!(f::Union{Function,Nothing}, t::Trainer) =
    set_hook!(t, f, :training_step, TRAINING_STEP_TRAMPOLINE) do fn, data
        @acall accel_trainer_set_training_step(t, fn, data, C_NULL)
    end

"""
    set_eval_step!(f, trainer)
    set_eval_step!(nothing, trainer)   # the model's eval_step again

Replaces the evaluation step, run under no-grad with the model in eval mode: `f(batch...)` (lent
as for `set_training_step!`) returns a `NamedTuple` of any of `loss`, `predictions` and `labels`
(first dimension, the library's, Julia's last: the batch's samples), each a `Tensor` (which the
Trainer takes; one of the batch's may be given as it is), an array or number (copied), or
`nothing` for none.

    set_eval_step!(trainer) do x, y
        (predictions = model(:index, x, y), labels = y)
    end
"""
set_eval_step!(f::Union{Function,Nothing}, t::Trainer) =
    set_hook!(t, f, :eval_step, EVAL_STEP_TRAMPOLINE) do fn, data
        @acall accel_trainer_set_eval_step(t, fn, data, C_NULL)
    end

"""
    set_compute_metrics!(f, trainer)
    set_compute_metrics!(nothing, trainer)   # none: an evaluation gives its loss alone

transformers' compute_metrics: `f(predictions, labels)` gets the predictions and labels of every
evaluation sample once, gathered from every process in dataset order, as Julia arrays (sample `i`
is the last index `i`; as transformers, it is not called when the steps gave no predictions or no
labels), and returns metrics as
`log_values` takes values (`(accuracy = a,)`, a `Dict`, `name => value` pairs) of numbers. Each
name gets the "eval_" (`evaluate`) or "test_" (`predict`) prefix unless it has it. Called on
every process.
"""
set_compute_metrics!(f::Union{Function,Nothing}, t::Trainer) =
    set_hook!(t, f, :compute_metrics, COMPUTE_METRICS_TRAMPOLINE) do fn, data
        @acall accel_trainer_set_compute_metrics(t, fn, data, C_NULL)
    end

"""
    add_callback!(f, trainer)

Adds a callback, called after those added before it at every event, as transformers'
TrainerCallback: `f(ctx::TrainerContext, event::Symbol, values)`, `event` transformers' name
(`:on_init_end`, `:on_train_begin`, `:on_epoch_begin`, `:on_step_begin`, `:on_substep_end`,
`:on_pre_optimizer_step`, `:on_optimizer_step`, `:on_step_end`, `:on_log`, `:on_evaluate`,
`:on_save`, `:on_epoch_end`, `:on_train_end`, `:on_predict`, `:on_prediction_step`), `values`
the logs or metrics as a `Dict{String,Float64}` (`:on_log`, `:on_evaluate`, `:on_predict`) or
`nothing`. `:on_init_end` reaches the callbacks added before the first `fit!`, `evaluate` or
`predict`, once. A callback may call `evaluate(trainer)` and the accelerator's functions, not
`fit!` nor `close(trainer)`.

    add_callback!(trainer) do ctx, event, values
        event == :on_step_end && global_step(ctx) == 100 && set_control!(ctx, :should_training_stop)
    end
"""
function add_callback!(f::Function, t::Trainer)
    hook = TrainerHook(f, t)
    GC.@preserve hook begin
        @check accel_trainer_add_callback(t, CALLBACK_TRAMPOLINE[], pointer_from_objref(hook), C_NULL)
    end
    push!(t.callbacks, hook)
    t
end

# A call that may run the hooks: what a hook threw wins over the status it caused, and is
# rethrown as it was. (The status's message is read before anything else calls the library.)
function trainer_call(call, t::Trainer, loaders::Vector{DataLoader} = t.loaders)
    t.failure = nothing
    t.calls += 1
    status = try
        paused_gc(call, loaders)
    finally
        t.calls -= 1
    end
    failure, t.failure = t.failure, nothing
    failure === nothing || throw(failure)
    status == 0 || throw_status(status)
    nothing
end

# paused_gc (dataloader.jl) for the dataloaders a trainer call reads.
function paused_gc(f, loaders::Vector{DataLoader})
    any(l -> FOREIGN_THREAD_CALLBACKS && l.dataset.source !== nothing, loaders) || return f()
    previous = GC.enable(false)
    try
        f()
    finally
        GC.enable(previous)
    end
end

"""
    fit!(trainer) -> trainer

transformers' `Trainer.train`: from the start, or with the setting `resume_from_checkpoint`
(`"latest"` or a directory) from that checkpoint. What a step or callback throws stops it and is
rethrown; any failure leaves the objects where the failing step left them (the last checkpoint
intact). A collective: every process calls it.
"""
function fit!(t::Trainer)
    trainer_call(() -> @acall(accel_trainer_train(t)), t)
    t
end

"""
    evaluate(trainer) -> Dict{String,Float64}

transformers' `Trainer.evaluate` over the eval dataloader: "eval_loss" (the mean over samples of
the steps' losses) and compute_metrics' metrics, logged (the state's log_history, the trackers)
and given to `:on_evaluate`.
"""
function evaluate(t::Trainer)
    out = Ref{Ptr{Cvoid}}(C_NULL)
    trainer_call(() -> @acall(accel_trainer_evaluate(t, out)), t)
    take_metrics(out[])
end

"""
    predict(trainer, loader) -> (predictions, labels, metrics)
    predict(Tensor, trainer, loader)

transformers' `Trainer.predict` over `loader` (prepared on the accelerator): the predictions and
labels of every sample once, in dataset order, on every process, as arrays (sample `i` is the last
index `i`; `nothing` when the steps gave none), and the "test_" metrics as a `Dict`. The second
form gives `Tensor`s (close them) instead of arrays.
"""
function predict(::Type{Tensor}, t::Trainer, loader::DataLoader)
    predictions, labels, metrics = Ref{Ptr{Cvoid}}(C_NULL), Ref{Ptr{Cvoid}}(C_NULL), Ref{Ptr{Cvoid}}(C_NULL)
    trainer_call(t, [t.loaders; loader]) do
        @acall accel_trainer_predict(t, loader, predictions, labels, metrics)
    end
    tensor(p) = p == C_NULL ? nothing : Tensor(p, Val(:own))
    (predictions = tensor(predictions[]), labels = tensor(labels[]), metrics = take_metrics(metrics[]))
end

function predict(t::Trainer, loader::DataLoader)
    p = predict(Tensor, t, loader)
    array(x) = x === nothing ? nothing : with_handle(Array, x)
    (predictions = array(p.predictions), labels = array(p.labels), metrics = p.metrics)
end

# The library's metrics as a Dict; freed.
function take_metrics(p::Ptr{Cvoid})
    try
        Dict{String,Float64}(k => Float64(v) for (k, v) in read_values(p))
    finally
        @acall accel_values_free(p)
    end
end

# ---- the trampolines ---------------------------------------------------------------------

# Runs a hook: 0, or 1 with what it threw kept for the call that reached it (the first only).
# Running out of memory (step_tools.jl's out_of_memory) is ERR_OUT_OF_MEMORY itself, not kept:
# auto_find_batch_size tries again smaller, and a later try that succeeds must not report it.
function run_hook(f, hook::TrainerHook)::Int32
    try
        f()
        return Int32(0)
    catch exception
        out_of_memory(exception) && return Int32(ERR_OUT_OF_MEMORY)
        owner = hook.owner
        owner.failure === nothing && (owner.failure = exception)
        return Int32(1)
    end
end

# The batch as Tensors lent for the call, closed (never freed) when it returns.
function with_lent(f, pointers)
    lent = Tensor[Tensor(p, Val(:lent)) for p in pointers]
    try
        f(lent)
    finally
        foreach(t -> t.ptr = C_NULL, lent)
    end
end

# The handle to hand the library for a step's result: one of the batch's as it is, or the
# tensor's own, taken from it (closed for the program, not freed); an array or number is copied.
function give(x, lent::Vector{Tensor}, what::AbstractString)
    t = x isa Tensor ? x : Tensor(x)
    pointer = t.ptr
    pointer == C_NULL && throw(AccelError(ERR_STATE, "$what is a closed Tensor"))
    if t.lent
        any(b -> b === t, lent) || throw(AccelError(ERR_STATE,
            "$what is a Tensor lent to another call"))
        return pointer
    end
    t.ptr = C_NULL   # the library frees it
    pointer
end

function training_step_trampoline(batch::Ptr{Ptr{Cvoid}}, count::Csize_t, out_loss::Ptr{Ptr{Cvoid}},
                                  user_data::Ptr{Cvoid})::Int32
    hook = unsafe_pointer_to_objref(user_data)::TrainerHook
    with_lent(unsafe_wrap(Array, batch, count)) do lent
        run_hook(hook) do
            loss = hook.f(lent...)
            loss isa Tensor || throw(ArgumentError(
                "the training step returned a $(typeof(loss)), not the loss as a Tensor"))
            unsafe_store!(out_loss, give(loss, lent, "the training step's loss"))
        end
    end
end

function eval_step_trampoline(batch::Ptr{Ptr{Cvoid}}, count::Csize_t, out_loss::Ptr{Ptr{Cvoid}},
                              out_predictions::Ptr{Ptr{Cvoid}}, out_labels::Ptr{Ptr{Cvoid}},
                              user_data::Ptr{Cvoid})::Int32
    hook = unsafe_pointer_to_objref(user_data)::TrainerHook
    with_lent(unsafe_wrap(Array, batch, count)) do lent
        run_hook(hook) do
            out = hook.f(lent...)
            out isa NamedTuple && all(k -> k in (:loss, :predictions, :labels), keys(out)) ||
                throw(ArgumentError("the evaluation step returned $(repr(out)), not a NamedTuple " *
                                    "of loss, predictions and labels"))
            # The library frees what it was given, also when a later one fails here.
            for (key, into) in ((:loss, out_loss), (:predictions, out_predictions),
                                (:labels, out_labels))
                x = get(out, key, nothing)
                x === nothing || unsafe_store!(into, give(x, lent, "the evaluation step's $key"))
            end
        end
    end
end

function compute_metrics_trampoline(predictions::Ptr{Cvoid}, labels::Ptr{Cvoid},
                                    metrics::Ptr{Cvoid}, user_data::Ptr{Cvoid})::Int32
    hook = unsafe_pointer_to_objref(user_data)::TrainerHook
    with_lent((predictions, labels)) do lent
        run_hook(hook) do
            array(t) = t.ptr == C_NULL ? nothing : Array(t)
            for entry in entries(hook.f(array(lent[1]), array(lent[2])))
                key, value = first(entry), last(entry)
                value isa Real || throw(ArgumentError(
                    "compute_metrics: the metric $(repr(key)) is a $(typeof(value)), not a number"))
                @check accel_values_set_number(metrics, c_text(key), Float64(value))
            end
        end
    end
end

function trainer_callback_trampoline(trainer::Ptr{Cvoid}, event::Int32, values::Ptr{Cvoid},
                                     user_data::Ptr{Cvoid})::Int32
    hook = unsafe_pointer_to_objref(user_data)::TrainerHook
    ctx = TrainerContext(trainer)
    try
        run_hook(hook) do
            name = Symbol(unsafe_string(@acall accel_trainer_event_name(event)))
            logs = values == C_NULL ? nothing :
                   Dict{String,Float64}(k => Float64(v) for (k, v) in read_values(values))
            hook.f(ctx, name, logs)
        end
    finally
        ctx.ptr = C_NULL   # the library's trainer is lent for this call
    end
end

const TRAINING_STEP_TRAMPOLINE = Ref{Ptr{Cvoid}}(C_NULL)
const EVAL_STEP_TRAMPOLINE = Ref{Ptr{Cvoid}}(C_NULL)
const COMPUTE_METRICS_TRAMPOLINE = Ref{Ptr{Cvoid}}(C_NULL)
const CALLBACK_TRAMPOLINE = Ref{Ptr{Cvoid}}(C_NULL)

# Called by __init__: C function pointers exist only in the running process.
function init_trainer_trampolines()
    TRAINING_STEP_TRAMPOLINE[] = @cfunction(training_step_trampoline, Int32,
                                            (Ptr{Ptr{Cvoid}}, Csize_t, Ptr{Ptr{Cvoid}}, Ptr{Cvoid}))
    EVAL_STEP_TRAMPOLINE[] = @cfunction(eval_step_trampoline, Int32,
                                        (Ptr{Ptr{Cvoid}}, Csize_t, Ptr{Ptr{Cvoid}}, Ptr{Ptr{Cvoid}},
                                         Ptr{Ptr{Cvoid}}, Ptr{Cvoid}))
    COMPUTE_METRICS_TRAMPOLINE[] = @cfunction(compute_metrics_trampoline, Int32,
                                              (Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}))
    CALLBACK_TRAMPOLINE[] = @cfunction(trainer_callback_trampoline, Int32,
                                       (Ptr{Cvoid}, Int32, Ptr{Cvoid}, Ptr{Cvoid}))
    nothing
end
