//! TorchScript models: built from layers and TorchScript source, or loaded from an archive.

use std::path::Path;

use libaccel_sys as sys;

use crate::error::{check, Result};
use crate::ffi::{
    c_string, ensure_supported_library, make, owned_handle, path_string, query, read_text,
};
use crate::layers::Layer;
use crate::tensor::{take_list, Tensor};

owned_handle!(
    /// A TorchScript module: its parameters, buffers and methods.
    ///
    /// Built here from libaccel's layer catalogue plus methods in TorchScript source, or loaded
    /// from an archive (`torch.jit.save`, tch-rs, [`Model::save_torchscript`]). Calls on a model
    /// and the optimizers and schedulers over it (once prepared: the whole training family of
    /// the accelerator) are serialised by the library, so sharing it across threads is safe.
    ///
    /// ```
    /// use accel::{layers::Linear, Model, Tensor};
    /// let mut model = Model::new()?;
    /// model.add("fc", Linear::new(3, 2))?; // or add_layer("fc", "linear", "in_features=3 ...")
    /// model.define("def forward(self, x):\n    return self.fc.forward(x)\n")?;
    /// let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[1, 3])?;
    /// let outputs = model.call("forward", &[&x])?;
    /// assert_eq!(outputs[0].shape()?, vec![1, 2]);
    /// assert!(model.call("forward", &[]).is_err()); // TorchScript's message, as an Err
    /// # Ok::<(), accel::Error>(())
    /// ```
    Model,
    sys::accel_model,
    sys::accel_model_free
);

impl Model {
    /// An empty model in train mode.
    pub fn new() -> Result<Model> {
        ensure_supported_library()?;
        // SAFETY: valid out pointer.
        let raw = make(|out| unsafe { sys::accel_model_new(out) })?;
        // SAFETY: a new handle nothing else owns.
        Ok(unsafe { Model::from_raw(raw) }.expect("non-null"))
    }

    /// An empty model whose layers are built without their weights (Accelerate's
    /// `init_empty_weights`): each parameter [`add_layer`](Model::add_layer) makes has a shape
    /// and a dtype on LibTorch's meta device and no memory; buffers too with `include_buffers`,
    /// else they are made on the CPU as usual. [`load_pretrained`](Model::load_pretrained) or
    /// [`load_checkpoint_in_model`](crate::load_checkpoint_in_model) then fills each tensor in
    /// place, read straight from the file; a tensor a not-strict load lacks gets its layer's
    /// initialisation. Until then whatever needs a tensor's values ([`tensor`](Model::tensor),
    /// [`call`](Model::call), prepare, an optimizer step, saving) is [`Status::State`](crate::Status)
    /// naming it. tch 0.24's `Device` has no meta variant, so a `VarStore` cannot be lent empty.
    pub fn new_empty(include_buffers: bool) -> Result<Model> {
        ensure_supported_library()?;
        // SAFETY: valid out pointer.
        let raw = make(|out| unsafe { sys::accel_model_new_empty(include_buffers, out) })?;
        // SAFETY: a new handle nothing else owns.
        Ok(unsafe { Model::from_raw(raw) }.expect("non-null"))
    }

    /// Loads a TorchScript archive.
    pub fn load_torchscript(path: impl AsRef<Path>) -> Result<Model> {
        ensure_supported_library()?;
        let path = path_string(path.as_ref())?;
        // SAFETY: NUL-terminated path, valid out pointer.
        let raw = make(|out| unsafe { sys::accel_model_load_torchscript(path.as_ptr(), out) })?;
        // SAFETY: a new handle nothing else owns.
        Ok(unsafe { Model::from_raw(raw) }.expect("non-null"))
    }

    /// Adds layer `name` of `kind` (`linear`, `conv2d`, `batch_norm2d`, `layer_norm`,
    /// `embedding`) with options `spec` (`"in_features=784 out_features=10"`), initialised as
    /// the matching torch.nn layer. [`add`](Model::add) takes the same layers typed.
    pub fn add_layer(&mut self, name: &str, kind: &str, spec: &str) -> Result<()> {
        let (name, kind, spec) = (
            c_string(name, "name")?,
            c_string(kind, "kind")?,
            c_string(spec, "spec")?,
        );
        // SAFETY: live handle, NUL-terminated strings.
        check(unsafe {
            sys::accel_model_add_layer(self.as_raw(), name.as_ptr(), kind.as_ptr(), spec.as_ptr())
        })
    }

    /// Adds layer `name` of the typed catalogue ([`layers`](crate::layers)), e.g.
    /// `model.add("fc", Linear::new(784, 10).bias(false))`: [`add_layer`](Model::add_layer) with
    /// options checked by the compiler.
    pub fn add(&mut self, name: &str, layer: impl Layer) -> Result<()> {
        self.add_layer(name, layer.kind(), &layer.spec())
    }

    /// Lends the caller's tensor to the model as parameter `name` (`"fc1.weight"`), no copy:
    /// training changes it in place (accel.h, "Models of the host's own tensors"). It must be a
    /// floating-point autograd leaf that requires grad ([`Tensor::set_requires_grad`]), share
    /// memory with no other lent tensor and sit on the model's device. The model keeps its own
    /// reference: the caller may drop `tensor` afterwards.
    pub fn add_parameter(&mut self, name: &str, tensor: &Tensor) -> Result<()> {
        let name = c_string(name, "name")?;
        // SAFETY: live handles, NUL-terminated name.
        check(unsafe {
            sys::accel_model_add_parameter(self.as_raw(), name.as_ptr(), tensor.as_raw())
        })
    }

