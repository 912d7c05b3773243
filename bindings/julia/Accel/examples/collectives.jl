# libaccel's runtime from Julia: where am I, and every collective once.
#
#     accel launch -n 2 julia --project=bindings/julia/Accel bindings/julia/Accel/examples/collectives.jl
#
# Each rank contributes a tensor that depends on its rank; the main process prints what came back.
# Run alone it is a world of one and every collective is the identity. The same program as
# examples/c/collectives.c, line for line the same output.
using Accel
using Printf

# One line per result as the C example prints it: the library's shape (Julia's size reversed; a
# number has none), then %g of each value. The collectives give arrays and numbers back for arrays
# and numbers: nothing here needs a close.
function print_values(acc, label, x)
    line = rpad(label, 24) * " shape [" * join(reverse(size(x)), ", ") * "] values"
    if eltype(x) == Float32
        for v in x
            line *= " " * @sprintf("%g", v)
        end
    end
    println(acc, line)
end

Accelerator() do acc
    rank, world = process_index(acc), num_processes(acc)
    set_seed(acc, 42)
    main = is_main_process(acc) ? ", main process" : ""
    # One write: the ranks share the launcher's pipe, and println writes the newline apart.
    print("rank $rank of $world (local rank $(local_process_index(acc))) on $(Accel.device(acc))$main\n")
    flush(stdout)
    wait_for_everyone(acc)
    println(acc, "distributed type $(distributed_type(acc)), mixed precision $(mixed_precision(acc)), ",
            "libaccel $(Accel.library_version())")

    # gather: rank r contributes [r*10, r*10+1]; everyone gets [0, 1, 10, 11, ...].
    print_values(acc, "gather", Accel.gather(acc, Float32[rank * 10, rank * 10 + 1]))

    # pad_across_processes: rank r holds r+1 ones; padded with -1 to the longest, then gathered.
    padded = pad_across_processes(acc, ones(Float32, min(rank + 1, 16)); pad_value = -1)
    print_values(acc, "pad + gather", Accel.gather(acc, padded))

    # reduce: sum and mean of (rank + 1), a number in and a number out.
    print_values(acc, "reduce sum of rank+1", reduce_across(acc, Float32(rank + 1); reduction = :sum))
    print_values(acc, "reduce mean of rank+1", reduce_across(acc, Float32(rank + 1); reduction = :mean))

    # broadcast from the last rank (ranks count from 0): only it needs a value.
    source = rank == world - 1 ? Float32[3.5, 4.5, 5.5] : nothing
    print_values(acc, "broadcast from last rank", broadcast_across(acc, source; from = world - 1))

    # gather_object: any Julia value per rank, rank r's at [r + 1].
    for (r, text) in zip(0:world-1, gather_object(acc, "hello from rank $rank"))
        println(acc, "gather_object[$r]       \"$text\"")
    end
    wait_for_everyone(acc)
end
