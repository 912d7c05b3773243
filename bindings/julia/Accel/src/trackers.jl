# Experiment tracking (Accelerate's log_with, init_trackers, log and end_training): the library's
# file trackers and the program's own trackers, as Julia types.

"""
    TrackedValues

What a tracker's methods receive (see `AbstractTracker`):
`Vector{Pair{String,Union{Float64,String}}}`, name => number or text, in the order the program
gave them. A `Vector` of pairs rather than a `Dict`, because that order is the files' (the columns
of a run) and a `Dict` would lose it.
"""
const TrackedValues = Vector{Pair{String,Union{Float64,String}}}

# Named values (accel_values), made from a Julia collection for one call and closed after it.
mutable struct Values <: Handle
    ptr::Ptr{Cvoid}
    Values(pointer::Ptr{Cvoid}) = own(new(pointer))
end

free_handle(::Values, p) = @acall accel_values_free(p)

function Values(collection)
    values = Values(@out(Ptr{Cvoid}, accel_values_new()))
    try
        for entry in entries(collection)
            entry isa Pair || throw(ArgumentError(
                "values are `name => value` pairs; got $(repr(entry)) ($(typeof(entry)))"))
            set_value!(values, first(entry), last(entry))
        end
    catch
        close(values)
        rethrow()
    end
    values
end

# The pairs of a collection of values, in its iteration order.
entries(values::NamedTuple) = pairs(values)
entries(values::Pair) = (values,)
entries(values::Union{AbstractDict,AbstractVector,Tuple,Base.Iterators.Pairs}) = values
entries(values) = throw(ArgumentError(
    "values are a NamedTuple, an AbstractDict, or a vector or tuple of `name => value` pairs; " *
    "got a $(typeof(values))"))

function set_value!(values::Values, key, value)
    key isa Union{AbstractString,Symbol} || throw(ArgumentError(
        "value names are strings or symbols; got $(repr(key)) ($(typeof(key)))"))
    name = c_text(key)
    if value isa Real
        @check accel_values_set_number(values, name, Float64(value))
    elseif value isa Union{AbstractString,Symbol}
        @check accel_values_set_text(values, name, c_text(value))
    else
        throw(ArgumentError("the value of $(repr(name)) is a $(typeof(value)); values are " *
                            "numbers (Real) or texts (AbstractString, Symbol)"))
    end
    nothing
end

# The values of an accel_values (a Values, or the borrowed pointer a callback gets), in order.
function read_values(values)::TrackedValues
    n = Int(@out Csize_t accel_values_count(values))
    result = TrackedValues()
    sizehint!(result, n)
    key, is_text, number, text = Ref{Ptr{UInt8}}(), Ref{Int32}(), Ref{Float64}(), Ref{Ptr{UInt8}}()
    for i in 1:n
        @check accel_values_get(values, Csize_t(i - 1), key, is_text, number, text)
        push!(result, unsafe_string(key[]) => (is_text[] != 0 ? unsafe_string(text[]) : number[]))
    end
    result
end

"""
    init_trackers(acc, project_name; config = nothing)
    init_trackers(f, acc, project_name; config = nothing)

Starts a run of the trackers (Accelerate's init_trackers): those the configuration key `log_with`
names (`"tensorboard"`, `"jsonl"`, `"csv"`, `"all"` or a comma-separated list; none by default),
writing under `logging_dir/project_name` (`logging_dir` defaults to `project_dir`), then the
program's own (`add_tracker!`). `config` holds the run's hyperparameters, recorded by every tracker
(hparams.json, hparams.csv, TensorBoard's "hparams" text): a collection of `name => value` as
`log_values` takes, e.g. `config = (lr = 1e-3, optimizer = "adamw")`.

`project_name` is one path component. A directory that cannot be made or written throws `ERR_IO`
naming it, here rather than at the first `log_values`; `log_with` without `logging_dir` or
`project_dir` is `ERR_CONFIG`; a custom tracker's `start` that throws is `ERR_CALLBACK` with the
exception as `cause`. Nothing is left half-started: the trackers already started are finished.
Once per run: again before `end_training` is `ERR_STATE`.

The do-block form runs `f()` and ends the run after it (`end_training`), also when `f` throws,
whose exception is then what comes out; it returns what `f` returns. Only the main process writes
and calls custom trackers; on the others the call checks its arguments and returns. Not a
collective.
"""
function init_trackers(acc::Accelerator, project_name::AbstractString; config = nothing)
    name = c_text(project_name)
    values = config === nothing ? nothing : Values(config)
    try
        call_trackers(acc, "init_trackers") do
            @acall accel_init_trackers(acc, name, optional(values))
        end
    finally
        values === nothing || close(values)
    end
end

function init_trackers(f::Function, acc::Accelerator, project_name::AbstractString; config = nothing)
    init_trackers(acc, project_name; config = config)
    returned = false
    try
        result = f()
        returned = true
        end_training(acc)
        return result
    finally
        # f threw: the run still ends, and f's exception goes on (a finish that fails as well
        # would only hide it).
        if !returned && isopen(acc)
            try
                end_training(acc)
            catch
            end
        end
    end
