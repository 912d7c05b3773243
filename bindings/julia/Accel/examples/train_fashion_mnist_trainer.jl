# train_fashion_mnist.jl through the Trainer: the same CNN, data, optimizer, schedule and options,
# with the loop, the logging, an evaluation and a checkpoint every epoch, the best model and
# resume left to Accel's Trainer.
#
#     julia --project=bindings/julia/Accel bindings/julia/Accel/examples/train_fashion_mnist_trainer.jl
#     accel launch -n 2 julia --project=bindings/julia/Accel .../train_fashion_mnist_trainer.jl
#     accel launch -n 2 julia --project=bindings/julia/Accel .../train_fashion_mnist_trainer.jl --resume
#
# Options: --epochs N (2) --batch-size B (64, per process) --lr X (1e-3) --accum K (1) --bf16
# --max-steps S (0: whole epochs; optimizer steps) --workers W (1) --data DIR
# (/usr/share/datasets/fashion-mnist) --output-dir DIR (fashion_mnist_trainer) --resume
# (resume_from_checkpoint = "latest").
#
# The same program as examples/c/train_fashion_mnist_trainer.c, with the same settings and
# results. At each epoch's end (and where --max-steps stops the last one) the Trainer evaluates on
# the 10k test images (accuracy through compute_metrics, on predictions and labels gathered from
# every process) and saves OUTPUT_DIR/checkpoint-<step> (a save_state directory with
# trainer_state.json); save_total_limit = 2 keeps the newest and the best; at the end the best
# checkpoint's model is loaded back and evaluated once more. Every 10 steps the loss, learning
# rate and epoch are logged, with the evaluations, to the trackers the configuration names
# (ACCEL_LOG_WITH=all ACCEL_LOGGING_DIR=runs: runs/train_fashion_mnist_trainer/) and through the
# accelerator's logger to Julia's logging (ACCELERATE_LOG_LEVEL=warning silences it); the test
# accuracy is printed on stdout. The hand-written loop does not clip gradients, so neither does
# this one (max_grad_norm = 0).
using Accel
using Logging
using Printf

# train_fashion_mnist.jl's model, with the eval_step the Trainer calls: (loss, predictions).
const SOURCE = """
def forward(self, images):
    x = images.float().div(255.0).sub(0.2860).div(0.3530).unsqueeze(1)
    x = torch.relu(self.conv1.forward(x))
    x = torch.relu(self.conv2.forward(x))
    x = torch.max_pool2d(x, [2, 2])
    x = torch.dropout(x, 0.25, self.training)
    x = torch.flatten(x, 1)
    x = torch.relu(self.fc1.forward(x))
    x = torch.dropout(x, 0.5, self.training)
    return self.fc2.forward(x)

def training_step(self, images, labels):
    return torch.cross_entropy_loss(self.forward(images), labels.long())

def eval_step(self, images, labels):
    logits = self.forward(images)
    return torch.cross_entropy_loss(logits, labels.long()), torch.argmax(logits, 1)
"""

function parse_options(args)
    o = Dict{String,Any}("epochs" => 2, "batch-size" => 64, "lr" => 1e-3, "accum" => 1,
                         "bf16" => false, "max-steps" => 0, "workers" => 1, "resume" => false,
                         "data" => "/usr/share/datasets/fashion-mnist",
                         "output-dir" => "fashion_mnist_trainer")
    i = 1
    while i <= length(args)
        key = replace(args[i], r"^--?" => "")
        if haskey(o, key) && o[key] isa Bool
            o[key] = true
        elseif haskey(o, key) && i < length(args)
            i += 1
            o[key] = o[key] isa AbstractString ? args[i] :
                     o[key] isa Float64 ? parse(Float64, args[i]) : parse(Int, args[i])
        else
            println(stderr, "unknown argument $(args[i]) (see the comment at the top of $(@__FILE__))")
            exit(2)
        end
        i += 1
    end
    if o["epochs"] < 1 || o["batch-size"] < 1 || o["accum"] < 1 || o["max-steps"] < 0
        println(stderr, "--epochs, --batch-size and --accum must be at least 1, --max-steps >= 0")
        exit(2)
    end
    o
end

