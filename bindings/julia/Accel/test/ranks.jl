# The rank programs of the multi-process tests, run under `accel launch`:
#   julia --project=... test/ranks.jl train        300 steps on Fashion-MNIST; the loss falls and
#                                                  every parameter is equal on every rank; then, on
#                                                  two ranks, join_uneven_inputs over 3 | 2 batches,
#                                                  split_between_processes, the trigger and a
#                                                  stream sharded both ways, and the logger's
#                                                  messages of one rank, every rank and in order
#   julia --project=... test/ranks.jl equiv B OUT  20 SGD steps of global batch 64 as ranks x B;
#     `equiv B OUT adamw [STAGE STATE_DIR]` AdamW instead, under ZeRO stage STAGE;
#                                                  the main rank writes the parameters to OUT
using Accel
# The generic names Accel does not export (they would clash with Flux, MLUtils or Base).
using Accel: DataLoader, Model, Optimizer, Scheduler, call, device, shape, gather, trainmode!, testmode!
using Logging
using Random
include("helpers.jl")

# Every parameter equal on every rank, bit for bit.
function parameters_agree(acc, model)
    for name in tensor_names(model)
        mine = vec(Array(model[name]))
        every = gather(acc, reshape(mine, :, 1))   # an array in, an array out: one column per rank
        for r in 2:num_processes(acc)
            every[:, r] == every[:, 1] || error("$name differs between rank 0 and rank $(r - 1)")
        end
    end
end

function rank_train()
    Accelerator() do acc
        rank = process_index(acc)
        set_seed(acc, 5)
        model = mlp(64, 784, 10)
        opt = Optimizer(model, :adamw; lr = 2e-3)
        data = idx_dataset("$FASHION_MNIST/train-images-idx3-ubyte.gz",
                           "$FASHION_MNIST/train-labels-idx1-ubyte.gz")
        loader = DataLoader(acc, data; batch_size = 32, shuffle = true, num_workers = 1)
        prepare(acc, model, opt, loader)
        first, last, step = 0.0, 0.0, 0
        for (images, labels) in loader
            step == 300 && break
            x = Float32.(reshape(Array(images), 784, :)) ./ 255
            accumulate_gradients!(acc)
            loss = model(:training_step, x, labels) do loss
                backward(acc, loss)
                only(loss)
            end
            step!(opt)
            zero_grad!(opt)
            value = reduce_across(acc, loss; reduction = :mean)   # a number in, a number out
            if step < 20
                first += value / 20
            elseif step >= 280
                last += value / 20
            end
            step += 1
        end
        last < 0.7 * first || error("rank $rank: the loss did not fall: $first -> $last")
        parameters_agree(acc, model)
        # The counting rule across real processes: rank r's number is entry r + 1 of a gather,
        # and `from` names a rank as process_index does; numbers in, numbers out.
        world = num_processes(acc)
        gather(acc, rank) == collect(0:world-1) || error("rank $rank: gather of ranks")
        broadcast_across(acc, rank == world - 1 ? 42.5 : nothing; from = world - 1) === 42.5 ||
            error("rank $rank: broadcast from the last rank")
        # One write: the ranks share the launcher's pipe, and println writes the newline apart.
        print("rank $rank: the loss fell, parameters equal on every rank\n")
        flush(stdout)
        world == 2 && join_uneven(acc, model, opt)
        # Closed only now: join_uneven's even_batches override sets every prepared dataloader's,
        # and a closed one (close, or the finalizer of one no longer used) refuses it.
        close(loader)
        world == 2 && split_and_trigger(acc)
        world == 2 && stream_shards(acc)
        world == 2 && log_ranks(acc)
        wait_for_everyone(acc)
    end
end

# Two ranks: the role's model (its only prepared model, no buffers) on 10 samples, 2 per rank and
# step, even_batches false inside join_uneven_inputs: rank 0 makes 3 steps while rank 1, done
# after 2, answers its gradient all-reduce; then rank 1 takes rank 0's parameters, and the
# dataloader has its even batches back.
function join_uneven(acc, model, opt)
    rank = process_index(acc)
    params() = vcat((vec(Array(model[name])) for name in tensor_names(model))...)
    pixels = Float32[(i * 37 % 255) / 255 for i in 0:10*784-1]
    data = Dataset(reshape(pixels, 784, 10), collect(Int64, 0:9))
    DataLoader(acc, data; batch_size = 2) do loader
        prepare(acc, loader)
        steps, before_end = join_uneven_inputs(acc; even_batches = false) do
            n = 0
            for (x, y) in loader
                train_step!(acc, model, opt, x, y)   # no reduce_across: a joined rank would not answer
                n += 1
            end
            n, params()
        end
        steps == 3 - rank || error("rank $rank: $steps steps in the join")
        kept = params() == before_end
        kept == (rank == 0) || error("rank $rank: the parameters kept at the end of the join: $kept")
        parameters_agree(acc, model)
        length(loader) == 3 || error("rank $rank: even_batches not restored after the join")
        print("rank $rank: $steps steps in join_uneven_inputs, parameters equal on every rank\n")
        flush(stdout)
    end
    close(data)
