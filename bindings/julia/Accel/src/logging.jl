# Accelerate's get_logger (accel_log_message): messages with a level, written by the main process
# or by every process, in rank order if asked, and routed to Julia's Logging.

const LOG_ALL_PROCESSES = UInt32(1)   # ACCEL_LOG_ALL_PROCESSES
const LOG_IN_ORDER = UInt32(2)        # ACCEL_LOG_IN_ORDER
const MAX_C_LEVEL = 1000

# The library's levels (Python's numbers) against Julia's, piecewise linear between these points:
# NOTSET 0, DEBUG 10, INFO 20, WARNING 30, ERROR 40 and CRITICAL 50 are below Debug, Debug, Info,
# Warn, Error and Error + 1; a step of 1 is 100 of Julia's, except between ERROR and CRITICAL
# (41 to 49 are Error) and above CRITICAL up to the library's 1000.
const LEVEL_POINTS = ((0, -2000), (10, -1000), (20, 0), (30, 1000), (40, 2000), (50, 2001),
                      (MAX_C_LEVEL, 2001 + 100 * (MAX_C_LEVEL - 50)))

"""
    Accel.julia_level(level::Integer) -> Logging.LogLevel

The Julia level of a library level (0 to 1000, Python's numbers): DEBUG (10) is `Logging.Debug`,
INFO (20) `Logging.Info`, WARNING (30) `Logging.Warn`, ERROR (40) `Logging.Error`, CRITICAL (50)
`LogLevel(2001)`; the numbers in between linearly in between (41 to 49 are `Logging.Error`).
"""
function julia_level(level::Integer)
    level = clamp(level, 0, MAX_C_LEVEL)
    for i in 1:length(LEVEL_POINTS)-1
        (c0, j0), (c1, j1) = LEVEL_POINTS[i], LEVEL_POINTS[i+1]
        level <= c1 && return LogLevel(j0 + fld((level - c0) * (j1 - j0), c1 - c0))
    end
end

"""
    Accel.library_level(level::Logging.LogLevel) -> Int32

The library level of a Julia level, the inverse of `julia_level` for its values (the nearest
otherwise, clamped to 0 to 1000): `Logging.Info` is 20, `Logging.Error + 1` 50 (CRITICAL).
"""
function library_level(level::LogLevel)
    j = Int(level.level)
    (_, lowest), (_, highest) = LEVEL_POINTS[1], LEVEL_POINTS[end]
    j <= lowest && return Int32(0)
    j >= highest && return Int32(MAX_C_LEVEL)
    for i in 1:length(LEVEL_POINTS)-1
        (c0, j0), (c1, j1) = LEVEL_POINTS[i], LEVEL_POINTS[i+1]
        j <= j1 && return Int32(c0 + round(Int, (j - j0) * (c1 - c0) / (j1 - j0)))
    end
end
library_level(level::Integer) = Int32(clamp(level, typemin(Int32), typemax(Int32)))

"""
    log_message(acc, level, message; main_process_only = true, in_order = false)

Logs `message` at `level` (Accelerate's `get_logger(...).log(level, message, main_process_only =
..., in_order = ...)`): a `Logging.LogLevel` (`Logging.Info`, `Logging.Warn`, ...) or the library's
number (Python's: 20 is INFO, 50 CRITICAL; 0 to 1000). A message below the accelerator's level
(`log_level`) is dropped on every rank. Otherwise it goes to the accelerator's sink: by default
`Logging.current_logger()` of this task, with the level mapped, `_module` `Accel`, `_group`
`:libaccel` and the fields `rank` (this process's index, from 0) and `processes`, so the
program's logger (`global_logger`, `with_logger`, its level, JULIA_DEBUG=Accel) decides the rest.

- `main_process_only = true`: only the main process (rank 0) writes; on the others the call
  checks its arguments and returns.
- `main_process_only = false`: every process writes, each when it gets there.
- `main_process_only = false, in_order = true`: every process writes, rank 0 first, a barrier
  after each rank: a collective every rank calls (bounded by the collective timeout).
  `in_order` without `main_process_only = false` changes nothing.

A sink that throws (see `set_log_sink!`) makes the call throw `AccelError` (`ERR_CALLBACK`) with
the exception as `cause`; in order, only after every barrier, so no rank is left waiting. Called
from inside the sink it is `ERR_STATE`; a level outside 0 to 1000 `ERR_INVALID_ARGUMENT`; a NUL
in `message` an `ArgumentError`.
"""
function log_message(acc::Accelerator, level::Union{LogLevel,Integer}, message::AbstractString;
                     main_process_only::Bool = true, in_order::Bool = false)
    flags = main_process_only ? UInt32(0) : LOG_ALL_PROCESSES
    in_order && (flags |= LOG_IN_ORDER)
    number = library_level(level)
    text = c_text(message)
    call_sink(acc, "log_message") do
        @acall accel_log_message(acc, number, flags, text)
    end
end

"""
    log_level(acc) -> Logging.LogLevel

The accelerator's level: messages below it are dropped on every rank, before any logger sees
them. From the configuration key `log_level` (ACCELERATE_LOG_LEVEL or ACCEL_LOG_LEVEL: notset,
debug, info, warning, error or critical), `Logging.Info` by default; `set_log_level!` changes it.
"""
log_level(acc::Accelerator) = julia_level(@out Int32 accel_get_log_level(acc))

