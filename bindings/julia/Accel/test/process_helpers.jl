# is_last_process, the on_* helpers and local_main_process_first in one process.
# Included by runtests.jl inside its top test set.

@testset "process helpers, one process" begin
    Accelerator() do acc
        @test is_last_process(acc)   # the only process is the main and the last one
        ran = Symbol[]
        @test on_main_process(() -> (push!(ran, :main); 1), acc) == 1
        @test on_local_main_process(() -> (push!(ran, :local); 2), acc) == 2
        @test on_last_process(() -> (push!(ran, :last); 3), acc) == 3
        @test on_process(acc, 0) do
            push!(ran, :rank0)
            4
        end == 4
        @test ran == [:main, :local, :last, :rank0]
        # Ranks count from 0: the only rank here is 0.
        e = error_of(() -> on_process(() -> push!(ran, :rank1), acc, 1))
        @test e.status == Accel.ERR_INVALID_ARGUMENT && occursin("0:0", e.message)
        @test ran == [:main, :local, :last, :rank0]
        @test local_main_process_first(() -> 42, acc) == 42
        @test_throws ErrorException local_main_process_first(() -> error("inside"), acc)
        @test local_main_process_first(() -> :again, acc) == :again   # the end ran despite it
        wait_for_everyone(acc)
    end
end
