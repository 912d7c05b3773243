//! Pretrained checkpoints loaded as Hugging Face transformers' `from_pretrained` loads them.

use std::ffi::{c_char, c_void, CStr};
use std::path::Path;

use libaccel_sys as sys;

use crate::callback::{FailureSlot, Surfaced};
use crate::error::{BoxError, Error, Result, Status};
use crate::ffi::{c_string, make, path_string, read_text, take_bytes_list};
use crate::model::Model;

/// The options of [`Model::load_pretrained`]; [`new`](PretrainedOptions::new) (or `default`) is
/// transformers' `from_pretrained` default: not strict, no base model prefix, any shape mismatch
/// an error.
///
/// ```
/// use accel::PretrainedOptions;
/// let options = PretrainedOptions::new().base_model_prefix("bert").strict(false);
/// assert_eq!(options.spec()?, "strict=false base_model_prefix=bert");
/// assert_eq!(PretrainedOptions::new().spec()?, "");
/// # Ok::<(), accel::Error>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PretrainedOptions {
    strict: Option<bool>,
    base_model_prefix: Option<String>,
    ignore_mismatched_sizes: Option<bool>,
    model_name: Option<String>,
    architecture_matches: Option<bool>,
}

impl PretrainedOptions {
    /// Every option at the library's default.
    pub fn new() -> Self {
        Self::default()
    }

    /// Anything missing, unexpected or mismatched is an error ([`Status::InvalidArgument`], or
    /// [`Status::Shape`] for shapes); otherwise (the default) missing tensors keep their
    /// initialisation and checkpoint tensors the model lacks are left (the fine-tune of a new
    /// head).
    #[must_use]
    pub fn strict(mut self, strict: bool) -> Self {
        self.strict = Some(strict);
        self
    }

    /// transformers' `base_model_prefix` (`"bert"`), decided once per load: a checkpoint of the
    /// base model (`"encoder.x"`) loads into a model holding it under the prefix
    /// (`"bert.encoder.x"`), and a task checkpoint (`"bert.x"`) into the base model (`"x"`).
    /// An empty prefix is none (the default).
    #[must_use]
    pub fn base_model_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.base_model_prefix = Some(prefix.into());
        self
    }

    /// Not strict: a tensor of another shape keeps the model's and is reported in
    /// [`LoadReport::mismatched`]; otherwise (the default) any shape mismatch is
    /// [`Status::Shape`].
    #[must_use]
    pub fn ignore_mismatched_sizes(mut self, ignore: bool) -> Self {
        self.ignore_mismatched_sizes = Some(ignore);
        self
    }

    /// The model's name in the report's messages (`"BertForSequenceClassification"`); empty or
    /// not given: `"the model"`.
    #[must_use]
    pub fn model_name(mut self, name: impl Into<String>) -> Self {
        self.model_name = Some(name.into());
        self
    }

    /// The checkpoint was made for this very architecture (transformers'
    /// `config.architectures`): unexpected tensors are then a warning, otherwise (the default)
    /// information.
    #[must_use]
    pub fn architecture_matches(mut self, matches: bool) -> Self {
        self.architecture_matches = Some(matches);
        self
    }

    /// The options given as the string form takes them, `(key, value)`, in the order above; an
    /// empty text value is left out (the default).
    pub fn pairs(&self) -> Vec<(&'static str, String)> {
        let flag = |key, value: Option<bool>| value.map(|v| (key, v.to_string()));
        let text = |key, value: &Option<String>| {
            value
                .as_ref()
                .filter(|v| !v.is_empty())
                .map(|v| (key, v.clone()))
        };
        [
            flag("strict", self.strict),
            text("base_model_prefix", &self.base_model_prefix),
            flag("ignore_mismatched_sizes", self.ignore_mismatched_sizes),
            text("model_name", &self.model_name),
            flag("architecture_matches", self.architecture_matches),
        ]
        .into_iter()
        .flatten()
        .collect()
    }

    /// The options as [`Model::load_pretrained_spec`] takes them
    /// (`"strict=true base_model_prefix=bert"`). A text value holding a separator of that form
    /// (space, comma, tab, newline) is [`Status::InvalidArgument`] here rather than another
    /// option there.
    pub fn spec(&self) -> Result<String> {
        let pairs = self.pairs();
        if let Some((key, value)) = pairs
            .iter()
            .find(|(_, v)| v.contains([' ', ',', '\t', '\n']))
        {
            return Err(Error::new(
                Status::InvalidArgument,
                format!("load option {key}: {value:?} holds a space, comma, tab or newline"),
            ));
        }
        let pairs: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={v}")).collect();
        Ok(pairs.join(" "))
    }
}