end

"""
    log_values(acc, values; step = nothing)
    log_values(acc, name => value, ...; step = nothing)

Logs `values` at `step` to every tracker of the run (Accelerate's `log`): a `NamedTuple`
(`(loss = 0.31, lr = 1e-3)`), an `AbstractDict`, or a vector or tuple of `name => value` pairs.
Names are strings or symbols; values are numbers (any `Real`, logged as `Float64`: NaN and
infinities included, integers above 2^53 rounded) or texts (`AbstractString`, `Symbol`). Anything
else is an `ArgumentError`, before any tracker sees the values.

**Order.** The values are logged in the collection's iteration order, which the files keep (the
keys of a metrics.jsonl line, the rows of metrics.csv) and custom trackers receive: a
`NamedTuple`, a vector or tuple of pairs, and pairs given as arguments keep the order written; a
`Dict`'s order is its hash order, not the order written (the same from run to run for the same
names, but arbitrary): use a `NamedTuple` or pairs when the order matters. A name given twice keeps
its first place and takes the last value.

`step` is `nothing` (none: Accelerate's `step=None`, `null` in metrics.jsonl) or an integer
`>= 0`, the program's own count, written as given (not an index: nothing is added to it).

Before `init_trackers`, or after `end_training`, it is `ERR_STATE`. A tracker that fails does not
keep the others from writing: every tracker gets the values, then the call throws the first
failure (`ERR_IO` naming the file; `ERR_CALLBACK` naming a custom tracker, what its method threw as
`cause`). Only the main process writes; on the others the call checks its arguments and state and
returns, so one program runs on any number of processes. Not a collective.

Named apart from Base's `log`, which is the logarithm (and `log(b, x)` its two-argument form,
which `log(acc, values)` would read as), as `reduce_across`, `broadcast_across` and
`accumulate_gradients!` are Accelerate's `reduce`, `broadcast` and `accumulate`. The same function
is the method a custom tracker implements (see `AbstractTracker`).
"""
function log_values(acc::Accelerator, values; step::Union{Nothing,Integer} = nothing)
    step === nothing || step >= 0 || throw(AccelError(ERR_INVALID_ARGUMENT,
        "step $step: a step is an integer >= 0, or `nothing` for none"))
    number = step === nothing ? Int64(-1) : Int64(step)
    with_handle(Values(values)) do handle
        call_trackers(acc, "log_values") do
            @acall accel_log(acc, handle, number)
        end
    end
end

log_values(acc::Accelerator, entry::Pair, more::Pair...; step::Union{Nothing,Integer} = nothing) =
    log_values(acc, (entry, more...); step = step)

"""
    end_training(acc)

Ends the run (Accelerate's end_training): the files closed, every custom tracker's `finish`
called (a failing one is `ERR_CALLBACK` with its exception as `cause`, after the others were
finished). Without a started run it does nothing. Trackers may be started again afterwards (a new
run; `add_tracker!` works again). Closing the accelerator ends a started run too, but a `finish`
that fails there goes unreported: end the run first (or use `init_trackers`' do-block form).
"""
function end_training(acc::Accelerator)
    call_trackers(acc, "end_training") do
        @acall accel_end_training(acc)
    end
end

# Makes `call()`, a ccall that may run the trackers' methods and returns its status. ERR_CALLBACK
# carries the exception of the first method that failed (the library reports the first failure);
# nothing yields or calls the library between the ccall and reading its message. One such call at
# a time per accelerator (other tasks and threads wait), since the failures are the accelerator's.
# A tracker's method that starts, logs to or ends the run is refused before the library: the
# library calls the methods in a loop over the run's trackers, which that would change under it
# (its lock is recursive: the same thread gets in).
function call_trackers(call, acc::Accelerator, what::AbstractString)
    set = acc.trackers
    set.calling === current_task() && throw(AccelError(ERR_STATE,
        "$what from inside a tracker's method: a tracker must not call init_trackers, " *
        "log_values or end_training"))
    lock(set.lock)
    try
        empty!(set.failures)
        status = call()
        cause = status == Int32(ERR_CALLBACK) && !isempty(set.failures) ? set.failures[1] : nothing
        empty!(set.failures)
        status == 0 || throw_status(status, cause)
    finally
        unlock(set.lock)
    end
    nothing
end

