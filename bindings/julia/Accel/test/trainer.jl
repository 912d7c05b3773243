# The Trainer from Julia: transformers' events, Julia steps, compute_metrics, predict, callbacks
# that stop the training or throw. Included by runtests.jl inside its top test set.

# The model of tests/mp/trainer_program.c: training_step and eval_step for the default steps,
# index (each sample's x[0], its index) for predictions that say which sample they are.
const TRAINER_SOURCE = """
def training_step(self, x, y):
    return torch.cross_entropy_loss(self.fc.forward(x), y)
def eval_step(self, x, y):
    logits = self.fc.forward(x)
    return torch.cross_entropy_loss(logits, y), logits.argmax(1)
def index(self, x, y):
    return x[:, 0]
"""

trainer_label(i) = (i * 7) % 4   # sample i's class, i from 0 as in trainer_program.c

# trainer_program.c's dataset of n samples: x[0] is the sample's index, the other features depend
# on its class. Julia's layout: x is 8 x n (the library's [n, 8]).
function trainer_dataset(n)
    x = zeros(Float32, 8, n)
    y = Int64[trainer_label(i) for i in 0:n-1]
    for i in 0:n-1, f in 0:7
        x[f+1, i+1] = f == 0 ? Float32(i) :
                      Float32((i * 31 + f * 17) % 13) / 13.0f0 + (f % 4 == y[i+1] ? 1.0f0 : 0.0f0)
    end
    Dataset(x, y)
end

# trainer_program.c's build(): seed 42, a linear 8 -> 4 model, AdamW, a linear schedule, a train
# and an eval dataloader, on an accelerator with gradient_accumulation_steps 2; `f` gets them and
# the accelerator is closed after it (one per process).
function with_trainer_run(f; train_n = 24, eval_n = 10, shuffle = false)
    Accelerator(gradient_accumulation_steps = 2) do acc
        set_seed(acc, 42)
        model = Model()
        add_layer!(model, "fc", :linear; in_features = 8, out_features = 4)
        define!(model, TRAINER_SOURCE)
        opt = Optimizer(model, :adamw; lr = 0.01)
        sched = Scheduler(opt, :linear; warmup_steps = 20, total_steps = 2000)
        train = shuffle ? DataLoader(acc, trainer_dataset(train_n); batch_size = 4, shuffle = true, seed = 7) :
                          DataLoader(acc, trainer_dataset(train_n); batch_size = 4)
        eval = DataLoader(acc, trainer_dataset(eval_n); batch_size = 4)
        try
            f(acc, model, opt, sched, train, eval)
        finally
            foreach(close, (train, eval, sched, opt, model))
        end
    end
end

trainer_settings(; more...) = (speed_metrics = false, progress_bar = false,
                               output_dir = joinpath(mktempdir(), "run"), more...)

@testset "Trainer: transformers' events" begin
    with_trainer_run() do acc, model, opt, sched, train, eval
        lines = String[]
        Trainer(acc, model, opt, train; scheduler = sched, eval = eval,
                trainer_settings(num_train_epochs = 2, logging_steps = 2, logging_first_step = true,
                                 eval_strategy = :steps, eval_steps = 3, save_strategy = :steps,
                                 save_steps = 3, save_total_limit = 2)...) do trainer
            add_callback!(trainer) do ctx, event, values
                push!(lines, "$event $(global_step(ctx))")
            end
            @test fit!(trainer) === trainer
            @test haskey(evaluate(trainer), "eval_loss")
            predict(trainer, eval)
            @test global_step(trainer) == 6 && epoch(trainer) == 2.0
            @test occursin("\"global_step\": 6", state_json(trainer))
        end
        want = readlines(joinpath(REPO_ROOT, "tests", "mp", "trainer_events.txt"))
        @test lines == want
        if lines != want
            for i in 1:min(length(lines), length(want))
                lines[i] == want[i] || (println("line $i: $(lines[i]), transformers' $(want[i])"); break)
            end
        end
    end
end

# 8 steps (shuffled, accumulation 2) with `step` (nothing: the default); the parameters.
function trained_parameters(step)
    with_trainer_run(train_n = 96, eval_n = 8, shuffle = true) do acc, model, opt, sched, train, eval
        before = Array(model["fc.weight"])
        Trainer(acc, model, opt, train; scheduler = sched, eval = eval,
                trainer_settings(max_steps = 8)...) do trainer
            step === nothing || set_training_step!(step(model), trainer)
            fit!(trainer)
        end
        after = (Array(model["fc.weight"]), Array(model["fc.bias"]))
        @test after[1] != before
        after
    end
