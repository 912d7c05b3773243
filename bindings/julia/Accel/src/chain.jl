# Flux-style model building, a front to the library's layer catalogue: a Chain of Dense, Conv,
# BatchNorm, LayerNorm, Embedding, Dropout, MaxPool, flatten and activations becomes a Model whose
# layers are the catalogue's and whose forward is TorchScript written from the chain. None of these
# names is exported: Flux exports its own (write `Accel.Chain`, `Accel.Dense`, ...).

"A layer of an `Accel.Chain` (the library's layer catalogue, or a step without parameters)."
abstract type Layer end

# An activation: identity, relu, tanh, sigmoid (σ), gelu or elu, as a function (NNlib's, Base's)
# or a Symbol; matched by name, so Flux's own functions work without this package knowing Flux.
const ACTIVATIONS = Dict(:identity => "", :relu => "torch.relu", :tanh => "torch.tanh",
                         :sigmoid => "torch.sigmoid", :σ => "torch.sigmoid", :gelu => "torch.gelu",
                         :elu => "torch.elu")

activation_name(f::Symbol) = f
activation_name(f::Function) = nameof(f)
function activation(f)
    name = activation_name(f)
    haskey(ACTIVATIONS, name) && return ACTIVATIONS[name]
    throw(AccelError(ERR_INVALID_ARGUMENT,
                     "Accel.Chain: activation $name is not one of " *
                     join(sort!(string.(collect(keys(ACTIVATIONS)))), ", ")))
end
apply(fn::AbstractString, x::AbstractString) = isempty(fn) ? x : "$fn($x)"

"""
    Accel.Dense(in => out, σ = identity; bias = true)

A fully connected layer (the catalogue's `linear`), then the activation σ, as Flux's `Dense`.
"""
struct Dense <: Layer
    in::Int
    out::Int
    σ::Any
    bias::Bool
end
Dense(p::Pair{<:Integer,<:Integer}, σ = identity; bias::Bool = true) =
    Dense(p.first, p.second, σ, bias)

"""
    Accel.Conv((k, k), in => out, σ = identity; stride = 1, pad = 0, dilation = 1, groups = 1, bias = true)

A 2-d convolution with a square kernel (the catalogue's `conv2d`), then σ, as Flux's `Conv`.
"""
struct Conv <: Layer
    k::Int
    in::Int
    out::Int
    σ::Any
    options::Vector{Pair{Symbol,Any}}
end
function Conv(k::NTuple{2,Integer}, p::Pair{<:Integer,<:Integer}, σ = identity; stride = 1,
              pad = 0, dilation = 1, groups = 1, bias::Bool = true)
    k[1] == k[2] || throw(AccelError(ERR_INVALID_ARGUMENT,
                                     "Accel.Conv: the catalogue's conv2d has square kernels, not $k"))
    all(v -> v isa Integer, (stride, pad, dilation)) ||
        throw(AccelError(ERR_INVALID_ARGUMENT, "Accel.Conv: stride, pad and dilation are one integer each"))
    Conv(k[1], p.first, p.second, σ,
         [:stride => stride, :padding => pad, :dilation => dilation, :groups => groups, :bias => bias])
end

"""
    Accel.BatchNorm(channels, σ = identity; eps = 1e-5, momentum = 0.1)

2-d batch normalisation (the catalogue's `batch_norm2d`), then σ, as Flux's `BatchNorm` on images.
"""
struct BatchNorm <: Layer
    n::Int
    σ::Any
    eps::Float64
    momentum::Float64
end
BatchNorm(n::Integer, σ = identity; eps = 1e-5, momentum = 0.1) = BatchNorm(n, σ, eps, momentum)

"""
    Accel.LayerNorm(n; eps = 1e-5)

Normalisation over the last dimension of size n (the catalogue's `layer_norm`).
"""
struct LayerNorm <: Layer
    n::Int
    eps::Float64
end
LayerNorm(n::Integer; eps = 1e-5) = LayerNorm(n, eps)

"""
    Accel.Embedding(n => dim)

A table of n embeddings of size dim (the catalogue's `embedding`), as Flux's `Embedding`.
"""
struct Embedding <: Layer
    n::Int
    dim::Int
