# Experiment tracking, with trackers of the tests' own.
# Included by runtests.jl inside its top test set.

# Custom trackers of the tests (types are defined at the top level).
struct Recorder <: AbstractTracker   # every call it gets, in order
    calls::Vector{Any}
end
Accel.start(r::Recorder, project, config) = push!(r.calls, (:start, project, config))
Accel.log_values(r::Recorder, values, step) = push!(r.calls, (:log, values, step))
Accel.finish(r::Recorder) = push!(r.calls, (:finish,))

struct FailingLog <: AbstractTracker end   # start and finish: the defaults
Accel.log_values(::FailingLog, values, step) = throw(DomainError(step, "this tracker cannot log"))

struct FailingStart <: AbstractTracker end
Accel.start(::FailingStart, project, config) = error("cannot start $project")
Accel.log_values(::FailingStart, values, step) = nothing

struct Reentrant <: AbstractTracker   # logs from inside its log: refused
    acc::Accelerator
end
Accel.log_values(r::Reentrant, values, step) = log_values(r.acc, values)

struct NoLog <: AbstractTracker end

struct Sleepy <: AbstractTracker   # yields inside its log
    steps::Vector{Any}
end
Accel.log_values(s::Sleepy, values, step) = (sleep(0.05); push!(s.steps, step))

