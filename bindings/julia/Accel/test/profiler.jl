# The profiler in one process.
# Included by runtests.jl inside its top test set.

@testset "profiler" begin
    # Quiet: the main process logs the summary table at stop! with an output_trace_dir.
    with_logger(NullLogger()) do
        Accelerator() do acc
            model = mlp(16, 8, 4)
            x = rand(Float32, 8, 32)
            work() = model(y -> sum(Array(y)), x)
            # Wait 1, warmup 1, active 2, repeat 2 over 20 steps: two windows, each reported once.
            dir = mktempdir()
            ready = Int[]
            tables = String[]
            function on_ready(p)
                push!(ready, window_count(p))
                push!(tables, table(p))   # the window is there to read
            end
            prof = profile(acc; wait = 1, warmup = 1, active = 2, repeat = 2,
                           output_trace_dir = dir, on_trace_ready = on_ready) do prof
                for step in 1:20
                    step!(prof)
                    work()
                end
            end
            @test prof isa Profiler && isopen(prof)
            @test ready == [1, 2] && window_count(prof) == 2
            @test all(t -> occursin("Self CPU time total:", t), tables)
            trace = joinpath(dir, "profile_0.json")
            @test isfile(trace) && occursin("aten::", read(trace, String))
            summary = table(prof)
            @test occursin("Self CPU time total:", summary) && occursin("aten::", summary)
            @test length(split(table(prof; sort_by = :count, row_limit = 1), '\n')) <
                  length(split(summary, '\n'))
            @test error_of(() -> table(prof; row_limit = -2)).status == Accel.ERR_INVALID_ARGUMENT
            exported = export_chrome_trace(prof, joinpath(dir, "again.json"))
            @test occursin("aten::", read(exported, String))
            close(prof)

            # Without a schedule the whole run is one window; the explicit verbs.
            Profiler(acc) do prof
                start!(prof)
                @test error_of(() -> start!(prof)).status == Accel.ERR_STATE
                work()
                stop!(prof)
                @test window_count(prof) == 1 && occursin("aten::", table(prof))
                @test error_of(() -> set!(prof, :active, 1)).status == Accel.ERR_STATE
            end
            @test error_of(() -> Profiler(acc; activities = "tpu")).status == Accel.ERR_INVALID_ARGUMENT

            # What the trace-ready function throws comes out of the step! that completed the window,
            # as ERR_CALLBACK with the exception as cause.
            calls = Ref(0)
            failing(p) = (calls[] += 1; error("trace-ready fails"))
            Profiler(acc; active = 1, on_trace_ready = failing) do prof
                start!(prof)
                work()
                e = error_of(() -> step!(prof))
                @test e.status == Accel.ERR_CALLBACK && calls[] == 1 && window_count(prof) == 1
                @test e.cause !== nothing && e.cause[1] isa ErrorException &&
                      e.cause[1].msg == "trace-ready fails"
            end   # freed after the failure: LibTorch's profiler is off again
            # And out of the stop! that completed it; no function (nothing) reports nothing.
            Profiler(acc; on_trace_ready = p -> throw(ArgumentError("at stop"))) do prof
                start!(prof)
                work()
                e = error_of(() -> stop!(prof))
                @test e.status == Accel.ERR_CALLBACK && e.cause[1] == ArgumentError("at stop")
            end
            Profiler(acc; on_trace_ready = p -> error("never called")) do prof
                on_trace_ready!(prof, nothing)
                start!(prof)
                work()
                stop!(prof)
                @test window_count(prof) == 1
            end
            # profile's f throwing frees the profiler, and the exception goes on.
            @test_throws ArgumentError profile(p -> throw(ArgumentError("inside")), acc)
            @test window_count(profile(p -> work(), acc)) == 1
            close(model)
        end
    end
end
