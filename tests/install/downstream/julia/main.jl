# A project of its own that uses Accel by README.md's lines alone (tests/install): under
# `accel launch -n 2` the ranks gather their indices and rank 0 reports.
using Accel

Accelerator() do acc
    rank, world = process_index(acc), num_processes(acc)
    ranks = gather_object(acc, rank)
    length(ranks) == world && issorted(ranks) && allunique(ranks) && rank in ranks ||
        error("rank $rank gathered $ranks")
    is_main_process(acc) && println("downstream ok: libaccel $(Accel.library_version()), $world ranks")
end