/// What [`Model::load_pretrained`] found and did, as transformers reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadReport {
    /// The model's tensors no checkpoint tensor filled (they keep their initialisation), sorted,
    /// in the checkpoint's naming (transformers' keys).
    pub missing: Vec<String>,
    /// The checkpoint's tensors not used, sorted.
    pub unexpected: Vec<String>,
    /// The tensors left for their shape ([`PretrainedOptions::ignore_mismatched_sizes`]), sorted.
    pub mismatched: Vec<String>,
    /// transformers' WARNING messages (its default verbosity), each starting with `"WARNING: "`.
    pub warnings: String,
    /// Every message, the INFO ones (`"INFO: "`) too, in transformers' order and words.
    pub text: String,
}

impl Model {
    /// Loads a pretrained checkpoint into the model as Hugging Face transformers'
    /// `from_pretrained` does (4.4x): from a safetensors file, a `model.safetensors.index.json`,
    /// or a directory holding either (as [`load_checkpoint_in_model`](crate::load_checkpoint_in_model)),
    /// and returns its report.
    ///
    /// Floating checkpoint tensors are cast to the model's dtype (fp16 and bf16 into fp32 and
    /// back); a floating tensor for an integer one, or the other way, is [`Status::Dtype`].
    /// Tensors that share storage (tied weights) count as loaded when one of them is. An
    /// unreadable file is [`Status::Io`]. On any error found before the tensors' bytes are read
    /// (files, headers, dtypes, the plan) the model is unchanged; a read failing midway is
    /// [`Status::Io`] saying the model is partly loaded.
    pub fn load_pretrained(
        &mut self,
        path: impl AsRef<Path>,
        options: &PretrainedOptions,
    ) -> Result<LoadReport> {
        self.load_pretrained_spec(path, &options.spec()?)
    }

    /// [`load_pretrained`](Model::load_pretrained) with the options as text, `key=value` pairs
    /// (`"strict=true base_model_prefix=bert"`; keys as [`PretrainedOptions`]' methods), checked
    /// by the library.
    pub fn load_pretrained_spec(
        &mut self,
        path: impl AsRef<Path>,
        options: &str,
    ) -> Result<LoadReport> {
        let path = path_string(path.as_ref())?;
        let options = c_string(options, "options")?;
        // SAFETY: live handle, NUL-terminated strings, valid out pointer.
        let raw = make(|out| unsafe {
            sys::accel_load_pretrained(self.as_raw(), path.as_ptr(), options.as_ptr(), out)
        })?;
        Report(raw).read()
    }