"""
    set_log_level!(acc, level) -> acc

Sets the accelerator's level (see `log_level`): a `Logging.LogLevel` (`Logging.Debug` lets debug
messages through to the logger, whose own level still applies) or the library's number (0 to
1000; outside is `ERR_INVALID_ARGUMENT`). Each process has its own: set it on every rank.
"""
function set_log_level!(acc::Accelerator, level::Union{LogLevel,Integer})
    number = library_level(level)
    @check accel_set_log_level(acc, number)
    acc
end

"""
    set_log_sink!(acc)                    # Julia's logging (the default)
    set_log_sink!(acc, logger::Logging.AbstractLogger)
    set_log_sink!(acc, sink)              # sink(level::LogLevel, message::String, rank::Int)
    set_log_sink!(acc, nothing)           # the library's lines on standard error
    -> acc

Where the accelerator's messages go (those `log_message` lets through on this process):

- no sink: `Logging.current_logger()` of the task that logs, as every accelerator starts;
- a logger: that logger, whatever the task's;
- a function (any callable): `sink(level, message, rank)` with the Julia level, the text and the
  rank writing it (from 0). What it throws fails the `log_message` with `ERR_CALLBACK`, the
  exception as `cause`; its return value is ignored. It runs on the task that called
  `log_message`, one call at a time (other tasks wait); it must not call `log_message` or
  `set_log_sink!` (`ERR_STATE`);
- `nothing`: the library's own lines on standard error, `"INFO: message"`, or `"INFO [rank
  1/2]: message"` for a message of every process when there are several.

A logger's own failures are Julia's logging's to report (it prints them), not errors of the call.
"""
set_log_sink!(acc::Accelerator) = replace_sink!(acc, nothing, false)
set_log_sink!(acc::Accelerator, ::Nothing) = replace_sink!(acc, nothing, true)
set_log_sink!(acc::Accelerator, sink) = replace_sink!(acc, sink, false)

# `sink` (nothing: Julia's logging of the calling task) behind the trampoline, or the library's
# lines on standard error.
function replace_sink!(acc::Accelerator, sink, library::Bool)
    state = acc.logging
    state.calling === current_task() && throw(AccelError(ERR_STATE,
        "set_log_sink! from inside the accelerator's log sink"))
    lock(state.lock)
    try
        if library
            @check accel_set_log_sink(acc, C_NULL, C_NULL, C_NULL)
        else
            install_log_sink(acc)   # the same trampoline and state: only the Julia sink changes
        end
        state.sink = sink
    finally
        unlock(state.lock)
    end
    acc
end

# The trampoline with the accelerator's state as user_data. No release: the accelerator roots the
# state for its whole life, and the library calls the sink on the logging thread only.
function install_log_sink(acc::Accelerator)
    state = acc.logging
    GC.@preserve state begin
        @check accel_set_log_sink(acc, LOG_SINK_TRAMPOLINE[], pointer_from_objref(state), C_NULL)
    end
end

# Makes `call()`, a ccall that may run the sink and returns its status, as call_trackers does:
# ERR_CALLBACK carries the sink's exception; one such call at a time per accelerator, since the
# library's sink state is per thread and a sink that yields would let another task of this thread
# in; a call from inside the sink is refused here, before the library.
function call_sink(call, acc::Accelerator, what::AbstractString)
    state = acc.logging
    state.calling === current_task() && throw(AccelError(ERR_STATE,
        "$what from inside the accelerator's log sink: a sink must not log through it"))
    lock(state.lock)
    try
        state.failure = nothing
        status = call()
        cause = status == Int32(ERR_CALLBACK) ? state.failure : nothing
        state.failure = nothing
        status == 0 || throw_status(status, cause)
    finally
        unlock(state.lock)
    end
    nothing
end

function deliver(::Nothing, level::LogLevel, message::String, rank::Int, processes::Int)
    @logmsg(level, message, _module = Accel, _group = :libaccel, _file = nothing, _line = nothing,
            rank = rank, processes = processes)
end
deliver(logger::AbstractLogger, level, message, rank, processes) =
    with_logger(() -> deliver(nothing, level, message, rank, processes), logger)
deliver(sink, level, message, rank, processes) = sink(level, message, rank)

# The library's sink. Never lets an exception escape into C: it is kept for call_sink, and the
# sink fails.
function log_sink_trampoline(level::Int32, rank::Int32, flags::UInt32, message::Ptr{UInt8},
                             user_data::Ptr{Cvoid})::Int32
    state = unsafe_pointer_to_objref(user_data)::LogSinkState
    state.calling = current_task()
    try
        deliver(state.sink, julia_level(level), unsafe_string(message), Int(rank), state.processes)
        return Int32(0)
    catch exception
        state.failure = (exception, catch_backtrace())
        return Int32(1)
    finally
        state.calling = nothing
    end
end

const LOG_SINK_TRAMPOLINE = Ref{Ptr{Cvoid}}(C_NULL)
