# The profiler: Accelerate's accelerator.profile(ProfileKwargs(...)) on LibTorch's profiler.

"""
    Profiler(acc; on_trace_ready = nothing, options...)
    Profiler(f, acc; on_trace_ready = nothing, options...)
    profile(f, acc; on_trace_ready = nothing, options...) -> Profiler

LibTorch's profiler, as Accelerate's `accelerator.profile(ProfileKwargs(...))`. Options (`set!`,
before `start!`): `activities` ("cpu", "cuda" or "cpu,cuda"; cpu by default), torch.profiler's
schedule (`wait`, `warmup`, `active`, `repeat`, `skip_first`: setting any gives a schedule, the
others 0 but `active` 1; without one the whole run is one window), `record_shapes`,
`profile_memory`, `with_stack`, `with_flops`, `with_modules`, `output_trace_dir`.

`start!(p)`, then `step!(p)` at the start of each step (torch's `prof.step()`), then `stop!(p)`,
all from one task (LibTorch records the calling thread's operators). At `stop!`, with an
`output_trace_dir`, every rank writes `profile_<rank>.json` there (the last complete window as
Chrome-trace JSON), the ranks wait for each other (a collective) and the main process logs the
window's summary table. `table(p)` is that table (ending with "Self CPU time total: ..."),
`export_chrome_trace(p, path)` writes the window, `window_count(p)` counts the complete windows.

`on_trace_ready(p)` is called (on the calling task) each time a window is complete
(`on_trace_ready!` sets it later); it may read the window with `table` and `export_chrome_trace`.
What it throws comes out of the `step!` or `stop!` that completed the window as an `AccelError`
(`ERR_CALLBACK`) with the exception as `cause`, as for the package's other callbacks.

`profile(f, acc; ...)` is Accelerate's `with accelerator.profile(...) as prof:`: it starts a
profiler, runs `f(prof)`, stops it and returns it for reading (close it when done, or leave it to
the finalizer); when `f` throws, the profiler is freed without writing anything and the
exception goes on. `Profiler(f, acc; ...)` is the do-block form of every handle: `f(p)`, then
`close(p)`.

    windows = Ref(0)
    prof = profile(acc; wait = 1, warmup = 1, active = 2, repeat = 2,
                   on_trace_ready = p -> (windows[] += 1)) do prof
        for (x, y) in loader
            step!(prof)
            train_step!(acc, model, opt, x, y)
        end
    end
    println(table(prof; row_limit = 10))
"""
mutable struct Profiler <: Handle
    ptr::Ptr{Cvoid}
    on_trace_ready::Any   # the trace-ready function, or nothing
    failure::Any          # (exception, backtrace) of the trace-ready function that failed
    Profiler(pointer::Ptr{Cvoid}) = own(new(pointer, nothing, nothing))
end

function Profiler(acc::Accelerator; on_trace_ready = nothing, options...)
    profiler = with_options!(Profiler(@out(Ptr{Cvoid}, accel_profiler_new(acc))), options)
    try
        on_trace_ready === nothing || on_trace_ready!(profiler, on_trace_ready)
    catch
        close(profiler)
        rethrow()
    end
    profiler
end
Profiler(f::Function, acc::Accelerator; options...) = with_handle(f, Profiler(acc; options...))

"""
    profile(f, acc; on_trace_ready = nothing, options...) -> Profiler

Accelerate's `with accelerator.profile(...) as prof:`: starts a `Profiler` with `options`, runs
`f(prof)`, stops it and returns it for reading (`table`, `window_count`). When `f` throws, the
profiler is freed without writing anything and the exception goes on. See `Profiler`.
"""
function profile(f, acc::Accelerator; options...)
    profiler = Profiler(acc; options...)
    try
        start!(profiler)
        f(profiler)
        stop!(profiler)
    catch
        close(profiler)   # stops a running profiler without writing anything
        rethrow()
    end
    profiler
end

free_handle(::Profiler, p) = @acall accel_profiler_free(p)

function set!(profiler::Profiler, key::Union{AbstractString,Symbol}, value)
    @check accel_profiler_set(profiler, c_text(key), c_text(value))
    profiler
end

"""
    on_trace_ready!(profiler, f)

Calls `f(profiler)` each time a window is complete (`nothing`: no function). See `Profiler`.
"""
function on_trace_ready!(profiler::Profiler, f)
    # The library holds a pointer to the profiler itself, which every call that may run f keeps
    # alive (the library calls f only inside start!, step! and stop! of this profiler).
    if f === nothing
        @check accel_profiler_set_on_trace_ready(profiler, C_NULL, C_NULL)
    else
        @check accel_profiler_set_on_trace_ready(profiler, TRACE_READY_TRAMPOLINE[],
                                                 pointer_from_objref(profiler))
    end
    profiler.on_trace_ready = f
    profiler
end

function trace_ready_trampoline(user_data::Ptr{Cvoid}, ::Ptr{Cvoid})::Int32
    profiler = unsafe_pointer_to_objref(user_data)::Profiler
    try
        profiler.on_trace_ready(profiler)
        return Int32(0)
    catch exception
        profiler.failure = (exception, catch_backtrace())
        return Int32(ERR_CALLBACK)
    end
end

const TRACE_READY_TRAMPOLINE = Ref{Ptr{Cvoid}}(C_NULL)

# The status of a call that may have run the trace-ready function: its failure is the cause.
function check_profiler(profiler::Profiler, status::Int32)
    failure = profiler.failure
    profiler.failure = nothing
    status == 0 || throw_status(status, failure)
    profiler
end

"Starts the profiler: step 0 of the schedule. `ERR_STATE` when started before."
start!(profiler::Profiler) = check_profiler(profiler, @acall(accel_profiler_start(profiler)))

"""
    step!(profiler)

The next step begins (torch's `prof.step()`): call it at the start of each step.
"""
step!(profiler::Profiler) = check_profiler(profiler, @acall(accel_profiler_step(profiler)))

"The end of the profiled run: the trace files, a collective with an `output_trace_dir`."
stop!(profiler::Profiler) = check_profiler(profiler, @acall(accel_profiler_stop(profiler)))

"""
    table(profiler; sort_by = :cpu_time_total, row_limit = -1) -> String

The summary table of the last complete window (torch's `key_averages().table()`): a row per
operator, sorted by `sort_by` (`:cpu_time_total`, `:self_cpu_time_total`, `:count`, `:name`), at
most `row_limit` rows (-1: all), ending with "Self CPU time total: ...".
"""
function table(profiler::Profiler; sort_by = :cpu_time_total, row_limit::Integer = -1)
    sort = c_text(sort_by)
    read_text() do buffer, capacity, size
        @acall accel_profiler_table(profiler, sort, Int64(row_limit), buffer, capacity, size)
    end
end

"Writes the last complete window to `path` as Chrome-trace JSON (chrome://tracing, Perfetto)."
function export_chrome_trace(profiler::Profiler, path::AbstractString)
    @check accel_profiler_export_chrome_trace(profiler, c_text(path))
    path
end

"How many windows were complete (`on_trace_ready` calls) so far."
window_count(profiler::Profiler) =
    Int(@out Int64 accel_profiler_window_count(profiler))
