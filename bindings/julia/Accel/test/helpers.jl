# Paths and process helpers shared by the tests.

const PACKAGE_DIR = dirname(@__DIR__)
const REPO_ROOT = normpath(joinpath(PACKAGE_DIR, "..", "..", ".."))
const FASHION_MNIST = "/usr/share/datasets/fashion-mnist"
accel_cli() = get(ENV, "ACCEL_CLI", joinpath(REPO_ROOT, "build", "bin", "accel"))
c_examples_dir() = get(ENV, "ACCEL_C_EXAMPLES_DIR", joinpath(REPO_ROOT, "build", "bin"))
julia_cmd() = `$(Base.julia_cmd()) --project=$PACKAGE_DIR`

# Runs a command; returns (exit code, stdout and stderr together).
function run_output(cmd::Cmd)
    out = IOBuffer()
    process = run(pipeline(ignorestatus(cmd), stdout = out, stderr = out))
    process.exitcode, String(take!(out))
end

launch(n, args...) = `$(accel_cli()) launch -n $n $(julia_cmd()) $args`

# The number after `key` on every line that has it ("loss 0.9495" -> 0.9495).
function values_after(output, key)
    values = Float64[]
    for line in split(output, '\n')
        i = findfirst(key, line)
        i === nothing && continue
        word = split(line[last(i)+1:end])
        isempty(word) && continue
        v = tryparse(Float64, word[1])
        v === nothing || push!(values, v)
    end
    values
end

const MLP_SOURCE = """
def forward(self, x):
    return self.fc2.forward(torch.relu(self.fc1.forward(x)))

def training_step(self, x, y):
    return torch.cross_entropy_loss(self.forward(x), y.long())
"""

function mlp(hidden, inputs, outputs)
    m = Model()
    add_layer!(m, "fc1", :linear; in_features = inputs, out_features = hidden)
    add_layer!(m, "fc2", :linear; in_features = hidden, out_features = outputs)
    define!(m, MLP_SOURCE)
end

# One micro-step of a model with a training_step method.
function train_step!(acc, model, opt, x, y)
    accumulate_gradients!(acc)
    model(loss -> backward(acc, loss), :training_step, x, y)
    step!(opt)
    zero_grad!(opt)
end
