//! tch-rs interop (feature `tch`): a `tch::nn::VarStore` prepared as a model, and tensors between
//! tch and libaccel without copies. tch 0.24.0 is built for LibTorch 2.11.0; libaccel must run on
//! that very LibTorch build (`tools/fetch_torch.sh 2.11.0`), which [`check_tch`] verifies before
//! any tensor crosses.
use std::ffi::c_void;

use crate::{Model, Result, Tensor};

/// The LibTorch version tch 0.24.0 is built for (torch-sys's `TORCH_VERSION`).
pub const TCH_TORCH_VERSION: &str = "2.11.0";

/// Checks once that libaccel runs on the LibTorch tch links: version 2.11.0 with the C++11 ABI
/// (torch-sys's default, `LIBTORCH_CXX11_ABI=1`). A mismatch is `Status::Unsupported` naming both.
pub fn check_tch() -> Result<()> {
    static CHECK: std::sync::OnceLock<std::result::Result<(), crate::Error>> =
        std::sync::OnceLock::new();
    CHECK
        .get_or_init(|| crate::check_torch(TCH_TORCH_VERSION, Some(true), std::ptr::null()))
        .clone()
}

impl Tensor {
    /// The same tensor as a libaccel [`Tensor`], no copy (a new reference to its storage and
    /// autograd history): a loss computed with tch goes to
    /// [`Accelerator::backward`](crate::Accelerator::backward) this way.
    pub fn from_tch(t: &tch::Tensor) -> Result<Tensor> {
        check_tch()?;
        // SAFETY: tch's C_tensor is a `torch::Tensor*` (torch-sys's libtch/torch_api.h), alive
        // while `t` is; libaccel takes its own reference to the tensor during the call.
        unsafe { Tensor::from_torch_ptr(t.as_ptr() as *mut c_void) }
    }

    /// The same tensor as a `tch::Tensor`, no copy (a new reference, as `shallow_clone`).
    pub fn to_tch(&self) -> Result<tch::Tensor> {
        check_tch()?;
        let ptr = self.as_torch_ptr()?;
        // SAFETY: `ptr` is the live `at::Tensor*` inside `self`; clone_from_ptr makes a new
        // handle of the same TensorImpl and does not take ownership of `ptr`.
        Ok(unsafe { tch::Tensor::clone_from_ptr(ptr as *mut _) })
    }
}

impl Model {
    /// A model of the variables of `vs`, no copy: training changes them in place. Trainable
    /// variables are lent as parameters, the others (`var_no_train`, frozen ones) as buffers,
    /// under VarStore's own names ("conv1.weight"), in name order (VarStore keeps no other that
    /// names them). The forward stays tch's; run it inside [`Model::forward`].
    pub fn from_var_store(vs: &tch::nn::VarStore) -> Result<Model> {
        check_tch()?;
        let mut named: Vec<(String, tch::Tensor)> = vs.variables().into_iter().collect();
        named.sort_by(|a, b| a.0.cmp(&b.0));
        let mut model = Model::new()?;
        for (name, t) in &named {
            let lent = Tensor::from_tch(t)?;
            if t.requires_grad() {
                model.add_parameter(name, &lent)?;
            } else {
                model.add_buffer(name, &lent)?;
            }
        }
        Ok(model)
    }
}
