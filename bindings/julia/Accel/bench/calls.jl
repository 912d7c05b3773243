# The cost of one call through Accel.jl, beside bench/calls.c (the C reference): a one-element
# tensor made from a Float32 and closed, an element-count query, and a sum of a one-element tensor
# across the processes (its result closed). Run as
#
#     accel launch -n 2 julia --project=bindings/julia/Accel bindings/julia/Accel/bench/calls.jl [iterations]
#
# Rank 0 prints one line per measure, in ns per call, the best of 5 repetitions after a warm-up
# (which also compiles every loop). Every rank runs the same loops so that the collective pairs up.
using Accel
using Printf

const REPETITIONS = 5

function create_free(n)
    start = time_ns()
    for i in 1:n
        close(Tensor(Float32(i)))
    end
    (time_ns() - start) / n
end

function query(t, n)
    sink = 0
    start = time_ns()
    for _ in 1:n
        sink += length(t)
    end
    elapsed = (time_ns() - start) / n
    sink == n * length(t) || error("query: wrong count")
    elapsed
end

function allreduce(acc, t, n)
    start = time_ns()
    for _ in 1:n
        close(reduce_across(acc, t))
    end
    (time_ns() - start) / n
end

function main(n)
    n_collective = max(n ÷ 400, 1)
    Accelerator() do acc
        Tensor(1.0f0) do t
            # Warm-up: compiles the loops, fills the allocator's caches, opens the collective.
            create_free(n ÷ 10)
            query(t, n ÷ 10)
            allreduce(acc, t, n_collective ÷ 10 + 1)
            c = q = r = Inf
            for _ in 1:REPETITIONS
                c = min(c, create_free(n))
                q = min(q, query(t, n))
                r = min(r, allreduce(acc, t, n_collective))
            end
            if process_index(acc) == 0
                @printf("create_free_ns %.1f\nquery_ns %.1f\nallreduce_ns %.1f\n", c, q, r)
            end
        end
    end
end

main(isempty(ARGS) ? 200000 : parse(Int, ARGS[1]))