# The CNN of PyTorch's MNIST example.
function cnn()
    model = Accel.Model()
    add_layer!(model, "conv1", :conv2d; in_channels = 1, out_channels = 32, kernel_size = 3)
    add_layer!(model, "conv2", :conv2d; in_channels = 32, out_channels = 64, kernel_size = 3)
    add_layer!(model, "fc1", :linear; in_features = 9216, out_features = 128)
    add_layer!(model, "fc2", :linear; in_features = 128, out_features = 10)
    define!(model, SOURCE)
end

# compute_metrics: the share of test images classified right ("accuracy"; logged as
# eval_accuracy). The Trainer gives every sample once, gathered from every process: the int64
# predictions and the uint8 labels as the IDX file stores them.
function accuracy(predictions, labels)
    length(predictions) == length(labels) > 0 ||
        error("$(length(predictions)) predictions for $(length(labels)) labels")
    (accuracy = count(predictions .== labels) / length(labels),)
end

# trainer_state.json's best_model_checkpoint, for the closing line ("none" if unset).
function best_checkpoint(trainer)
    m = match(r"\"best_model_checkpoint\": \"((?:[^\"\\]|\\.)*)\"", state_json(trainer))
    m === nothing ? "none" : unescape_string(m.captures[1])
end

function main(o)
    acc = Accelerator(; gradient_accumulation_steps = o["accum"],
                      (o["bf16"] ? (mixed_precision = "bf16",) : ())...)
    world = num_processes(acc)
    batch = o["batch-size"]
    set_seed(acc, 1234)

    model = cnn()
    params = parameter_count(model)
    dir = o["data"]
    train_set = idx_dataset("$dir/train-images-idx3-ubyte.gz", "$dir/train-labels-idx1-ubyte.gz")
    test_set = idx_dataset("$dir/t10k-images-idx3-ubyte.gz", "$dir/t10k-labels-idx1-ubyte.gz")
    train = Accel.DataLoader(acc, train_set; batch_size = batch, shuffle = true, seed = 42,
                       num_workers = o["workers"])
    # The test images in batches of 100, as train_fashion_mnist.jl (why there).
    test = Accel.DataLoader(acc, test_set; batch_size = 100, num_workers = 1)

    # The optimizer updates the run makes: an epoch ends with a shorter accumulation window.
    updates = cld(length(train), o["accum"]) * o["epochs"]
    0 < o["max-steps"] < updates && (updates = o["max-steps"])
    opt = Accel.Optimizer(model, :adamw; lr = o["lr"])
    # As train_fashion_mnist.jl: the accelerator steps the schedule num_processes times a step.
    sched = Accel.Scheduler(opt, :linear; warmup_steps = updates * world ÷ 10,
                      total_steps = updates * world)

    # Prepares the model, optimizer, schedule and both loaders (prepare's order).
    trainer = Trainer(acc, model, opt, train; scheduler = sched, eval = test,
                      num_train_epochs = o["epochs"],
                      max_steps = o["max-steps"] > 0 ? o["max-steps"] : -1, logging_steps = 10,
                      eval_strategy = :epoch, save_strategy = :epoch, save_total_limit = 2,
                      load_best_model_at_end = true, metric_for_best_model = :accuracy,
                      max_grad_norm = 0, output_dir = o["output-dir"],
                      (o["resume"] ? (resume_from_checkpoint = "latest",) : ())...)
    set_compute_metrics!(accuracy, trainer)
    log_message(acc, Logging.Info, string("$world process(es), $params parameters, $updates ",
                                          "steps of $batch per process", o["bf16"] ? ", bf16" : ""))
    # Before fit!: a resumed run cuts the trackers' records back to its checkpoint's step.
    init_trackers(acc, "train_fashion_mnist_trainer";
                  config = (lr = o["lr"], batch_size = batch, processes = world,
                            gradient_accumulation_steps = o["accum"]))

    fit!(trainer)
    # The best checkpoint's model is back (load_best_model_at_end): its accuracy, logged too.
    metrics = evaluate(trainer)
    println(acc, @sprintf("test accuracy %.4f after %d steps (best checkpoint: %s)",
                          metrics["eval_accuracy"], global_step(trainer), best_checkpoint(trainer)))
    end_training(acc)
    wait_for_everyone(acc)
    # The trainer before the accelerator (and the objects it holds).
    foreach(close, (trainer, sched, opt, model, train, test, train_set, test_set, acc))
end

try
    main(parse_options(ARGS))
catch e
    e isa AccelError || rethrow()
    println(stderr, "train_fashion_mnist_trainer failed: ", sprint(showerror, e))
    exit(1)
end