end

@testset "Trainer: a Julia step is the default step, bitwise" begin
    default = trained_parameters(nothing)
    calls = Ref(0)
    mine = trained_parameters(model -> function (x, y)
        calls[] += 1
        model(:training_step, x, y)
    end)
    @test calls[] == 16   # 8 steps x 2 micro-batches
    @test reinterpret(UInt32, vec(default[1])) == reinterpret(UInt32, vec(mine[1]))
    @test reinterpret(UInt32, default[2]) == reinterpret(UInt32, mine[2])
end

@testset "Trainer: compute_metrics gives eval_ metrics" begin
    with_trainer_run() do acc, model, opt, sched, train, eval
        Trainer(acc, model, opt, train; scheduler = sched, eval = eval,
                trainer_settings(max_steps = 2)...) do trainer
            seen = Ref{Any}(nothing)
            accuracy = Ref(NaN)
            set_compute_metrics!(trainer) do predictions, labels
                seen[] = labels
                accuracy[] = sum(predictions .== labels) / length(labels)
                (accuracy = accuracy[], eval_samples_seen = length(labels))
            end
            on_evaluate = Ref{Any}(nothing)
            add_callback!(trainer) do ctx, event, values
                event == :on_evaluate && (on_evaluate[] = values)
            end
            fit!(trainer)
            metrics = evaluate(trainer)
            @test seen[] == [trainer_label(i) for i in 0:9]
            @test metrics["eval_accuracy"] == accuracy[] && metrics["eval_samples_seen"] == 10
            @test haskey(metrics, "eval_loss")
            @test on_evaluate[]["eval_accuracy"] == accuracy[]
            set_compute_metrics!(nothing, trainer)
            # The loss alone, and the epoch transformers' log adds after training.
            @test sort(collect(keys(evaluate(trainer)))) == ["epoch", "eval_loss"]
            # A metric that is no number stops the evaluation with an ArgumentError.
            set_compute_metrics!((p, l) -> (note = "text",), trainer)
            @test_throws ArgumentError evaluate(trainer)
        end
    end
end

@testset "Trainer: predict returns every sample once, in order" begin
    with_trainer_run() do acc, model, opt, sched, train, eval
        Trainer(acc, model, opt, train; scheduler = sched, eval = eval, trainer_settings()...) do trainer
            set_eval_step!(trainer) do x, y
                (predictions = model(:index, x, y), labels = y)   # y: the batch's own tensor
            end
            p = predict(trainer, eval)   # 10 samples, batch 4: an uneven last batch
            @test p.predictions == Float32.(0:9)
            @test p.labels == [trainer_label(i) for i in 0:9]
            @test isempty(p.metrics)
            set_eval_step!(nothing, trainer)   # the model's eval_step: argmax, test_loss
            q = predict(Tensor, trainer, eval)
            @test q.predictions isa Tensor && size(q.predictions) == (10,)
            @test haskey(q.metrics, "test_loss")
            close(q.predictions); close(q.labels)
        end
    end
end

@testset "Trainer: a callback stops the training at step 3" begin
    with_trainer_run() do acc, model, opt, sched, train, eval
        Trainer(acc, model, opt, train; scheduler = sched, eval = eval,
                trainer_settings(num_train_epochs = 5)...) do trainer
            kept = Ref{Any}(nothing)
            nested = Ref{Any}(nothing)
            add_callback!(trainer) do ctx, event, values
                kept[] = ctx
                if event == :on_step_end && global_step(ctx) == 2 && nested[] === nothing
                    nested[] = evaluate(trainer)   # a callback may evaluate (accel.h)
                    @test error_of(() -> close(trainer)).status == Accel.ERR_STATE
                end
                if event == :on_step_end && global_step(ctx) == 3
                    set_control!(ctx, :should_training_stop)
                    @test control(ctx, :should_training_stop)
                    @test epoch(ctx) == 1.0   # 3 steps an epoch
                    @test occursin("\"global_step\": 3", state_json(ctx))
                    @test error_of(() -> control(ctx, :should_dance)).status == Accel.ERR_INVALID_ARGUMENT
                end
            end
            fit!(trainer)
            @test global_step(trainer) == 3
            @test haskey(nested[], "eval_loss")
            @test error_of(() -> global_step(kept[])).status == Accel.ERR_STATE
        end
    end