end
Embedding(p::Pair{<:Integer,<:Integer}) = Embedding(p.first, p.second)

"    Accel.Dropout(p): zeroes each element with probability p while training (`trainmode!`)."
struct Dropout <: Layer
    p::Float64
end

"    Accel.MaxPool((k, k)): 2-d max pooling, window and stride k."
struct MaxPool <: Layer
    k::Int
end
function MaxPool(k::NTuple{2,Integer})
    k[1] == k[2] || throw(AccelError(ERR_INVALID_ARGUMENT, "Accel.MaxPool: square windows only, not $k"))
    MaxPool(k[1])
end

"`Accel.flatten`: keeps the first (batch) dimension and flattens the rest, as Flux's `flatten`."
struct Flatten <: Layer end
const flatten = Flatten()

"""
    Accel.Chain(layers...)
    Accel.Chain(; name = layer, ...)

Layers applied in turn, as Flux's `Chain`; `Accel.Model(chain)` builds it. Positional layers are
named `layer1`, `layer2`, ... by position (their parameters `layer1.weight`, ...); keyword ones by
their keys. An activation function (`relu`) may stand alone between layers.
"""
struct Chain
    layers::Vector{Pair{String,Any}}   # name => layer
    Chain(named::Vector{Pair{String,Any}}, ::Val{:named}) = new(named)
end
Chain(layers...) = Chain(Pair{String,Any}["layer$i" => l for (i, l) in enumerate(layers)], Val(:named))
Chain(; layers...) = Chain(Pair{String,Any}[string(k) => l for (k, l) in layers], Val(:named))

# Adds the layer's catalogue entry (if any) and gives the TorchScript of its output from x.
function build!(m, name, l::Dense, x)
    add_layer!(m, name, :linear; in_features = l.in, out_features = l.out, bias = l.bias)
    apply(activation(l.σ), "self.$name.forward($x)")
end
function build!(m, name, l::Conv, x)
    add_layer!(m, name, :conv2d; in_channels = l.in, out_channels = l.out, kernel_size = l.k, l.options...)
    apply(activation(l.σ), "self.$name.forward($x)")
end
function build!(m, name, l::BatchNorm, x)
    add_layer!(m, name, :batch_norm2d; num_features = l.n, eps = l.eps, momentum = l.momentum)
    apply(activation(l.σ), "self.$name.forward($x)")
end
function build!(m, name, l::LayerNorm, x)
    add_layer!(m, name, :layer_norm; normalized_shape = l.n, eps = l.eps)
    "self.$name.forward($x)"
end
function build!(m, name, l::Embedding, x)
    add_layer!(m, name, :embedding; num_embeddings = l.n, embedding_dim = l.dim)
    "self.$name.forward($x)"
end
build!(m, name, l::Dropout, x) = "torch.dropout($x, $(Float64(l.p)), self.training)"
build!(m, name, l::MaxPool, x) = "torch.max_pool2d($x, [$(l.k), $(l.k)])"
build!(m, name, ::Flatten, x) = "torch.flatten($x, 1)"
build!(m, name, f::Union{Function,Symbol}, x) = apply(activation(f), x)
build!(m, name, l, x) =
    throw(AccelError(ERR_INVALID_ARGUMENT, "Accel.Chain: $(typeof(l)) is not a layer Accel.Chain knows"))

"""
    Accel.Model(chain::Accel.Chain; methods = "")

The model of `chain`: its layers from the library's catalogue and a TorchScript `forward(self, x)`
applying them in turn, with `methods` (more TorchScript, such as a `training_step` that returns
the loss) defined beside it. On an error nothing of the model is left.
"""
function Model(chain::Chain; methods::AbstractString = "")
    m = Model()
    try
        lines = ["def forward(self, x):"]
        for (name, layer) in chain.layers
            push!(lines, "    x = " * build!(m, name, layer, "x"))
        end
        push!(lines, "    return x", "")
        define!(m, join(lines, "\n") * (isempty(methods) ? "" : "\n" * methods))
    catch
        close(m)
        rethrow()
    end
    m
end
