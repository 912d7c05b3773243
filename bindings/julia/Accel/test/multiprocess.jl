# Real processes over real sockets under `accel launch`, and the Julia example against the C one.
# Included by runtests.jl inside its top test set.

@testset "two processes under accel launch" begin
    code, out = run_output(launch(2, joinpath(PACKAGE_DIR, "examples", "collectives.jl")))
    @test code == 0
    lines = split(out, '\n')
    for line in ["rank 0 of 2 (local rank 0) on cpu, main process",
                 "rank 1 of 2 (local rank 1) on cpu",
                 "distributed type MULTI_CPU, mixed precision no, libaccel 0.2.4",
                 "gather                   shape [4] values 0 1 10 11",
                 "pad + gather             shape [4] values 1 -1 1 1",
                 "reduce sum of rank+1     shape [] values 3",
                 "reduce mean of rank+1    shape [] values 1.5",
                 "broadcast from last rank shape [3] values 3.5 4.5 5.5",
                 "gather_object[0]       \"hello from rank 0\"",
                 "gather_object[1]       \"hello from rank 1\""]
        @test line in lines
    end
    code == 0 || println(out)

    code, out = run_output(launch(2, joinpath(@__DIR__, "ranks.jl"), "train"))
    @test code == 0
    @test "rank 0: the loss fell, parameters equal on every rank" in split(out, '\n')
    @test "rank 1: the loss fell, parameters equal on every rank" in split(out, '\n')
    # The same run: join_uneven_inputs with 3 batches on rank 0 and 2 on rank 1 (test/ranks.jl).
    @test "rank 0: 3 steps in join_uneven_inputs, parameters equal on every rank" in split(out, '\n')
    @test "rank 1: 2 steps in join_uneven_inputs, parameters equal on every rank" in split(out, '\n')
    # The same run: split_between_processes and the trigger on two ranks (test/ranks.jl).
    @test "rank 0: split [1, 2], padded [1, 2]; the trigger of rank 1 seen, then lowered" in split(out, '\n')
    @test "rank 1: split [3], padded [3, 3]; the trigger of rank 1 seen, then lowered" in split(out, '\n')
    @test "rank 0: rand() after set_seed is the same on every rank" in split(out, '\n')
    @test "rank 1: rand() after set_seed is the same on every rank" in split(out, '\n')
    # And a stream of 5 samples in batches of 1, dispatched and not (test/ranks.jl).
    @test "rank 0: stream labels [[0], [2], [4]], dispatched and not" in split(out, '\n')
    @test "rank 1: stream labels [[1], [3], [0]], dispatched and not" in split(out, '\n')
    # And the logger (test/ranks.jl): the main process's message once, every process's once per
    # rank with its rank, the in-order ones in rank order, nothing below the level; a sink failing
    # in order on rank 1 fails there alone.
    logged = filter(l -> startswith(l, "log "), split(out, '\n'))
    @test count(==("log Info rank 0/2: once, from the main process"), logged) == 1
    @test count(l -> occursin("once, from the main process", l), logged) == 1
    @test count(==("log Warn rank 0/2: from every rank"), logged) == 1
    @test count(==("log Warn rank 1/2: from every rank"), logged) == 1
    @test filter(l -> occursin("in order", l), logged) ==
          ["log Info rank $r/2: in order, turn $t" for t in 1:3 for r in 0:1]
    @test !any(l -> occursin("below the level", l), logged)
    @test "rank 0: logged, a failing sink reported on rank 1 alone" in split(out, '\n')
    @test "rank 1: logged, a failing sink reported on rank 1 alone" in split(out, '\n')
    code == 0 || println(out)

    # One process x 64 against two x 32: the same parameters.
    dir = mktempdir()
    one, two = joinpath(dir, "1x64.txt"), joinpath(dir, "2x32.txt")
    c1, o1 = run_output(launch(1, joinpath(@__DIR__, "ranks.jl"), "equiv", "64", one))
    c2, o2 = run_output(launch(2, joinpath(@__DIR__, "ranks.jl"), "equiv", "32", two))
    @test c1 == 0 && c2 == 0
    read_params(path) = Dict(let w = split(l); w[1] => parse.(Float64, w[2:end]) end for l in readlines(path))
    # The 4 parameters in files `a` and `b`, each within `tolerance` x its largest value.
    function params_close(a, b, tolerance)
        x, y = read_params(a), read_params(b)
        @test length(x) == 4 && keys(x) == keys(y)
        for (name, values) in x
            @test maximum(abs.(values .- y[name])) <= tolerance * maximum(abs.(values))
        end
    end
    if c1 == 0 && c2 == 0
        params_close(one, two, 1e-5)
    else
        println(o1, o2)
    end

    # ZeRO stage 2 chosen through the configuration (each rank steps, and keeps the gradients of,
    # the parameters it owns) trains to what stage 0 does, with AdamW on two ranks.
    plain, sharded, state = joinpath(dir, "stage0.txt"), joinpath(dir, "stage2.txt"), joinpath(dir, "state")
    c1, o1 = run_output(launch(2, joinpath(@__DIR__, "ranks.jl"), "equiv", "32", plain, "adamw"))
    c2, o2 = run_output(launch(2, joinpath(@__DIR__, "ranks.jl"), "equiv", "32", sharded, "adamw", "2", state))
    @test c1 == 0 && c2 == 0
    if c1 == 0 && c2 == 0
        params_close(plain, sharded, 1e-6)
        # The job was sharded: each rank saved its own part of the optimizer state.
        @test isfile(joinpath(state, "optimizer_0.rank_0.safetensors"))
        @test isfile(joinpath(state, "optimizer_0.rank_1.safetensors"))
    else
        println(o1, o2)
    end

    # The example on two ranks: the loss falls, the accuracy is already well above chance.
    code, out = run_output(launch(2, joinpath(PACKAGE_DIR, "examples", "train_fashion_mnist.jl"), "--max-steps", "300"))
    @test code == 0
    losses = values_after(out, " loss ")
    @test length(losses) == 3 && losses[3] < losses[1]
    accuracy = values_after(out, "test accuracy ")
    @test length(accuracy) == 1 && accuracy[1] >= 0.7
    code == 0 || println(out)
end

@testset "the Julia example prints what the C example prints" begin
    args = ["--max-steps", "200", "--workers", "0"]
    c_code, from_c = run_output(`$(joinpath(c_examples_dir(), "train_fashion_mnist")) $args`)
    j_code, from_julia = run_output(`$(julia_cmd()) $(joinpath(PACKAGE_DIR, "examples", "train_fashion_mnist.jl")) $args`)
    # Everything but the timings, and the messages' text alone: the C example's logger writes
    # "INFO: text" (or printed it before), Julia's ConsoleLogger "┌ Info: text" and the fields.
    function keep(out)
        lines = filter(l -> !startswith(l, "│") && !startswith(l, "└"), split(strip(out), '\n'))
        map(lines) do line
            line = replace(line, r"^(INFO: |┌ Info: |\[ Info: )" => "")
            line = split(line, " after ")[1]
            parts = split(line, " loss ")
            length(parts) == 2 ? parts[1] * " loss " * split(parts[2])[1] : line
        end
    end
    @test c_code == 0 && j_code == 0
    @test keep(from_c) == keep(from_julia) && length(keep(from_c)) == 4
    keep(from_c) == keep(from_julia) || println("C:\n", from_c, "\nJulia:\n", from_julia)
end
