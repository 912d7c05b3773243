# Models: TorchScript modules, loaded or built from layers and TorchScript source.

"""
    Model()
    load_torchscript(path) -> Model

A TorchScript module (see accel.h, "Models"). Build one from a chain,
`Accel.Model(Accel.Chain(Accel.Dense(784 => 64, relu)))`, or with `add_layer!` and `define!`:

    m = Accel.Model()
    add_layer!(m, "fc1", :linear; in_features = 784, out_features = 64)
    define!(m, \"\"\"
    def forward(self, x):
        return self.fc1.forward(x)
    \"\"\")

Call a method with `m(x...)` (forward) or `m(:method, x...)`: inputs are tensors, arrays or
numbers; a method with one result returns a `Tensor`, with several a tuple of them. Results keep
their autograd history (close a loss once `backward` is done: it holds the step's graph), or
use the do-block form, `m(:training_step, x, y) do loss ... end`, which closes them.
`Accel.trainmode!(m)`, `Accel.testmode!(m)`, `parameter_count(m)`, `tensor_names(m)`, `m[name]` (a copy of
a parameter or buffer), `save_torchscript(m, path)`.
"""
mutable struct Model <: Handle
    ptr::Ptr{Cvoid}
    Model(pointer::Ptr{Cvoid}) = own(new(pointer))
end

Model() = Model(@out(Ptr{Cvoid}, accel_model_new()))
Model(f::Function) = with_handle(f, Model())

"""
    empty_model(; include_buffers = false) -> Model

A `Model` whose layers are built without their weights (Accelerate's `init_empty_weights`): each
parameter `add_layer!` makes has a shape and a dtype on LibTorch's meta device and no memory;
buffers too with `include_buffers`, else they are made on the CPU as usual. `load_pretrained!` or
`load_checkpoint_in_model` then fills each tensor in place, read straight from the file; a tensor
a not-strict load lacks gets its layer's initialisation. Until then whatever needs a tensor's
values (`m[name]`, calling it, `prepare`, an optimizer step, saving) throws `ERR_STATE` naming it.
"""
empty_model(; include_buffers::Bool = false) =
    Model(@out(Ptr{Cvoid}, accel_model_new_empty(include_buffers)))

free_handle(::Model, p) = @acall accel_model_free(p)

"""
    load_torchscript(path) -> Model

Loads a TorchScript archive (torch.jit.save, tch-rs, `save_torchscript`). An unreadable or
invalid file throws `ERR_IO` naming it.
"""
function load_torchscript(path::AbstractString)
    Model(@out(Ptr{Cvoid}, accel_model_load_torchscript(c_text(path))))
end

"""
    add_layer!(model, name, kind; options...)
    add_layer!(model, name, kind, spec::AbstractString)

Adds layer `name` of `kind` (`:linear`, `:conv2d`, `:batch_norm2d`, `:layer_norm`,
`:embedding`), initialised as the matching torch.nn layer: `add_layer!(m, "conv1", :conv2d;
in_channels = 1, out_channels = 32, kernel_size = 3)`.
"""
function add_layer!(model::Model, name, kind, spec::AbstractString)
    @check accel_model_add_layer(model, c_text(name), c_text(kind), c_text(spec))
    model
end
add_layer!(model::Model, name, kind; options...) =
    add_layer!(model, name, kind, join(("$key=$(option_text(value))" for (key, value) in options), " "))

"""
    add_parameter!(model, name, t::Tensor)

Lends `t` to the model as parameter `name` (`"fc1.weight"`), no copy: training changes it in
place (accel.h, "Models of the host's own tensors"). It must be a floating-point autograd leaf
that requires grad (`set_requires_grad!`), share memory with no other lent tensor and sit on the
model's device. The model keeps its own reference: `t` may be closed afterwards.
"""
function add_parameter!(model::Model, name, t::Tensor)
    @check accel_model_add_parameter(model, c_text(name), t)
    model
end

