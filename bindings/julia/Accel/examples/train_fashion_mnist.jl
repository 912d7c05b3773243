# PyTorch's classic MNIST CNN trained on Fashion-MNIST with libaccel, from Julia.
#
#     julia --project=bindings/julia/Accel bindings/julia/Accel/examples/train_fashion_mnist.jl
#     accel launch -n 2 julia --project=bindings/julia/Accel .../train_fashion_mnist.jl
#
# Options: --epochs N (2) --batch-size B (64, per process) --lr X (1e-3) --accum K (1) --bf16
# --max-steps S (0: whole epochs) --data DIR (/usr/share/datasets/fashion-mnist) --workers W (1:
# batches prefetched on one thread; 0: made when asked for).
#
# The same program as examples/c/train_fashion_mnist.c, with the same model, data order, schedule
# and output: AdamW with a linear warmup/decay schedule; evaluation on the 10k test images with
# gather_for_metrics. Every 10 steps it logs loss, lr and samples/s, and at the end the test
# accuracy, to the trackers the configuration names (ACCEL_LOG_WITH=all ACCEL_LOGGING_DIR=runs:
# runs/train_fashion_mnist/). Progress lines go through the accelerator's logger to Julia's
# logging, Info from the main process (ACCELERATE_LOG_LEVEL=warning silences them); the test
# accuracy is printed on stdout.
using Accel
using Logging
using Printf

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

def correct(self, images, labels):
    return torch.eq(torch.argmax(self.forward(images), 1), labels.long()).long()
"""

function parse_options(args)
    o = Dict{String,Any}("epochs" => 2, "batch-size" => 64, "lr" => 1e-3, "accum" => 1,
                         "bf16" => false, "max-steps" => 0,
                         "data" => "/usr/share/datasets/fashion-mnist", "workers" => 1)
    i = 1
    while i <= length(args)
        key = replace(args[i], r"^--?" => "")
        if key == "bf16"
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
    o
end

# One micro-step; returns the loss as a number. The loss tensor holds the step's autograd graph:
# the do-block closes it at once, not at the next GC.
function train_step(acc, model, opt, sched, images, labels)
    accumulate_gradients!(acc)
    value = model(:training_step, images, labels) do loss
        backward(acc, loss)
        only(loss)
    end
    step!(opt)
    step!(sched)
    zero_grad!(opt)
    value
end

function main(o)
    acc = Accelerator(; gradient_accumulation_steps = o["accum"],
                      (o["bf16"] ? (mixed_precision = "bf16",) : ())...)
    world = num_processes(acc)
    batch = o["batch-size"]
    set_seed(acc, 1234)

    # The CNN of PyTorch's MNIST example.
    model = Accel.Model()
    add_layer!(model, "conv1", :conv2d; in_channels = 1, out_channels = 32, kernel_size = 3)
    add_layer!(model, "conv2", :conv2d; in_channels = 32, out_channels = 64, kernel_size = 3)
    add_layer!(model, "fc1", :linear; in_features = 9216, out_features = 128)
    add_layer!(model, "fc2", :linear; in_features = 128, out_features = 10)
    define!(model, SOURCE)
    params = parameter_count(model)

    dir = o["data"]
    train_set = idx_dataset("$dir/train-images-idx3-ubyte.gz", "$dir/train-labels-idx1-ubyte.gz")
    test_set = idx_dataset("$dir/t10k-images-idx3-ubyte.gz", "$dir/t10k-labels-idx1-ubyte.gz")
    train = Accel.DataLoader(acc, train_set; batch_size = batch, shuffle = true, seed = 42,
                       num_workers = o["workers"])
    test = Accel.DataLoader(acc, test_set; batch_size = 100, num_workers = 1)
    total_steps = length(train) * o["epochs"]
    if 0 < o["max-steps"] < total_steps
        total_steps = o["max-steps"]
    end

    opt = Accel.Optimizer(model, :adamw; lr = o["lr"])
    # The schedule counts single-process optimizer steps: the accelerator steps it num_processes
    # times per step (see accel_scheduler_new), so it is written for total_steps * world / accum.
    sched = Accel.Scheduler(opt, :linear; warmup_steps = total_steps * world ÷ o["accum"] ÷ 10,
                      total_steps = total_steps * world ÷ o["accum"])
    prepare(acc, model, opt, sched, train, test)
    log_message(acc, Logging.Info, string("$world process(es), $params parameters, $total_steps ",
                                          "steps of $batch per process", o["bf16"] ? ", bf16" : ""))
    init_trackers(acc, "train_fashion_mnist";
                  config = (lr = o["lr"], batch_size = batch, processes = world,
                            gradient_accumulation_steps = o["accum"]))

    start = time()
    step, loss_avg, waited = 0, 0.0, 0.0
    epoch = 0
    while epoch < o["epochs"] && step < total_steps
        set_epoch!(train, epoch)
        Accel.trainmode!(model)
        epoch += 1
        asked = time()
        for (images, labels) in train   # each batch is closed when the loop moves on
            waited += time() - asked    # the time this step waited for its batch
            value = train_step(acc, model, opt, sched, images, labels)
            loss_avg = step == 0 ? value : 0.98 * loss_avg + 0.02 * value
            step += 1
            if step % 10 == 0 || step == total_steps
                samples_per_s = step * batch * world / (time() - start)
                log_values(acc, (loss = loss_avg, lr = lr(sched), samples_per_s = samples_per_s);
                           step = step)
            end
            if step % 100 == 0 || step == total_steps
                elapsed = time() - start
                rate = step * batch * world / elapsed
                log_message(acc, Logging.Info,
                            @sprintf("epoch %d step %d/%d loss %.4f %.0f samples/s ETA %.0fs data wait %.2f%%",
                                     epoch, step, total_steps, loss_avg, rate,
                                     (total_steps - step) * batch * world / rate, 100 * waited / elapsed))
            end
            step == total_steps && break
            asked = time()
        end
        step < total_steps && (waited += time() - asked)   # the call that found the epoch's end
    end

    # Evaluation: each test sample counted once over all processes.
    Accel.testmode!(model)
    correct, seen = 0, 0
    for (images, labels) in test
        values = model(:correct, images, labels) do hits
            gather_for_metrics(acc, Array(hits))   # an array in, an array out
        end
        correct += sum(values)
        seen += length(values)
    end
    println(acc, @sprintf("test accuracy %.4f (%d of %d) after %.1fs of training",
                          correct / seen, correct, seen, time() - start))
    log_values(acc, (accuracy = correct / seen,); step = step)
    end_training(acc)
    wait_for_everyone(acc)
    foreach(close, (sched, opt, model, train, test, train_set, test_set, acc))
end

try
    main(parse_options(ARGS))
catch e
    e isa AccelError || rethrow()
    println(stderr, "train_fashion_mnist failed: ", sprint(showerror, e))
    exit(1)
end