"""
    AbstractTracker

A tracker of the program's own (a W&B, MLflow or database client in Julia, a plot, a test's
recorder), added with `add_tracker!`: a subtype with a method of `Accel.log_values` and, when it
needs them, `Accel.start` and `Accel.finish`.

    struct Recorder <: Accel.AbstractTracker
        lines::Vector{String}
    end
    Accel.start(r::Recorder, project, config) = push!(r.lines, "start \$project \$config")
    Accel.log_values(r::Recorder, values, step) = push!(r.lines, "log \$step \$values")
    Accel.finish(r::Recorder) = push!(r.lines, "finish")

    add_tracker!(acc, "recorder", Recorder(String[]))

- `start(tracker, project_name::String, config::TrackedValues)`: at `init_trackers`, with its
  `config` (empty without one). Optional: the default does nothing.
- `log_values(tracker, values::TrackedValues, step::Union{Nothing,Int})`: at every
  `log_values(acc, ...)`, the values as name => `Float64` or `String` pairs in the order the
  program gave them, and the step (`nothing`: none). Required: `add_tracker!` refuses a type
  without it.
- `finish(tracker)`: at `end_training` (and when the accelerator is closed with a run started).
  Optional: the default does nothing.

Methods of a type rather than three functions: a tracker is an object whose methods share state
(a client, a connection, a file), and dispatch gives the optional ones their defaults, as
Accelerate's GeneralTracker subclasses override `start`, `log` and `finish`.

The methods run on the main process only, on the task that called `init_trackers`,
`log_values`, `end_training` or `close`, one at a time (calls from other tasks wait), after the
library's file trackers; they must not call the first three (`ERR_STATE`). What one throws fails
that call with an `AccelError` (`ERR_CALLBACK`, naming the tracker) whose `cause` is the
exception; the other trackers still got their call. Return values are ignored. An accelerator left to the garbage collector with a run
started calls `finish` inside a finalizer, where it must not wait or do I/O on a stream: end the
run or close the accelerator.
"""
abstract type AbstractTracker end

"""
    Accel.start(tracker::AbstractTracker, project_name::String, config::TrackedValues)

A custom tracker's start, at `init_trackers` (see `AbstractTracker`). The default does nothing.
"""
start(::AbstractTracker, project_name, config) = nothing

"""
    Accel.finish(tracker::AbstractTracker)

A custom tracker's finish, at `end_training` (see `AbstractTracker`). The default does nothing.
"""
finish(::AbstractTracker) = nothing

"""
    add_tracker!(acc, name, tracker::AbstractTracker) -> acc

Adds a tracker of the program's own (see `AbstractTracker`) to the accelerator's runs, under
`name` (non-empty, not one of `log_with`'s names, not one added before: `ERR_INVALID_ARGUMENT`).
Before `init_trackers`: while a run is started it is `ERR_STATE`. It stays for every later run of
the accelerator; its methods are called after the library's file trackers, in the order the
trackers were added. Call it on every process (the methods run on the main process only). The
accelerator keeps `tracker` alive until it is closed.
"""
function add_tracker!(acc::Accelerator, name::AbstractString, tracker::AbstractTracker)
    T = typeof(tracker)
    hasmethod(log_values, Tuple{T,TrackedValues,Int}) || throw(ArgumentError(
        "$T has no method Accel.log_values(::$T, values, step), which every tracker needs " *
        "(see AbstractTracker)"))
    entry = Tracked(tracker, String(name), acc.trackers)
    GC.@preserve entry begin
        @check accel_add_tracker(acc, c_text(name),
                                 TRACKER_START_TRAMPOLINE[],
                                 TRACKER_LOG_TRAMPOLINE[],
                                 TRACKER_FINISH_TRAMPOLINE[],
                                 pointer_from_objref(entry), C_NULL)
    end
    push!(acc.trackers.added, entry)   # rooted while the accelerator lives
    acc
end

# The callbacks of every custom tracker. Never let an exception escape into C: it is kept, in
# order, for the call that ran them (call_trackers), and the callback fails.
function run_tracker_method(f, entry::Tracked)::Int32
    set = entry.set
    set.calling = current_task()
    try
        f()
        return Int32(0)
    catch exception
        push!(set.failures, (exception, catch_backtrace()))
        return Int32(1)
    finally
        set.calling = nothing
    end
end

function tracker_start_trampoline(project::Ptr{UInt8}, config::Ptr{Cvoid}, user_data::Ptr{Cvoid})::Int32
    entry = unsafe_pointer_to_objref(user_data)::Tracked
    run_tracker_method(entry) do
        values = config == C_NULL ? TrackedValues() : read_values(config)
        start(entry.tracker, unsafe_string(project), values)
    end
end

function tracker_log_trampoline(values::Ptr{Cvoid}, step::Int64, user_data::Ptr{Cvoid})::Int32
    entry = unsafe_pointer_to_objref(user_data)::Tracked
    run_tracker_method(entry) do
        log_values(entry.tracker, read_values(values), step < 0 ? nothing : Int(step))
    end
end

function tracker_finish_trampoline(user_data::Ptr{Cvoid})::Int32
    entry = unsafe_pointer_to_objref(user_data)::Tracked
    run_tracker_method(() -> finish(entry.tracker), entry)
end

const TRACKER_START_TRAMPOLINE = Ref{Ptr{Cvoid}}(C_NULL)
const TRACKER_LOG_TRAMPOLINE = Ref{Ptr{Cvoid}}(C_NULL)
const TRACKER_FINISH_TRAMPOLINE = Ref{Ptr{Cvoid}}(C_NULL)