end

struct TrainerTestError <: Exception
    what::String
end

@testset "Trainer: what Julia code throws comes back as it was" begin
    with_trainer_run() do acc, model, opt, sched, train, eval
        trainer = Trainer(acc, model, opt, train, "max_steps=4,speed_metrics=false,progress_bar=false," *
                          "output_dir=$(joinpath(mktempdir(), "run"))"; scheduler = sched, eval = eval)
        throwing = Ref(true)
        add_callback!(trainer) do ctx, event, values
            throwing[] && event == :on_step_end && throw(TrainerTestError("a callback's bug"))
        end
        @test_throws TrainerTestError("a callback's bug") fit!(trainer)
        @test global_step(trainer) == 1
        throwing[] = false

        set_training_step!((x, y) -> throw(TrainerTestError("no loss today")), trainer)
        @test_throws TrainerTestError("no loss today") fit!(trainer)
        set_training_step!((x, y) -> 1.5, trainer)   # not a Tensor
        @test_throws ArgumentError fit!(trainer)
        lent = Ref{Any}(nothing)
        set_training_step!(trainer) do x, y
            lent[] = x
            close(x)   # does nothing to the batch
            loss = model(:training_step, y, y)   # a TorchScript error: the library's
            loss
        end
        @test_throws AccelError fit!(trainer)   # model's own error, as it was
        @test !isopen(lent[])   # lent for the call only
        set_training_step!(nothing, trainer)

        set_compute_metrics!((p, l) -> error("metrics broke"), trainer)
        @test_throws ErrorException evaluate(trainer)
        set_compute_metrics!(nothing, trainer)
        fit!(trainer)   # the defaults again, from the start to max_steps
        @test global_step(trainer) == 4
        close(trainer)
        @test error_of(() -> fit!(trainer)).status == Accel.ERR_STATE
        close(trainer)   # idempotent
    end
end

@testset "Trainer: arguments and handles" begin
    with_trainer_run() do acc, model, opt, sched, train, eval
        @test error_of(() -> Trainer(acc, model, opt, train; trainer_settings(colour = "blue")...)).status ==
              Accel.ERR_INVALID_ARGUMENT
        @test_throws ArgumentError Trainer(acc, model, opt, train; output_dir = "a,b")
        Trainer(acc, model, opt, train; trainer_settings()...) do trainer
            @test error_of(() -> Trainer(acc, model, opt, train; trainer_settings()...)).status == Accel.ERR_STATE
            @test global_step(trainer) == 0 && epoch(trainer) == 0.0
        end
    end
end

# auto_find_batch_size from Julia: a step throwing ERR_OUT_OF_MEMORY above 3 samples is tried
# again smaller (5, then 4, then 3), and the run found is bitwise the run started at 3; without
# the setting, fit! throws that AccelError.
@testset "Trainer: auto_find_batch_size retries what ran out of memory" begin
    function run_from(start; more...)
        with_trainer_run() do acc, model, opt, sched, train, eval
            set!(train, "batch_size", start)
            refused, state, failure = Ref(0), Ref(""), Ref{Any}(nothing)
            Trainer(acc, model, opt, train; scheduler = sched, eval = eval,
                    trainer_settings(; max_steps = 6, save_strategy = "no", more...)...) do trainer
                set_training_step!(trainer) do x, y
                    if shape(y)[1] > 3
                        refused[] += 1
                        throw(AccelError(Accel.ERR_OUT_OF_MEMORY, "pretend"))
                    end
                    model(:training_step, x, y)
                end
                try
                    fit!(trainer)
                    state[] = state_json(trainer)
                catch e
                    failure[] = e
                end
            end
            (Array(model["fc.weight"]), refused[], state[], failure[])
        end
    end
    want, none, _, first_failure = run_from(3)
    @test first_failure === nothing && none == 0
    got, refused, state, failure = run_from(5; auto_find_batch_size = true)
    @test failure === nothing
    @test refused == 2
    @test occursin("\"train_batch_size\": 3,", state)
    @test reinterpret(UInt32, vec(want)) == reinterpret(UInt32, vec(got))
    _, _, _, without = run_from(5)
    @test without isa AccelError && without.status == Accel.ERR_OUT_OF_MEMORY
end