end

# Two ranks: three items split [1, 2] | [3], padded [1, 2] | [3, 3] (arrays and tensors alike);
# a trigger set by rank 1 alone is seen by the check on both ranks, and lowered after it.
function split_and_trigger(acc)
    rank = process_index(acc)
    items = split_between_processes(acc, [1, 2, 3])
    padded = split_between_processes(acc, [1, 2, 3]; apply_padding = true)
    words = split_between_processes(acc, ["a", "b", "c"]; apply_padding = true)
    rows = split_between_processes(acc, [1 2 3; 10 20 30]; apply_padding = true)   # 3 library rows
    tensor = Tensor(t -> split_between_processes(Array, acc, t), Int64[1, 2, 3])
    expected = rank == 0 ? ([1, 2], [1, 2], ["a", "b"], [1 2; 10 20], [1, 2]) :
                           ([3], [3, 3], ["c", "c"], [3 3; 30 30], [3])
    (items, padded, words, rows, tensor) == expected ||
        error("rank $rank: split gave $((items, padded, words, rows, tensor)), not $expected")
    gather_object(acc, (items, padded)) == [([1, 2], [1, 2]), ([3], [3, 3])] ||
        error("rank $rank: the ranks' splits do not make [1, 2] | [3]")
    columns = split_between_processes(acc, Dict("id" => [1, 2, 3], "len" => [5, 6, 7]);
                                      apply_padding = true)
    columns == (rank == 0 ? Dict("id" => [1, 2], "len" => [5, 6]) : Dict("id" => [3, 3], "len" => [7, 7])) ||
        error("rank $rank: a dictionary split gave $columns")
    # set_seed seeds Julia's default generator: the same draw on every rank, and in every run.
    set_seed(acc, 1234)
    draw = rand()
    gather_object(acc, draw) == [draw, draw] && draw == rand(MersenneTwister(1234)) ||
        error("rank $rank: rand() after set_seed gave $draw")
    set_seed(acc, 1234; device_specific = true)
    rand() == rand(MersenneTwister(1234 + rank)) ||
        error("rank $rank: device_specific did not add the process index")
    print("rank $rank: rand() after set_seed is the same on every rank\n")
    rank == 1 && set_trigger!(acc)
    seen = check_trigger(acc)
    again = check_trigger(acc)
    seen && !again || error("rank $rank: check_trigger gave $seen then $again, not true then false")
    print("rank $rank: split $items, padded $padded; the trigger of rank 1 seen, then lowered\n")
    flush(stdout)
end

# Two ranks: a stream of 5 samples (sample k's label is k - 1, its 0-based position) in batches
# of 1 gives rank 0 the labels 0, 2, 4 and rank 1 1, 3 and then 0 (the last global batch completed
# from the first), whether the main process reads it and sends each rank its rows
# (dispatch_batches) or every rank reads it all and keeps its slice; dispatched, the stream's
# iterator runs on the main process alone.
function stream_shards(acc)
    rank = process_index(acc)
    passes = Ref(0)
    ds = stream_dataset(Int64 => ()) do epoch
        passes[] += 1
        (p for p in 0:4)
    end
    expected = rank == 0 ? [[0], [2], [4]] : [[1], [3], [0]]
    for dispatch in (true, false)
        passes[] = 0
        labels = DataLoader(acc, ds; batch_size = 1, dispatch_batches = dispatch) do loader
            [Array(y) for (y,) in loader]
        end
        labels == expected ||
            error("rank $rank, dispatch_batches $dispatch: labels $labels, not $expected")
        read = dispatch && rank != 0 ? 0 : 1
        passes[] == read || error("rank $rank, dispatch_batches $dispatch: the stream was read " *
                                  "$(passes[]) times, not $read")
    end
    close(ds)
    print("rank $rank: stream labels $expected, dispatched and not\n")
    flush(stdout)