    /// [`load_pretrained`](Model::load_pretrained) with the checkpoint's names mapped first, as
    /// transformers' `key_mapping`: `map` gets each checkpoint tensor's name (once, in name
    /// order, before any byte is read) and returns the model's name for it, or `None` to leave
    /// it unused (reported as unexpected under its own name). The new names then follow every
    /// rule of `load_pretrained`, the base model prefix included, and the report uses them.
    ///
    /// A panic in `map` stops the load with the model unchanged and is resumed here; an empty
    /// name or one holding a NUL byte is [`Status::InvalidArgument`], a name longer than 4095
    /// bytes [`Status::Callback`], two tensors given one name [`Status::InvalidArgument`], each
    /// with the model unchanged.
    ///
    /// ```no_run
    /// # use accel::{Model, PretrainedOptions};
    /// # fn f(model: &mut Model) -> accel::Result<()> {
    /// let options = PretrainedOptions::new().base_model_prefix("bert");
    /// let report = model.load_pretrained_mapped("ckpt", &options, |name| {
    ///     (!name.starts_with("lm_head.")).then(|| name.replace(".gamma", ".weight"))
    /// })?;
    /// # Ok(()) }
    /// ```
    pub fn load_pretrained_mapped<F>(
        &mut self,
        path: impl AsRef<Path>,
        options: &PretrainedOptions,
        map: F,
    ) -> Result<LoadReport>
    where
        F: FnMut(&str) -> Option<String>,
    {
        let path = path_string(path.as_ref())?;
        let options = c_string(&options.spec()?, "options")?;
        let mut call = MapCall {
            map,
            failure: FailureSlot::default(),
        };
        let user_data: *mut MapCall<F> = &mut call;
        // SAFETY: live handle, NUL-terminated strings, valid out pointer; `user_data` is `call`,
        // alive for the whole call, and `map_name::<F>` reads it as that type.
        let raw = make(|out| unsafe {
            sys::accel_load_pretrained_mapped(
                self.as_raw(),
                path.as_ptr(),
                options.as_ptr(),
                Some(map_name::<F>),
                user_data.cast::<c_void>(),
                out,
            )
        })
        .map_err(|e| call.failure.resolve(e))?;
        Report(raw).read()
    }
}

/// A name map and what it left behind when it failed.
struct MapCall<F> {
    map: F,
    failure: FailureSlot,
}

/// The library's name map callback for [`Model::load_pretrained_mapped`].
unsafe extern "C" fn map_name<F: FnMut(&str) -> Option<String>>(
    name: *const c_char,
    out: *mut c_char,
    capacity: usize,
    user_data: *mut c_void,
) -> i32 {
    // SAFETY: `user_data` is the MapCall of the load that is running, on this thread; `name` is
    // a NUL-terminated string the library lends for the call.
    let call = unsafe { &mut *user_data.cast::<MapCall<F>>() };
    let name = unsafe { CStr::from_ptr(name) }.to_string_lossy();
    let map = &mut call.map;
    let mapped = call.failure.catch(|| -> std::result::Result<_, BoxError> {
        match map(&name) {
            None => Ok(Vec::new()),
            Some(n) if n.is_empty() || n.contains('\0') => Err(Box::new(Surfaced(Error::new(
                Status::InvalidArgument,
                format!(
                    "the name map's name for {name:?} is {}",
                    if n.is_empty() {
                        "empty (None leaves it unused)"
                    } else {
                        "holding a NUL byte"
                    }
                ),
            )))),
            Some(n) => Ok(n.into_bytes()),
        }
    });
    let Some(mut bytes) = mapped else { return 1 };
    // With its NUL; a name that does not fit goes without it, and the library names it.
    bytes.push(0);
    let n = bytes.len().min(capacity);
    // SAFETY: the library gives `capacity` writable bytes at `out`.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr().cast::<c_char>(), out, n) };
    0
}

/// The library's report, freed when the call that read it returns (or fails).
struct Report(*mut sys::accel_load_report);

impl Report {
    fn read(self) -> Result<LoadReport> {
        Ok(LoadReport {
            missing: self.keys("missing")?,
            unexpected: self.keys("unexpected")?,
            mismatched: self.keys("mismatched")?,
            warnings: self.text(true)?,
            text: self.text(false)?,
        })
    }

    fn keys(&self, kind: &str) -> Result<Vec<String>> {
        let kind = c_string(kind, "kind")?;
        // SAFETY: live report, NUL-terminated kind, valid out pointer.
        let list = make(|out| unsafe { sys::accel_load_report_keys(self.0, kind.as_ptr(), out) })?;
        Ok(take_bytes_list(list)?
            .into_iter()
            .map(|name| String::from_utf8_lossy(&name).into_owned())
            .collect())
    }

    fn text(&self, warnings_only: bool) -> Result<String> {
        // SAFETY: live report; buffer from read_text.
        read_text(|buf, cap, size| unsafe {
            sys::accel_load_report_text(self.0, warnings_only, buf, cap, size)
        })
    }
}

impl Drop for Report {
    fn drop(&mut self) {
        // SAFETY: the report is ours and freed once, here.
        unsafe { sys::accel_load_report_free(self.0) }
    }
}
