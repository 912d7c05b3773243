# The step helpers and set_seed on two real processes under `accel launch` (ranks_step_tools.jl).
# Included by runtests.jl inside its top test set.

@testset "step helpers and set_seed on two processes" begin
    program = joinpath(@__DIR__, "ranks_step_tools.jl")
    code, out = run_output(launch(2, program, "steps", "seed"))
    @test code == 0
    lines = split(out, '\n')
    for r in 0:1
        @test "rank $r: find_executable_batch_size gave 19 on every rank" in lines
        @test "rank $r: LocalSGD averaged 3 times over 5 steps, parameters equal on every rank" in
              lines
    end
    @test "rank 0: the per-process helpers ran [:main, :local]" in lines
    @test "rank 1: the per-process helpers ran [:last, :one]" in lines
    code == 0 || println(out)

    # rand() after set_seed(acc, 42): the same on both ranks of both runs (four values); with
    # device_specific the two ranks differ (and each is the same in both runs).
    again_code, again = run_output(launch(2, program, "seed"))
    @test again_code == 0
    pattern = r"rank (\d): rand\(\) after set_seed\(acc, 42\) (\S+) device_specific (\S+)"
    draws(text) = Dict(parse(Int, m[1]) => (parse(Float64, m[2]), parse(Float64, m[3]))
                       for m in eachmatch(pattern, text))
    first, second = draws(out), draws(again)
    @test length(first) == 2 && length(second) == 2
    if length(first) == 2 && length(second) == 2
        plain = [first[0][1], first[1][1], second[0][1], second[1][1]]
        @test all(==(plain[1]), plain)
        @test first[0][2] != first[1][2]
        @test first == second
    else
        println(out, again)
    end
end