@testset "trackers" begin
    # Values from Julia collections, in their order; read back as the trackers get them.
    values = Accel.Values((loss = 0.5, note = "hi", n = 3, flag = true, optimizer = :adamw, bad = NaN))
    got = Accel.read_values(values)
    @test got isa TrackedValues
    @test isequal(got, ["loss" => 0.5, "note" => "hi", "n" => 3.0, "flag" => 1.0,
                        "optimizer" => "adamw", "bad" => NaN])
    close(values)
    values = Accel.Values(["b" => 1, "a" => 2, :b => 3])   # a name given twice keeps its place
    @test Accel.read_values(values) == ["b" => 3.0, "a" => 2.0]
    close(values)
    values = Accel.Values(Dict("x" => Inf))
    @test Accel.read_values(values) == ["x" => Inf]
    close(values)
    @test_throws ArgumentError Accel.Values((x = [1, 2],))
    @test_throws ArgumentError Accel.Values((x = nothing,))
    @test_throws ArgumentError Accel.Values([1 => 2.0])
    @test_throws ArgumentError Accel.Values(42)
    @test_throws ArgumentError Accel.Values(["a" => "b\0c"])
    @test error_of(() -> Accel.Values(("" => 1,))).status == Accel.ERR_INVALID_ARGUMENT
    # Accelerate's log is Base's logarithm: the package's verb is log_values, no method of log.
    @test all(m -> m.module !== Accel, methods(log))

    e = error_of(() -> Accelerator(log_with = "wandb"))
    @test e.status == Accel.ERR_CONFIG && occursin("wandb", e.message)

    dir = mktempdir()
    rec = Recorder(Any[])
    Accelerator(log_with = "jsonl", logging_dir = dir) do acc
        e = error_of(() -> log_values(acc, (loss = 1.0,)))
        @test e.status == Accel.ERR_STATE && occursin("init_trackers", e.message)
        @test add_tracker!(acc, "recorder", rec) === acc
        @test_throws ArgumentError add_tracker!(acc, "nolog", NoLog())
        @test error_of(() -> add_tracker!(acc, "recorder", Recorder(Any[]))).status == Accel.ERR_INVALID_ARGUMENT
        @test error_of(() -> add_tracker!(acc, "jsonl", Recorder(Any[]))).status == Accel.ERR_INVALID_ARGUMENT
        @test error_of(() -> init_trackers(acc, "a/b")).status == Accel.ERR_INVALID_ARGUMENT

        init_trackers(acc, "run1"; config = (lr = 0.001, optimizer = "adamw"))
        @test error_of(() -> init_trackers(acc, "run1")).status == Accel.ERR_STATE
        @test error_of(() -> add_tracker!(acc, "late", Recorder(Any[]))).status == Accel.ERR_STATE
        log_values(acc, (loss = 0.5, note = "first"); step = 1)
        log_values(acc, "b" => 2, "a" => 1)            # no step
        log_values(acc, Dict("only" => 7); step = 3)
        @test error_of(() -> log_values(acc, (x = 1,); step = -1)).status == Accel.ERR_INVALID_ARGUMENT
        end_training(acc)
        end_training(acc)   # no run: nothing to do
        @test error_of(() -> log_values(acc, (loss = 1.0,))).status == Accel.ERR_STATE
        @test rec.calls == [(:start, "run1", ["lr" => 0.001, "optimizer" => "adamw"]),
                            (:log, ["loss" => 0.5, "note" => "first"], 1),
                            (:log, ["b" => 2.0, "a" => 1.0], nothing),
                            (:log, ["only" => 7.0], 3),
                            (:finish,)]
        @test rec.calls[2][2] isa TrackedValues
        lines = readlines(joinpath(dir, "run1", "metrics.jsonl"))
        @test length(lines) == 3
        @test startswith(lines[1], "{\"step\": 1, \"wall_time\": ") &&
              endswith(lines[1], ", \"values\": {\"loss\": 0.5, \"note\": \"first\"}}")
        @test startswith(lines[2], "{\"step\": null, ") && endswith(lines[2], "{\"b\": 2, \"a\": 1}}")
        @test startswith(lines[3], "{\"step\": 3, ") && endswith(lines[3], "{\"only\": 7}}")
        @test occursin("\"lr\": 0.001", read(joinpath(dir, "run1", "hparams.json"), String))

        # A tracker that throws: the call throws ERR_CALLBACK with the exception as its cause,
        # after every tracker got the values (the file its line, the recorder its call).
        add_tracker!(acc, "failing", FailingLog())
        init_trackers(acc, "run2")
        e = error_of(() -> log_values(acc, (loss = 0.25,); step = 5))
        @test e.status == Accel.ERR_CALLBACK && occursin("failing", e.message)
        @test e.cause !== nothing && e.cause[1] isa DomainError && e.cause[1].val == 5
        @test occursin("this tracker cannot log", sprint(showerror, e))
        lines = readlines(joinpath(dir, "run2", "metrics.jsonl"))
        @test length(lines) == 1 && startswith(lines[1], "{\"step\": 5, ")
        @test rec.calls[end] == (:log, ["loss" => 0.25], 5)
        e = error_of(() -> log_values(acc, (loss = 0.125,); step = 6))   # each call its own failure
        @test e.status == Accel.ERR_CALLBACK && e.cause[1].val == 6
        end_training(acc)
        @test rec.calls[end] == (:finish,)

        # A start that throws: nothing half-started, the trackers already started are finished.
        add_tracker!(acc, "failing start", FailingStart())
        n = length(rec.calls)
        e = error_of(() -> init_trackers(acc, "run3"; config = ["seed" => 1]))
        @test e.status == Accel.ERR_CALLBACK && occursin("failing start", e.message)
        @test e.cause[1] isa ErrorException && occursin("cannot start run3", e.cause[1].msg)
        @test rec.calls[n+1:end] == [(:start, "run3", ["seed" => 1.0]), (:finish,)]
        @test error_of(() -> log_values(acc, (loss = 1.0,))).status == Accel.ERR_STATE
    end

    # The do-block form ends the run, after an exception too (which is what comes out); closing
    # the accelerator ends a started run; a tracker's method may not log.
    rec = Recorder(Any[])
    Accelerator(log_with = "jsonl,csv", project_dir = dir) do acc
        add_tracker!(acc, "recorder", rec)
        @test init_trackers(acc, "run4") do
            log_values(acc, [:accuracy => 0.75]; step = 0)
            42
        end == 42
        @test rec.calls == [(:start, "run4", []), (:log, ["accuracy" => 0.75], 0), (:finish,)]
        @test isfile(joinpath(dir, "run4", "metrics.csv"))
        @test_throws DomainError init_trackers(() -> throw(DomainError(1)), acc, "run4")
        @test rec.calls[end] == (:finish,)
        @test error_of(() -> log_values(acc, (loss = 1.0,))).status == Accel.ERR_STATE
        init_trackers(acc, "run4")
    end
    @test rec.calls[end] == (:finish,) && count(==((:finish,)), rec.calls) == 3
    @test length(readlines(joinpath(dir, "run4", "metrics.jsonl"))) == 1   # appended runs

    Accelerator() do acc   # no log_with: custom trackers alone, no files
        add_tracker!(acc, "reentrant", Reentrant(acc))
        init_trackers(acc, "run5")
        e = error_of(() -> log_values(acc, (loss = 1.0,)))
        @test e.status == Accel.ERR_CALLBACK
        @test e.cause[1] isa AccelError && e.cause[1].status == Accel.ERR_STATE
        @test error_of(() -> log_values(acc, ())).status == Accel.ERR_CALLBACK   # no values: still a call
    end
    # Another task's call while a tracker's method waits (yielded) waits for that call to end.
    sleepy = Sleepy(Any[])
    Accelerator(log_with = "jsonl", logging_dir = dir) do acc
        add_tracker!(acc, "sleepy", sleepy)
        init_trackers(acc, "run6") do
            other = @async log_values(acc, (x = 2,); step = 2)
            log_values(acc, (x = 1,); step = 1)
            wait(other)
        end
    end
    @test sleepy.steps == [1, 2]
    @test length(readlines(joinpath(dir, "run6", "metrics.jsonl"))) == 2
    # A warning the library raises itself (a torn line a killed run left, moved aside) reaches
    # the program's logger as its own messages do, at Warn.
    mkpath(joinpath(dir, "run7"))
    write(joinpath(dir, "run7", "metrics.jsonl"), "{\"st")
    Accelerator(log_with = "jsonl", logging_dir = dir) do acc
        mine = Test.TestLogger()
        set_log_sink!(acc, mine)
        init_trackers(acc, "run7") do
            nothing
        end
        @test [(r.level, occursin("metrics.jsonl.torn-1", r.message)) for r in mine.logs] ==
              [(Logging.Warn, true)]
    end
    @test read(joinpath(dir, "run7", "metrics.jsonl.torn-1"), String) == "{\"st"
end
