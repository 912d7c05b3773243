# The rank program of the step helpers' multi-process tests (multiprocess_step_tools.jl), run
# under `accel launch -n 2`; each argument is a part, run in order:
#   seed   prints this rank's rand() after set_seed(acc, 42), and with device_specific
#   steps  find_executable_batch_size with a different memory limit per rank, LocalSGD over
#          different data per rank, and the per-process helpers
using Accel
# The generic names Accel does not export (they would clash with Flux, MLUtils or Base).
using Accel: DataLoader, Model, Optimizer, Scheduler, call, device, shape, gather, trainmode!, testmode!
using Logging
include("helpers.jl")

function seed_draws(acc)
    rank = process_index(acc)
    set_seed(acc, 42)
    plain = rand()
    set_seed(acc, 42; device_specific = true)
    specific = rand()
    print("rank $rank: rand() after set_seed(acc, 42) $(repr(plain)) " *
          "device_specific $(repr(specific))\n")
    flush(stdout)
end

# Rank 1 runs out of memory above 20, rank 0 above 40: every rank goes on with 19, after the
# same sizes. A failure that is not out of memory on rank 1 comes out there as it was thrown and
# stops rank 0 too (ERR_PEER_FAILED).
function batch_sizes(acc)
    rank = process_index(acc)
    limit = rank == 1 ? 20 : 40
    tried = Int[]
    found = find_executable_batch_size(acc) do n
        push!(tried, n)
        n > limit && throw(AccelError(Accel.ERR_OUT_OF_MEMORY, "fake: $n is above $limit"))
    end
    expected = [128, 115, 103, 92, 82, 73, 65, 58, 52, 46, 41, 36, 32, 28, 25, 22, 19]
    found == 19 && tried == expected ||
        error("rank $rank: find_executable_batch_size gave $found after $tried")
    boom = ArgumentError("rank 1's own failure")
    e = try
        find_executable_batch_size(n -> rank == 1 && throw(boom), acc; starting_batch_size = 8)
    catch e
        e
    end
    (rank == 1 ? e === boom : e isa AccelError && e.status == Accel.ERR_PEER_FAILED) ||
        error("rank $rank: a failure on rank 1 gave $e")
    print("rank $rank: find_executable_batch_size gave 19 on every rank\n")
    flush(stdout)
end

# LocalSGD with local_sgd_steps 2 over 5 steps on different data per rank: the parameters are
# averaged at steps 2 and 4 and at the end (3 times) and agree on every rank after it.
function local_sgd(acc)
    rank = process_index(acc)
    set_seed(acc, 7)
    model = mlp(8, 4, 3)
    opt = Optimizer(model, :sgd; lr = 0.5)
    prepare(acc, model, opt)
    params() = vcat((vec(Array(model[name])) for name in tensor_names(model))...)
    x = Float32[(i * (rank + 3)) % 7 / 7 for i in 1:4, j in 1:8]
    y = Int64[(j + rank) % 3 for j in 1:8]
    counts, differed = LocalSgd(acc, model, 2) do l
        seen, apart = Int[], false
        for step in 1:5
            train_step!(acc, model, opt, x, y)
            step!(l)
            push!(seen, average_count(l))
            every = gather(acc, reshape(params(), :, 1))
            apart |= every[:, 1] != every[:, 2]
        end
        seen, apart
    end
    every = gather(acc, reshape(params(), :, 1))
    counts == [0, 1, 1, 2, 2] && differed && every[:, 1] == every[:, 2] ||
        error("rank $rank: LocalSGD counts $counts, differed between averages $differed, " *
              "equal at the end $(every[:, 1] == every[:, 2])")
    # The count after the end: the handle's own, read before the do-block frees it.
    ended = LocalSgd(acc, model, 2) do l
        for step in 1:5
            train_step!(acc, model, opt, x, y)
            step!(l)
        end
        finish!(l)
        average_count(l)
    end
    ended == 3 || error("rank $rank: LocalSGD averaged $ended times over 5 steps, not 3")
    every = gather(acc, reshape(params(), :, 1))
    every[:, 1] == every[:, 2] || error("rank $rank: parameters differ after LocalSGD")
    foreach(close, (opt, model))
    print("rank $rank: LocalSGD averaged 3 times over 5 steps, parameters equal on every rank\n")
    flush(stdout)
end

# is_last_process and the on_* helpers on two ranks; local_main_process_first runs rank 0 first.
function helpers(acc)
    rank = process_index(acc)
    ran = Symbol[]
    on_main_process(() -> push!(ran, :main), acc)
    on_local_main_process(() -> push!(ran, :local), acc)
    on_last_process(() -> push!(ran, :last), acc)
    on_process(() -> push!(ran, :one), acc, 1)
    expected = rank == 0 ? [:main, :local] : [:last, :one]
    ran == expected && is_last_process(acc) == (rank == 1) ||
        error("rank $rank: the helpers ran $ran")
    order = local_main_process_first(acc) do
        time() # rank 0's block ends before rank 1's begins
    end
    times = gather(acc, order)
    times[1] <= times[2] || error("rank $rank: local_main_process_first ran rank 1 first: $times")
    print("rank $rank: the per-process helpers ran $expected\n")
    flush(stdout)
end

Accelerator() do acc
    for part in ARGS
        if part == "seed"
            seed_draws(acc)
        elseif part == "steps"
            with_logger(NullLogger()) do   # the search's messages
                batch_sizes(acc)
            end
            local_sgd(acc)
            helpers(acc)
        else
            error("unknown part $part")
        end
    end
    wait_for_everyone(acc)
end
