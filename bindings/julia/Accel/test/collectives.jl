# split_between_processes and the trigger in one process.
# Included by runtests.jl inside its top test set.

@testset "split_between_processes and the trigger, one process" begin
    Accelerator() do acc
        # A world of one takes every item, unpadded, whatever the padding.
        @test split_between_processes(acc, ["a", "b", "c"]) == ["a", "b", "c"]
        @test split_between_processes(acc, [1, 2, 3]; apply_padding = true) == [1, 2, 3]
        @test split_between_processes(acc, Int[]) == Int[]
        @test split_between_processes(acc, view([5, 6, 7, 8], 2:4)) == [6, 7, 8]
        A = Float32[1 2 3; 4 5 6]
        @test split_between_processes(acc, A; apply_padding = true) == A
        t = Tensor(A)
        @test split_between_processes(Array, acc, t) == A
        close(t)
        @test error_of(() -> split_between_processes(acc, Tensor(1.0))).status == Accel.ERR_SHAPE
        @test split_between_processes(acc, Dict("p" => ["a", "b"], "n" => [1, 2])) ==
              Dict("p" => ["a", "b"], "n" => [1, 2])
        @test split_between_processes(acc, (x = [1 2; 3 4], y = [5, 6]); apply_padding = true) ==
              (x = [1 2; 3 4], y = [5, 6])
        e = error_of(() -> split_between_processes(acc, Dict("a" => [1], "b" => [1, 2])))
        @test e.status == Accel.ERR_INVALID_ARGUMENT && occursin("same length", e.message)
        # The trigger: set, seen once, then lowered.
        @test check_trigger(acc) == false
        set_trigger!(acc)
        @test check_trigger(acc) == true
        @test check_trigger(acc) == false
    end
end