"""
    add_buffer!(model, name, t::Tensor)

Lends `t` as buffer `name`: saved and copied from rank 0, never trained.
"""
function add_buffer!(model::Model, name, t::Tensor)
    @check accel_model_add_buffer(model, c_text(name), t)
    model
end

"""
    forward(f, model)

Runs the caller's own forward `f()` of a model of lent tensors (`forward(model) do ... end`):
rank 0's buffers are copied to every rank first (a collective when the model has buffers) and
`f` runs under the accelerator's mixed precision. LibTorch's autocast is per OS thread: `f`
must not yield to another task that could move it.
"""
function forward(f, model::Model)
    @check accel_model_forward_begin(model)
    try
        return f()
    finally
        @check accel_model_forward_end(model)
    end
end

"""
    define!(model, source)

Compiles TorchScript source defining methods of the model (forward, training_step, ...). Source
that does not compile throws `ERR_INVALID_ARGUMENT` with TorchScript's message.
"""
function define!(model::Model, source::AbstractString)
    @check accel_model_define(model, c_text(source))
    model
end

"""
    call(model, method, inputs...) -> Tensor or Tuple of Tensors

Calls `method` (a Symbol or string) once; `model(inputs...)` is `call(model, :forward, ...)`.
"""
function call(model::Model, method::Union{Symbol,AbstractString}, inputs...)
    name = c_text(method)
    list = with_tensors(inputs) do tensors
        handles = HandleArray(tensors)
        @out Ptr{Cvoid} accel_model_call(model, name, handles, length(handles))
    end
    results = take_tensor_list(list)
    length(results) == 1 ? results[1] : Tuple(results)
end
(model::Model)(method::Symbol, inputs...) = call(model, method, inputs...)
(model::Model)(inputs...) = call(model, :forward, inputs...)

"""
    call(f, model, method, inputs...)
    model(inputs...) do results... end
    model(:method, inputs...) do results... end

The do-block form: `f` gets the method's results (one argument per result) and they are closed
when it returns, with what `f` returns the call's value. A training step needs no close:

    value = model(:training_step, x, y) do loss
        backward(acc, loss)
        only(loss)
    end
"""
function call(f::Function, model::Model, method::Union{Symbol,AbstractString}, inputs...)
    results = call(model, method, inputs...)
    try
        results isa Tensor ? f(results) : f(results...)
    finally
        results isa Tensor ? close(results) : foreach(close, results)
    end
end
(model::Model)(f::Function, method::Symbol, inputs...) = call(f, model, method, inputs...)
(model::Model)(f::Function, inputs...) = call(f, model, :forward, inputs...)

"""
    trainmode!(model, on = true)
    testmode!(model)

Train mode (dropout active, batch-norm statistics updated) or eval mode.
"""
function trainmode!(model::Model, on::Bool = true)
    @check accel_model_train(model, on)
    model
end
"Eval mode: `trainmode!(model, false)`."
testmode!(model::Model) = trainmode!(model, false)

"The total number of parameter elements."
function parameter_count(model::Model)
    Int(@out Int64 accel_model_parameter_element_count(model))
end

"The names of the parameters and buffers (\"fc1.weight\", ...), parameters first."
function tensor_names(model::Model)
    count = @out Csize_t accel_model_tensor_count(model)
    map(0:Int(count)-1) do i
        read_text() do buffer, capacity, size
            @acall accel_model_tensor_name(model, i, buffer, capacity, size)
        end
    end
end

"A copy of parameter or buffer `name` (detached; later training does not change it)."
function Base.getindex(model::Model, name::AbstractString)
    pointer = @out Ptr{Cvoid} accel_model_tensor(model, c_text(name))
    Tensor(pointer, Val(:own))
end

"Saves the model as a TorchScript archive (torch.jit.load and `load_torchscript` read it)."
function save_torchscript(model::Model, path::AbstractString)
    @check accel_model_save_torchscript(model, c_text(path))
    path
end