end

# The test's logger: one line per message on stdout, written in one call and flushed, so that
# the ranks' lines reach the launcher's pipe in the order they were logged.
struct LineLogger <: Logging.AbstractLogger end
Logging.min_enabled_level(::LineLogger) = Logging.Debug
Logging.shouldlog(::LineLogger, args...) = true
Logging.catch_exceptions(::LineLogger) = false
function Logging.handle_message(::LineLogger, level, message, _module, group, id, file, line;
                                rank = -1, processes = -1, kwargs...)
    print("log $level rank $rank/$processes: $message\n")
    flush(stdout)
end

# Two ranks: a message of the main process once, one of every process once per rank, messages in
# order alternating rank 0, rank 1 (multiprocess.jl reads the lines); a debug message dropped on every
# rank; a sink that fails on rank 1 inside the in-order collective fails there alone, and no rank
# is left waiting.
function log_ranks(acc)
    rank = process_index(acc)
    with_logger(LineLogger()) do
        log_message(acc, Logging.Info, "once, from the main process")
        log_message(acc, Logging.Debug, "below the level"; main_process_only = false)
        log_message(acc, Logging.Warn, "from every rank"; main_process_only = false)
        for turn in 1:3
            log_message(acc, Logging.Info, "in order, turn $turn"; main_process_only = false,
                        in_order = true)
        end
    end
    set_log_sink!(acc, (level, message, r) -> r == 1 && error("rank 1's sink fails"))
    failed = try
        log_message(acc, Logging.Info, "fails on rank 1"; main_process_only = false,
                    in_order = true)
        false
    catch e
        e isa AccelError && e.status == Accel.ERR_CALLBACK || rethrow()
        true
    end
    set_log_sink!(acc)
    failed == (rank == 1) || error("rank $rank: the in-order sink failure reported: $failed")
    print("rank $rank: logged, a failing sink reported on rank 1 alone\n")
    flush(stdout)
end

# No dropout, no shuffle: the parameters depend only on the global batch, not on how many
# processes share it. With `zero_stage`, AdamW under that ZeRO stage, chosen through the
# configuration as a program would (Accelerate's DeepSpeed keys), its state saved in `state_dir`.
function rank_equiv(batch, out; optimizer = :sgd, zero_stage = nothing, state_dir = nothing)
    settings = zero_stage === nothing ? NamedTuple() :
        (distributed_type = "DEEPSPEED", deepspeed_config = "{zero_stage: $zero_stage}")
    Accelerator(; settings...) do acc
        zero_stage === nothing || distributed_type(acc) == :DEEPSPEED ||
            error("distributed type $(distributed_type(acc)) under DeepSpeed's configuration")
        set_seed(acc, 11)
        n = 64 * 20
        xs = Float32[((i * 7919) % 1000) / 500 - 1 for i in 0:n*8-1]
        ys = Int64[(i * 31) % 4 for i in 0:n-1]
        data = Dataset(reshape(xs, 8, n), ys)     # samples along Julia's last dimension
        loader = DataLoader(acc, data; batch_size = batch)
        model = mlp(16, 8, 4)
        opt = optimizer == :adamw ? Optimizer(model, :adamw; lr = 0.01) : Optimizer(model, :sgd; lr = 0.1)
        prepare(acc, model, opt, loader)
        for (x, y) in loader
            train_step!(acc, model, opt, x, y)
        end
        state_dir === nothing || save_state(acc, state_dir)
        if is_main_process(acc)
            open(out, "w") do io
                for name in tensor_names(model)
                    println(io, name, " ", join(vec(Array(model[name])), " "))
                end
            end
        end
        wait_for_everyone(acc)
    end
end

if ARGS[1] == "train"
    rank_train()
elseif ARGS[1] == "equiv" && length(ARGS) == 3
    rank_equiv(parse(Int, ARGS[2]), ARGS[3])
elseif ARGS[1] == "equiv"   # equiv B OUT adamw [ZERO_STAGE STATE_DIR]
    rank_equiv(parse(Int, ARGS[2]), ARGS[3]; optimizer = Symbol(ARGS[4]),
               zero_stage = length(ARGS) > 4 ? parse(Int, ARGS[5]) : nothing,
               state_dir = length(ARGS) > 5 ? ARGS[6] : nothing)
else
    error("unknown role $(ARGS[1])")
end
