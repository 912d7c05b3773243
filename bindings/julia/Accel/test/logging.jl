# The logger.
# Included by runtests.jl inside its top test set.

@testset "logging" begin
    # Python's numbers against Julia's levels, both ways.
    @test Accel.julia_level.((0, 10, 20, 30, 40, 50)) ==
          (LogLevel(-2000), Logging.Debug, Logging.Info, Logging.Warn, Logging.Error,
           LogLevel(2001))
    @test Accel.julia_level.((25, 45, 51)) == (LogLevel(500), Logging.Error, LogLevel(2101))
    @test Accel.library_level.((Logging.Debug, Logging.Info, Logging.Warn, Logging.Error,
                                Logging.Error + 1, Logging.BelowMinLevel, Logging.AboveMaxLevel)) ==
          (10, 20, 30, 40, 50, 0, 1000)
    @test all(c -> Accel.library_level(Accel.julia_level(c)) == c, [0:40; 50:1000])

    Accelerator() do acc
        # Every message reaches the task's logger with its level, text, module, group and rank;
        # the accelerator's level drops what is below it first.
        @test log_level(acc) == Logging.Info
        logger = Test.TestLogger(min_level = Logging.Debug)
        with_logger(logger) do
            log_message(acc, Logging.Info, "hello")
            log_message(acc, Logging.Debug, "below the accelerator's level")
            log_message(acc, Logging.Warn, "from every process"; main_process_only = false)
            log_message(acc, Logging.Error, "in order"; main_process_only = false, in_order = true)
            log_message(acc, 50, "critical")
            log_message(acc, 35, "between warning and error")
            @test set_log_level!(acc, Logging.Debug) === acc
            log_message(acc, Logging.Debug, "debug")
            set_log_level!(acc, 40)
            log_message(acc, Logging.Warn, "below error")
        end
        @test log_level(acc) == Logging.Error
        @test [(r.level, r.message) for r in logger.logs] ==
              [(Logging.Info, "hello"), (Logging.Warn, "from every process"),
               (Logging.Error, "in order"), (LogLevel(2001), "critical"),
               (LogLevel(1500), "between warning and error"), (Logging.Debug, "debug")]
        @test all(r -> r._module === Accel && r.group === :libaccel &&
                       Dict(r.kwargs) == Dict(:rank => 0, :processes => 1), logger.logs)
        # The program's logger has the last word: its level, after the accelerator's.
        set_log_level!(acc, Logging.Debug)
        @test_logs (:warn, "warned") min_level = Logging.Warn begin
            log_message(acc, Logging.Info, "not at the logger's level")
            log_message(acc, Logging.Warn, "warned")
        end
        @test error_of(() -> log_message(acc, 1001, "x")).status == Accel.ERR_INVALID_ARGUMENT
        @test error_of(() -> set_log_level!(acc, -1)).status == Accel.ERR_INVALID_ARGUMENT
        @test_throws ArgumentError log_message(acc, Logging.Info, "a\0b")

        # Sinks: a logger of the program's, whatever the task's; a function; one that throws,
        # reported with its exception; one that logs or replaces the sink, refused; the library's
        # lines on standard error; Julia's logging again.
        mine = Test.TestLogger()
        @test set_log_sink!(acc, mine) === acc
        @test_logs log_message(acc, Logging.Info, "to the program's logger")
        @test [(r.message, r.kwargs[:rank]) for r in mine.logs] == [("to the program's logger", 0)]
        got = []
        set_log_sink!(acc, (level, message, rank) -> push!(got, (level, message, rank)))
        log_message(acc, Logging.Warn, "to a function")
        @test got == [(Logging.Warn, "to a function", 0)]
        set_log_sink!(acc, (level, message, rank) -> throw(DomainError(rank, "can't log $message")))
        e = error_of(() -> log_message(acc, Logging.Info, "this"))
        @test e.status == Accel.ERR_CALLBACK && e.cause[1] isa DomainError
        @test occursin("can't log this", sprint(showerror, e))
        set_log_sink!(acc, (level, message, rank) -> log_message(acc, level, message))
        e = error_of(() -> log_message(acc, Logging.Info, "again"))
        @test e.status == Accel.ERR_CALLBACK && e.cause[1].status == Accel.ERR_STATE
        set_log_sink!(acc, (level, message, rank) -> set_log_sink!(acc))
        e = error_of(() -> log_message(acc, Logging.Info, "replaced"))
        @test e.status == Accel.ERR_CALLBACK && e.cause[1].status == Accel.ERR_STATE
        set_log_sink!(acc, nothing)
        path = tempname()
        open(path, "w") do io
            redirect_stderr(() -> log_message(acc, Logging.Warn, "the library's line"), io)
        end
        @test read(path, String) == "WARNING: the library's line\n"
        set_log_sink!(acc)
        @test_logs (:info, "Julia's again") log_message(acc, Logging.Info, "Julia's again")
    end

    # The level from the environment and from the configuration.
    withenv("ACCELERATE_LOG_LEVEL" => "warning") do
        Accelerator() do acc
            @test log_level(acc) == Logging.Warn
            @test_logs (:warn, "passes") begin
                log_message(acc, Logging.Info, "dropped")
                log_message(acc, Logging.Warn, "passes")
            end
        end
    end
    Accelerator(log_level = "critical") do acc
        @test log_level(acc) == LogLevel(2001)
    end
end