    /// Lends the caller's tensor as buffer `name`: saved and copied from rank 0, never trained.
    pub fn add_buffer(&mut self, name: &str, tensor: &Tensor) -> Result<()> {
        let name = c_string(name, "name")?;
        // SAFETY: live handles, NUL-terminated name.
        check(unsafe { sys::accel_model_add_buffer(self.as_raw(), name.as_ptr(), tensor.as_raw()) })
    }

    /// Runs the caller's own forward `f` of a model of lent tensors: rank 0's buffers are copied
    /// to every rank first (a collective when the model has buffers) and `f` runs under the
    /// accelerator's mixed precision (LibTorch's autocast, on this thread), which ends with it.
    pub fn forward<R>(&self, f: impl FnOnce() -> R) -> Result<R> {
        // SAFETY: live handle.
        check(unsafe { sys::accel_model_forward_begin(self.as_raw()) })?;
        struct End(*mut sys::accel_model);
        impl Drop for End {
            fn drop(&mut self) {
                // SAFETY: the handle outlives this guard; it closes the begin above, on this
                // thread, even when `f` panics.
                unsafe { sys::accel_model_forward_end(self.0) };
            }
        }
        let end = End(self.as_raw());
        let out = f();
        std::mem::forget(end);
        // SAFETY: live handle; closes the begin above.
        check(unsafe { sys::accel_model_forward_end(self.as_raw()) })?;
        Ok(out)
    }

    /// Compiles TorchScript source defining methods (`forward`, a `training_step` returning the
    /// loss, ...). Layers are called as `self.fc1.forward(x)`.
    pub fn define(&mut self, source: &str) -> Result<()> {
        let source = c_string(source, "source")?;
        // SAFETY: live handle, NUL-terminated source.
        check(unsafe { sys::accel_model_define(self.as_raw(), source.as_ptr()) })
    }

    /// Calls `method` once with `inputs` and returns its results (a tensor, or each tensor of a
    /// tuple or list), with their autograd history: a loss can go to
    /// [`Accelerator::backward`](crate::Accelerator::backward). On a prepared model with
    /// buffers, every call is a collective (rank 0's buffers are broadcast first).
    pub fn call(&self, method: &str, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
        let method = c_string(method, "method")?;
        let raws: Vec<*const sys::accel_tensor> =
            inputs.iter().map(|t| t.as_raw() as *const _).collect();
        // SAFETY: live handles; `raws` valid for its length.
        let list = make(|out| unsafe {
            sys::accel_model_call(
                self.as_raw(),
                method.as_ptr(),
                raws.as_ptr(),
                raws.len(),
                out,
            )
        })?;
        take_list(list)
    }

    /// Calls a method that returns one tensor (a loss, say) and returns it.
    pub fn call1(&self, method: &str, inputs: &[&Tensor]) -> Result<Tensor> {
        let mut outputs = self.call(method, inputs)?;
        if outputs.is_empty() {
            return Err(crate::Error::new(
                crate::Status::InvalidArgument,
                format!("method {method} returned no tensor"),
            ));
        }
        Ok(outputs.swap_remove(0))
    }

    /// Train mode (dropout active, batch-norm statistics updated) or eval mode.
    pub fn train(&mut self, training: bool) -> Result<()> {
        // SAFETY: live handle.
        check(unsafe { sys::accel_model_train(self.as_raw(), training) })
    }

    /// The total number of parameter elements.
    pub fn parameter_element_count(&self) -> Result<i64> {
        // SAFETY: live handle, valid out pointer.
        query(|out| unsafe { sys::accel_model_parameter_element_count(self.as_raw(), out) })
    }

    /// The number of named parameters and buffers.
    pub fn tensor_count(&self) -> Result<usize> {
        // SAFETY: live handle, valid out pointer.
        query(|out| unsafe { sys::accel_model_tensor_count(self.as_raw(), out) })
    }

    /// The name of parameter or buffer `index` (parameters first, in registration order).
    pub fn tensor_name(&self, index: usize) -> Result<String> {
        // SAFETY: live handle; buffer from read_text.
        read_text(|buf, cap, size| unsafe {
            sys::accel_model_tensor_name(self.as_raw(), index, buf, cap, size)
        })
    }

    /// Every parameter and buffer name, in order.
    pub fn tensor_names(&self) -> Result<Vec<String>> {
        (0..self.tensor_count()?)
            .map(|i| self.tensor_name(i))
            .collect()
    }

    /// A detached copy of parameter or buffer `name`.
    pub fn tensor(&self, name: &str) -> Result<Tensor> {
        let name = c_string(name, "name")?;
        // SAFETY: live handle, NUL-terminated name, valid out pointer.
        let raw =
            make(|out| unsafe { sys::accel_model_tensor(self.as_raw(), name.as_ptr(), out) })?;
        // SAFETY: a new handle nothing else owns.
        Ok(unsafe { Tensor::from_raw(raw) }.expect("non-null"))
    }

    /// Saves the model as a TorchScript archive.
    pub fn save_torchscript(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path_string(path.as_ref())?;
        // SAFETY: live handle, NUL-terminated path.
        check(unsafe { sys::accel_model_save_torchscript(self.as_raw(), path.as_ptr()) })
    }
}

/// Accelerate's `load_checkpoint_in_model`: loads weights into `model` from a safetensors file,
/// a `model.safetensors.index.json`, or a directory holding either. Names, shapes and dtypes must
/// match; otherwise a `Shape` error lists the differences and the model is unchanged.
pub fn load_checkpoint_in_model(model: &mut Model, path: impl AsRef<Path>) -> Result<()> {
    let path = path_string(path.as_ref())?;
    // SAFETY: live handle, NUL-terminated path.
    check(unsafe { sys::accel_load_checkpoint_in_model(model.as_raw(), path.as_ptr()) })
}
